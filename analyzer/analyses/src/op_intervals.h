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
    std::vector<std::size_t> count(t.ops.size() + 1, 0);
    for (const auto& a : t.activities)
      if (a.op >= 0) ++count[static_cast<std::size_t>(a.op) + 1];
    std::vector<bool> has_activity(t.ops.size(), false);
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      has_activity[i] = count[i + 1] > 0;
      if (count[i + 1] == 0) count[i + 1] = 1;  // the op's own range
    }
    begin.assign(t.ops.size() + 1, 0);
    for (std::size_t i = 0; i < t.ops.size(); ++i) begin[i + 1] = begin[i] + count[i + 1];
    iv.resize(begin.back());
    std::vector<std::size_t> fill(begin.begin(), begin.end() - 1);
    for (const auto& a : t.activities)
      if (a.op >= 0) {
        const auto o = static_cast<std::size_t>(a.op);
        iv[fill[o]++] = {a.start_ns, a.end_ns};
      }
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      if (!has_activity[i]) iv[begin[i]] = {t.ops[i].start_ns, t.ops[i].end_ns};
      else std::sort(iv.begin() + static_cast<std::ptrdiff_t>(begin[i]),
                     iv.begin() + static_cast<std::ptrdiff_t>(begin[i + 1]),
                     [](const Interval& a, const Interval& b) { return a.start < b.start; });
    }
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
