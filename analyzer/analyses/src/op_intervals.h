// The GPU time of every op, shared by the analyses (private to the analyzer).
#pragma once

#include <algorithm>
#include <cstdint>
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

// The ops and activities of each rank, grouped once (in their order within
// the rank), so that an analysis can hold one rank's intervals at a time
// (the breakdown: every rank's at once held 24 bytes an activity, 90 MiB on
// a 10 M-event trace, for as long as it ran).
class RankRows {
 public:
  explicit RankRows(const Trace& t) {
    for (const auto r : t.rank_ids()) ranks_.push_back(r.value);
    add_ranks(t.ops);
    add_ranks(t.activities);
    std::sort(ranks_.begin(), ranks_.end());
    ranks_.erase(std::unique(ranks_.begin(), ranks_.end()), ranks_.end());
    group(t.ops, op_begin_, ops_);
    group(t.activities, activity_begin_, activities_);
  }
  // Every rank of the trace (its ranks, those of its ops and activities), sorted.
  std::size_t size() const { return ranks_.size(); }
  std::int32_t rank(std::size_t slot) const { return ranks_[slot]; }
  std::span<const std::uint32_t> ops(std::size_t slot) const { return part(op_begin_, ops_, slot); }
  std::span<const std::uint32_t> activities(std::size_t slot) const {
    return part(activity_begin_, activities_, slot);
  }

 private:
  template <class Rows>
  void add_ranks(const Rows& rows) {  // one entry a run of one rank
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (i == 0 || rows[i].rank != rows[i - 1].rank) ranks_.push_back(rows[i].rank.value);
  }
  // Row indices grouped by rank slot, in row order within each (a stable counting sort).
  template <class Rows>
  void group(const Rows& rows, std::vector<std::size_t>& begin, std::vector<std::uint32_t>& index) const {
    std::vector<std::uint32_t> slot(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i)
      slot[i] = i > 0 && rows[i].rank == rows[i - 1].rank
                    ? slot[i - 1]
                    : static_cast<std::uint32_t>(std::lower_bound(ranks_.begin(), ranks_.end(), rows[i].rank.value) -
                                                 ranks_.begin());
    begin.assign(ranks_.size() + 1, 0);
    for (const auto s : slot) ++begin[s + 1];
    for (std::size_t r = 0; r < ranks_.size(); ++r) begin[r + 1] += begin[r];
    index.resize(rows.size());
    std::vector<std::size_t> next(begin.begin(), begin.end() - 1);
    for (std::size_t i = 0; i < rows.size(); ++i) index[next[slot[i]]++] = static_cast<std::uint32_t>(i);
  }
  static std::span<const std::uint32_t> part(const std::vector<std::size_t>& begin,
                                             const std::vector<std::uint32_t>& index, std::size_t slot) {
    return {index.data() + begin[slot], index.data() + begin[slot + 1]};
  }

  std::vector<std::int32_t> ranks_;
  std::vector<std::size_t> op_begin_, activity_begin_;
  std::vector<std::uint32_t> ops_, activities_;
};

}  // namespace moetrace::analyzer
