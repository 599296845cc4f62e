#include "moetrace/gui/time_axis.h"

#include <algorithm>
#include <cmath>

#include "moetrace/gui/format.h"

namespace moetrace::gui {

TimeAxis TimeAxis::fit(double t0_ns, double t1_ns, int width_px) {
  TimeAxis a;
  a.width_px = std::max(1, width_px);
  a.t0_ns = t0_ns;
  a.ns_per_px = std::max(t1_ns - t0_ns, 1e-9) / a.width_px;
  return a;
}

namespace {

double clamp_ns_per_px(double ns_per_px, int width_px, const AxisLimits& l) {
  const double span = std::max(l.trace_end_ns - l.trace_start_ns, 1.0);
  const double max_nspp = span * AxisLimits::kMaxWindowFactor / std::max(1, width_px);
  if (!std::isfinite(ns_per_px)) return max_nspp;
  return std::clamp(ns_per_px, std::min(AxisLimits::kMinNsPerPx, max_nspp), max_nspp);
}

double clamp_t0(double t0, double window, const AxisLimits& l) {
  const double lo = l.trace_start_ns - AxisLimits::kEdgeMargin * window;
  const double hi = l.trace_end_ns - window + AxisLimits::kEdgeMargin * window;
  if (!std::isfinite(t0)) return lo;
  if (lo > hi) return (l.trace_start_ns + l.trace_end_ns) / 2 - window / 2;
  return std::clamp(t0, lo, hi);
}

}  // namespace

TimeAxis clamp_axis(TimeAxis a, const AxisLimits& limits) {
  a.width_px = std::max(1, a.width_px);
  a.ns_per_px = clamp_ns_per_px(a.ns_per_px, a.width_px, limits);
  a.t0_ns = clamp_t0(a.t0_ns, a.window_ns(), limits);
  return a;
}

TimeAxis zoom_axis(const TimeAxis& a, double factor, double anchor_x, const AxisLimits& limits) {
  if (!(factor > 0) || !std::isfinite(factor)) return a;
  const double anchor_t = a.t(anchor_x);
  TimeAxis z = a;
  z.ns_per_px = clamp_ns_per_px(a.ns_per_px / factor, a.width_px, limits);
  z.t0_ns = anchor_t - anchor_x * z.ns_per_px;
  return clamp_axis(z, limits);
}

TimeAxis pan_axis(const TimeAxis& a, double dx_px, const AxisLimits& limits) {
  TimeAxis p = a;
  p.t0_ns += dx_px * a.ns_per_px;
  return clamp_axis(p, limits);
}

double ruler_step_ns(double ns_per_px, double min_label_px) {
  const double want = std::max(ns_per_px * min_label_px, 1e-6);
  double decade = std::pow(10.0, std::floor(std::log10(want)));
  for (;;) {
    for (double m : {1.0, 2.0, 5.0})
      if (m * decade >= want * (1 - 1e-9)) return m * decade;
    decade *= 10;
  }
}

std::vector<RulerTick> ruler_ticks(const TimeAxis& a, double origin_ns, double min_label_px) {
  std::vector<RulerTick> ticks;
  if (!(a.ns_per_px > 0) || a.width_px <= 0) return ticks;
  const double step = ruler_step_ns(a.ns_per_px, min_label_px);
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const int minors = std::lround(mantissa) == 2 ? 4 : 5;
  const double minor = step / minors;
  const double rel0 = a.t0_ns - origin_ns;
  const double rel1 = a.t1_ns() - origin_ns;
  // Integer tick numbers so that labels never accumulate rounding error.
  const auto first = static_cast<std::int64_t>(std::floor(rel0 / minor));
  const auto last = static_cast<std::int64_t>(std::ceil(rel1 / minor));
  if (last - first > 100000) return ticks;  // cannot happen within AxisLimits; no runaway loop
  for (std::int64_t k = first; k <= last; ++k) {
    const double rel = static_cast<double>(k) * minor;
    RulerTick t;
    t.t_ns = rel;
    t.x = a.x(rel + origin_ns);
    if (t.x < -0.5 || t.x > a.width_px + 0.5) continue;
    t.major = k % minors == 0;
    if (t.major) t.label = format_time(rel, step);
    ticks.push_back(std::move(t));
  }
  return ticks;
}

}  // namespace moetrace::gui
