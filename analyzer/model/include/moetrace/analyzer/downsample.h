// Series of time points thinned for plots and JSON, peaks kept.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moetrace::analyzer {

// A step function reduced to at most `max_points` points, keeping the
// largest value of every bucket (peaks survive).
template <class Point, class Value>
std::vector<Point> downsample_max(const std::vector<Point>& points, int max_points, Value Point::*value) {
  if (max_points < 2 || points.size() <= static_cast<std::size_t>(max_points)) return points;
  const auto t0 = points.front().ts_ns, t1 = points.back().ts_ns;
  const auto buckets = static_cast<std::int64_t>(max_points - 1);
  const double width = static_cast<double>(t1 - t0) / static_cast<double>(buckets);
  std::vector<Point> out;
  Value carried{};  // the step value entering the bucket
  std::size_t i = 0;
  for (std::int64_t b = 0; b < buckets && i + 1 < points.size(); ++b) {
    const auto end = b + 1 == buckets ? t1 : t0 + static_cast<std::int64_t>(width * static_cast<double>(b + 1));
    if (points[i].ts_ns >= end) continue;
    Point p = points[i];
    p.*value = carried;
    for (; i + 1 < points.size() && points[i].ts_ns < end; ++i) {
      p.*value = std::max(p.*value, points[i].*value);
      carried = points[i].*value;
    }
    out.push_back(p);
  }
  out.push_back(points.back());
  return out;
}

}  // namespace moetrace::analyzer
