// The GPU time of every op, shared by the analyses (private to the analyzer).
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "moetrace/analyzer/interval.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// The intervals of every op: its attributed activities (kernels, copies; see
// projection.h), else its own [start, end) range. CSR over trace.ops.
struct OpIntervals {
  std::vector<std::size_t> begin;
  std::vector<Interval> iv;

  explicit OpIntervals(const Trace& t) {
    // Counted, then filled, in `begin` itself (no count or cursor arrays
    // beside it: 16 bytes an op more at this step's peak).
    const std::size_t n = t.ops.size();
    begin.assign(n + 1, 0);
    for (const auto& a : t.activities)
      if (a.op >= 0) ++begin[static_cast<std::size_t>(a.op) + 1];
    std::vector<bool> own_range(n, false);
    for (std::size_t i = 0; i < n; ++i)
      if (begin[i + 1] == 0) {
        own_range[i] = true;
        begin[i + 1] = 1;  // the op's own range
      }
    for (std::size_t i = 0; i < n; ++i) begin[i + 1] += begin[i];
    iv.resize(begin.back());
    // begin[o] moves to the end of o's intervals meanwhile, then every entry
    // back by one (the end of o - 1's: o's begin).
    for (const auto& a : t.activities)
      if (a.op >= 0) iv[begin[static_cast<std::size_t>(a.op)]++] = {a.start_ns, a.end_ns};
    for (std::size_t i = 0; i < n; ++i)
      if (own_range[i]) iv[begin[i]++] = {t.ops[i].start_ns, t.ops[i].end_ns};
    for (std::size_t i = n; i > 0; --i) begin[i] = begin[i - 1];
    begin[0] = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (!own_range[i])
        std::sort(iv.begin() + static_cast<std::ptrdiff_t>(begin[i]), iv.begin() + static_cast<std::ptrdiff_t>(begin[i + 1]),
                  [](const Interval& a, const Interval& b) { return a.start < b.start; });
  }
  std::span<const Interval> of(std::size_t op) const {
    return {iv.data() + begin[op], iv.data() + begin[op + 1]};
  }
  // Time during which the op ran: the union of its intervals (sorted by start).
  std::int64_t busy(std::size_t op) const {
    std::int64_t total = 0, cur_start = 0, cur_end = INT64_MIN;
    for (const auto& i : of(op)) {
      if (i.start > cur_end) {
        if (cur_end > cur_start) total += cur_end - cur_start;
        cur_start = i.start;
        cur_end = i.end;
      } else {
        cur_end = std::max(cur_end, i.end);
      }
    }
    if (cur_end > cur_start) total += cur_end - cur_start;
    return total;
  }
  Interval envelope(std::size_t op) const {
    Interval e{INT64_MAX, INT64_MIN};
    for (const auto& i : of(op)) {
      e.start = std::min(e.start, i.start);
      e.end = std::max(e.end, i.end);
    }
    return e.start <= e.end ? e : Interval{};
  }
};

}  // namespace moetrace::analyzer
