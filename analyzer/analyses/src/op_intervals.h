// The GPU time of every op, shared by the analyses (private to the analyzer).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/interval.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/error.h"

namespace moetrace::analyzer {

// The intervals of every op: its attributed activities (kernels, copies; see
// projection.h), else its own [start, end) range. CSR over trace.ops of the
// rows the intervals are read from (an activity's index, or the op's own with
// kOwnRange set), not of copies of their times: 4 bytes an interval, not 16
// (a 10 M-event trace has 3.9 M; each of the analyses that read them held 60
// MiB more).
class OpIntervals {
 public:
  static constexpr std::uint32_t kOwnRange = std::uint32_t{1} << 31;

  // The intervals of one op, in order of start, read as Interval values.
  class Range {
   public:
    class iterator {
     public:
      using value_type = Interval;
      using difference_type = std::ptrdiff_t;
      iterator() = default;
      iterator(const Trace* t, const std::uint32_t* p) : t_(t), p_(p) {}
      Interval operator*() const { return interval(*t_, *p_); }
      iterator& operator++() {
        ++p_;
        return *this;
      }
      iterator operator++(int) {
        auto old = *this;
        ++p_;
        return old;
      }
      bool operator==(const iterator& o) const { return p_ == o.p_; }

     private:
      const Trace* t_ = nullptr;
      const std::uint32_t* p_ = nullptr;
    };
    Range(const Trace& t, const std::uint32_t* b, const std::uint32_t* e) : t_(&t), b_(b), e_(e) {}
    iterator begin() const { return {t_, b_}; }
    iterator end() const { return {t_, e_}; }
    std::size_t size() const { return static_cast<std::size_t>(e_ - b_); }
    bool empty() const { return b_ == e_; }

   private:
    const Trace* t_;
    const std::uint32_t *b_, *e_;
  };

  explicit OpIntervals(const Trace& t) : t_(&t) {
    const std::size_t n = t.ops.size();
    if (t.activities.size() >= kOwnRange || n >= kOwnRange || t.activities.size() + n >= UINT32_MAX)
      throw Error("the trace has more activities and ops than the analyses index (2^31 each)");
    // Counted, then filled, in `begin_` itself (no count or cursor arrays
    // beside it).
    begin_.assign(n + 1, 0);
    for (const auto& a : t.activities)
      if (a.op >= 0) ++begin_[static_cast<std::size_t>(a.op) + 1];
    std::vector<bool> own_range(n, false);
    for (std::size_t i = 0; i < n; ++i)
      if (begin_[i + 1] == 0) {
        own_range[i] = true;
        begin_[i + 1] = 1;  // the op's own range
      }
    for (std::size_t i = 0; i < n; ++i) begin_[i + 1] += begin_[i];
    rows_.resize(begin_.back());
    // begin_[o] moves to the end of o's intervals meanwhile, then every
    // entry back by one (the end of o - 1's: o's begin).
    for (std::size_t k = 0; k < t.activities.size(); ++k)
      if (const auto op = t.activities[k].op; op >= 0) rows_[begin_[static_cast<std::size_t>(op)]++] = static_cast<std::uint32_t>(k);
    for (std::size_t i = 0; i < n; ++i)
      if (own_range[i]) rows_[begin_[i]++] = static_cast<std::uint32_t>(i) | kOwnRange;
    for (std::size_t i = n; i > 0; --i) begin_[i] = begin_[i - 1];
    begin_[0] = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (!own_range[i])
        // By start, then by row (a total order: no buffer of a stable sort
        // taken for each of millions of ops).
        std::sort(rows_.begin() + begin_[i], rows_.begin() + begin_[i + 1], [&](std::uint32_t a, std::uint32_t b) {
          return std::pair(t.activities[a].start_ns, a) < std::pair(t.activities[b].start_ns, b);
        });
  }
  // Every op's intervals together.
  std::size_t size() const { return rows_.size(); }
  Range of(std::size_t op) const { return {*t_, rows_.data() + begin_[op], rows_.data() + begin_[op + 1]}; }
  // Time during which the op ran: the union of its intervals (sorted by start).
  std::int64_t busy(std::size_t op) const {
    std::int64_t total = 0, cur_start = 0, cur_end = INT64_MIN;
    for (const auto i : of(op)) {
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
    for (const auto i : of(op)) {
      e.start = std::min(e.start, i.start);
      e.end = std::max(e.end, i.end);
    }
    return e.start <= e.end ? e : Interval{};
  }

 private:
  static Interval interval(const Trace& t, std::uint32_t row) {
    if (row & kOwnRange) {
      const auto& op = t.ops[row & ~kOwnRange];
      return {op.start_ns, op.end_ns};
    }
    const auto& a = t.activities[row];
    return {a.start_ns, a.end_ns};
  }
  const Trace* t_;
  // Mapped apart: given back to the system when the analysis is done with
  // them (huge_pages.h: MappedVector).
  MappedVector<std::uint32_t> begin_;
  MappedVector<std::uint32_t> rows_;
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
  // Row indices grouped by rank slot, in row order within each (a stable
  // counting sort). Each row's slot found twice, to count and to place, not
  // kept in an array beside (ranks come in runs: a search where the rank
  // changes).
  template <class Rows>
  void group(const Rows& rows, std::vector<std::size_t>& begin, MappedVector<std::uint32_t>& index) const {
    auto each_slot = [&](auto f) {
      std::size_t slot = 0;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        if (i == 0 || rows[i].rank != rows[i - 1].rank)
          slot = static_cast<std::size_t>(std::lower_bound(ranks_.begin(), ranks_.end(), rows[i].rank.value) -
                                          ranks_.begin());
        f(i, slot);
      }
    };
    begin.assign(ranks_.size() + 1, 0);
    each_slot([&](std::size_t, std::size_t slot) { ++begin[slot + 1]; });
    for (std::size_t r = 0; r < ranks_.size(); ++r) begin[r + 1] += begin[r];
    index.resize(rows.size());
    std::vector<std::size_t> next(begin.begin(), begin.end() - 1);
    each_slot([&](std::size_t i, std::size_t slot) { index[next[slot]++] = static_cast<std::uint32_t>(i); });
  }
  static std::span<const std::uint32_t> part(const std::vector<std::size_t>& begin,
                                             const MappedVector<std::uint32_t>& index, std::size_t slot) {
    return {index.data() + begin[slot], index.data() + begin[slot + 1]};
  }

  std::vector<std::int32_t> ranks_;
  std::vector<std::size_t> op_begin_, activity_begin_;
  MappedVector<std::uint32_t> ops_, activities_;  // mapped apart (huge_pages.h)
};

}  // namespace moetrace::analyzer
