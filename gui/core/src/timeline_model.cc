#include "moetrace/gui/timeline_model.h"

#include <algorithm>
#include <future>
#include <limits>
#include <map>
#include <span>
#include <vector>

#include "timeline_build.h"

namespace moetrace::gui {

RowItems RowItems::contiguous(ItemSource s, std::uint32_t base, std::uint32_t count) {
  RowItems r;
  r.source_ = s;
  r.contiguous_ = true;
  r.base_ = base;
  r.count_ = count;
  return r;
}

RowItems RowItems::indexed(ItemSource s, std::vector<std::uint32_t> index) {
  RowItems r;
  r.source_ = s;
  r.contiguous_ = false;
  r.index_ = std::move(index);
  return r;
}

class TimelineModelBuilder {
 public:
  TimelineModelBuilder(std::shared_ptr<const analyzer::Trace> trace, const BuildOptions& options)
      : options_(options) {
    m_.trace_ = std::move(trace);
  }

  std::shared_ptr<const TimelineModel> build() {
    const auto& t = *m_.trace_;
    progress("layout", 0.0);
    extent();
    // Independent passes over different tables: two at a time.
    auto side = [this] {
      m_.activity_colour_ = detail::activity_colours(*m_.trace_);
      if (options_.host_rows) order_api_calls();
    };
    std::future<void> side_done;
    if (options_.threads == 1) side();
    else side_done = std::async(std::launch::async, side);
    m_.op_has_activity_.assign(t.ops.size(), false);
    for (const auto& a : t.activities)
      if (a.op >= 0 && static_cast<std::size_t>(a.op) < t.ops.size()) m_.op_has_activity_[static_cast<std::size_t>(a.op)] = true;
    if (options_.span_rows) m_.spans_ = detail::derive_spans(t);
    if (options_.memory_rows) m_.counters_ = memory_counters(t);
    if (side_done.valid()) side_done.get();  // rethrows what the other thread threw
    lay_out_rows();
    std::vector<std::uint32_t>().swap(api_order_);
    std::vector<ThreadCalls>().swap(api_threads_);
    std::vector<std::size_t> todo(m_.rows_.size());
    for (std::size_t i = 0; i < todo.size(); ++i) todo[i] = i;
    detail::build_pyramids(m_, m_.rows_, std::move(todo), options_.threads,
                           [this](double f) { progress("level of detail", f); });
    progress("level of detail", 1.0);
    return std::shared_ptr<const TimelineModel>(new TimelineModel(std::move(m_)));
  }

 private:
  void progress(std::string_view stage, double f) {
    if (options_.progress) options_.progress(stage, f);
  }

  void extent() {
    const auto& t = *m_.trace_;
    std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = std::numeric_limits<std::int64_t>::min();
    auto take = [&](std::int64_t s, std::int64_t e) {
      lo = std::min(lo, s);
      hi = std::max(hi, e);
    };
    for (std::size_t s = 0; s + 1 < t.activity_track_begin.size(); ++s) {
      auto track = t.track_activities(s);
      if (track.empty()) continue;
      take(track.front().start_ns, track.front().end_ns);
      for (const auto& a : track) hi = std::max(hi, a.end_ns);
    }
    for (const auto& o : t.ops) take(o.start_ns, o.end_ns);
    for (const auto& e : t.memory_events) take(e.ts_ns, e.ts_ns);
    if (options_.host_rows) {
      for (const auto& a : t.api_calls) take(a.start_ns, a.end_ns);
      for (const auto& n : t.nvtx) take(n.start_ns, std::max(n.start_ns, n.end_ns));
    }
    if (lo > hi) {
      lo = t.run.start_ns;
      hi = t.run.end_ns;
    }
    if (hi <= lo) hi = lo + 1;
    m_.start_ns_ = lo;
    m_.end_ns_ = hi;
  }

  void add_packed_rows(RowKind kind, RankId rank, std::int32_t stream, const std::string& label,
                       ItemSource source, std::span<const std::uint32_t> order, int height) {
    detail::add_packed_rows(m_, m_.rows_, {kind, rank, stream, label, height}, source, order, options_.max_sub_rows);
  }

  void lay_out_rows() {
    const auto& t = *m_.trace_;
    std::vector<RankId> ranks = t.rank_ids();
    auto note = [&ranks](RankId r) {
      if (ranks.empty() || ranks.back() != r) ranks.push_back(r);
    };
    for (const auto& c : m_.counters_) note(c.rank());
    for (const auto& s : m_.spans_) note(s.rank);
    if (options_.host_rows) {
      for (const auto& a : t.api_calls) note(a.rank);
      for (const auto& n : t.nvtx) note(n.rank);
    }
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());

    const bool tracks_ok = t.activity_track_begin.size() == t.streams.size() + 1 &&
                           t.op_track_begin.size() == t.streams.size() + 1;
    for (auto rank : ranks) {
      RankGroup g;
      g.rank = rank;
      g.label = "Rank " + std::to_string(rank.value);
      for (const auto& r : t.ranks)
        if (r.rank == rank)
          for (const auto& d : t.devices)
            if (d.id == r.device && !d.name.empty()) g.label += " \xC2\xB7 " + d.name;
      g.first_row = static_cast<int>(m_.rows_.size());
      const int group = static_cast<int>(m_.groups_.size());
      Row header;
      header.kind = RowKind::kRankHeader;
      header.rank = rank;
      header.height_px = RowLayout::kHeaderHeight;
      header.label = g.label;
      m_.rows_.push_back(std::move(header));

      // Spans of this rank, by level (spans_ is sorted by rank, level, start).
      for (auto level : {SpanLevel::kIteration, SpanLevel::kLayer, SpanLevel::kChunk}) {
        const auto order = detail::spans_of(m_.spans_, rank, level);
        if (order.empty()) continue;
        const RowKind kind = level == SpanLevel::kIteration ? RowKind::kIterations
                             : level == SpanLevel::kLayer   ? RowKind::kLayers
                                                            : RowKind::kChunks;
        const char* label = level == SpanLevel::kIteration ? "iterations" : level == SpanLevel::kLayer ? "layers" : "chunks";
        add_packed_rows(kind, rank, -1, label, ItemSource::kSpan, order, 16);
      }

      for (auto s : detail::rank_streams(t, rank)) {
        if (!tracks_ok) break;
        const auto su = static_cast<std::size_t>(s);
        detail::StreamRows spec;
        spec.op_rows = options_.op_rows;
        spec.max_sub_rows = options_.max_sub_rows;
        if (!detail::add_stream_rows(m_, m_.rows_, t, rank, s, spec)) continue;
        if (options_.queue_rows) {
          Row row;
          row.kind = RowKind::kQueue;
          row.rank = rank;
          row.stream = s;
          row.height_px = 24;
          row.label = detail::stream_label(t.streams[su]) + " \xC2\xB7 queue length";
          m_.rows_.push_back(std::move(row));
        }
      }
      for (std::size_t c = 0; c < m_.counters_.size(); ++c) {
        if (m_.counters_[c].rank() != rank) continue;
        Row row;
        row.kind = RowKind::kMemory;
        row.rank = rank;
        row.height_px = 36;
        row.label = m_.counters_[c].name();
        row.counter = static_cast<std::int32_t>(c);
        m_.rows_.push_back(std::move(row));
      }
      if (options_.host_rows) add_host_rows(rank);
      g.end_row = static_cast<int>(m_.rows_.size());
      for (int r = g.first_row; r < g.end_row; ++r) m_.rows_[static_cast<std::size_t>(r)].group = group;
      m_.groups_.push_back(std::move(g));
    }
  }

  // Per CPU thread of the rank: its NVTX ranges (nested ranges one sub-row
  // deeper), then its API calls.
  void add_host_rows(RankId rank) {
    const auto& t = *m_.trace_;
    // nvtx is sorted by (rank, thread, start).
    auto nb = std::lower_bound(t.nvtx.begin(), t.nvtx.end(), rank,
                               [](const analyzer::NvtxRange& n, RankId r) { return n.rank < r; });
    std::map<std::int64_t, std::vector<std::uint32_t>> nvtx_by_thread;
    for (auto it = nb; it != t.nvtx.end() && it->rank == rank; ++it)
      nvtx_by_thread[it->thread_id].push_back(static_cast<std::uint32_t>(it - t.nvtx.begin()));
    // The rank's runs of api_order_, one a thread (order_api_calls).
    std::map<std::int64_t, std::span<const std::uint32_t>> api_by_thread;
    for (const auto& run : api_threads_)
      if (run.rank == rank)
        api_by_thread.emplace(run.thread, std::span<const std::uint32_t>(api_order_).subspan(run.begin, run.end - run.begin));
    std::vector<std::int64_t> threads;
    for (const auto& [th, v] : nvtx_by_thread) threads.push_back(th);
    for (const auto& [th, v] : api_by_thread) threads.push_back(th);
    std::sort(threads.begin(), threads.end());
    threads.erase(std::unique(threads.begin(), threads.end()), threads.end());
    for (auto th : threads) {
      const std::size_t first = m_.rows_.size();
      if (auto it = nvtx_by_thread.find(th); it != nvtx_by_thread.end())
        add_packed_rows(RowKind::kNvtx, rank, -1, "thread " + std::to_string(th) + " \xC2\xB7 NVTX", ItemSource::kNvtx,
                        it->second, 16);
      if (auto it = api_by_thread.find(th); it != api_by_thread.end())
        add_packed_rows(RowKind::kApiCalls, rank, -1, "thread " + std::to_string(th) + " \xC2\xB7 API calls",
                        ItemSource::kApiCall, it->second, 16);
      for (std::size_t r = first; r < m_.rows_.size(); ++r) m_.rows_[r].thread = th;
    }
  }

  // API calls are stored by correlation id; the rows want them by (rank,
  // thread, start). Bucket by thread first (stable, so each bucket stays in
  // correlation order, which on one thread is nearly always time order), and
  // sort only the buckets that are not already in order.
  void order_api_calls() {
    const auto& t = *m_.trace_;
    std::map<std::pair<RankId, std::int64_t>, std::size_t> bucket_of;
    std::vector<std::uint32_t> bucket(t.api_calls.size());
    auto last = bucket_of.end();  // neighbouring calls are mostly of one thread
    for (std::size_t i = 0; i < t.api_calls.size(); ++i) {
      const auto key = std::pair(t.api_calls[i].rank, t.api_calls[i].thread_id);
      if (last == bucket_of.end() || last->first != key) {
        last = bucket_of.find(key);
        if (last == bucket_of.end()) last = bucket_of.emplace(key, bucket_of.size()).first;
      }
      bucket[i] = static_cast<std::uint32_t>(last->second);
    }
    // Buckets in (rank, thread) order; counting sort of the calls into them.
    std::vector<std::size_t> rank_of_bucket(bucket_of.size()), begin(bucket_of.size() + 1, 0);
    std::size_t order = 0;
    api_threads_.clear();
    for (auto& [key, b] : bucket_of) {
      rank_of_bucket[b] = order++;
      api_threads_.push_back({key.first, key.second, 0, 0});
    }
    for (auto b : bucket) ++begin[rank_of_bucket[b] + 1];
    for (std::size_t k = 1; k < begin.size(); ++k) begin[k] += begin[k - 1];
    api_order_.resize(t.api_calls.size());
    std::vector<std::size_t> fill(begin.begin(), begin.end() - 1);
    for (std::size_t i = 0; i < bucket.size(); ++i) api_order_[fill[rank_of_bucket[bucket[i]]]++] = static_cast<std::uint32_t>(i);
    auto before = [&](std::uint32_t a, std::uint32_t b) {
      const auto& x = t.api_calls[a];
      const auto& y = t.api_calls[b];
      return x.start_ns != y.start_ns ? x.start_ns < y.start_ns : x.end_ns > y.end_ns;
    };
    for (std::size_t k = 0; k + 1 < begin.size(); ++k) {
      api_threads_[k].begin = begin[k];
      api_threads_[k].end = begin[k + 1];
      auto b = api_order_.begin() + static_cast<std::ptrdiff_t>(begin[k]);
      auto e = api_order_.begin() + static_cast<std::ptrdiff_t>(begin[k + 1]);
      if (!std::is_sorted(b, e, before)) std::stable_sort(b, e, before);
    }
  }
  BuildOptions options_;
  TimelineModel m_;
  std::vector<std::uint32_t> api_order_;
  // api_order_'s run of each (rank, thread), in that order.
  struct ThreadCalls {
    RankId rank;
    std::int64_t thread = 0;
    std::size_t begin = 0, end = 0;
  };
  std::vector<ThreadCalls> api_threads_;
};

std::shared_ptr<const TimelineModel> TimelineModel::build(std::shared_ptr<const analyzer::Trace> trace,
                                                          const BuildOptions& options) {
  return TimelineModelBuilder(std::move(trace), options).build();
}

RowLayout RowLayout::compute(const TimelineModel& model, const std::vector<bool>& collapsed,
                             const QueueTracks* queues) {
  RowLayout l;
  const auto rows = model.rows();
  l.y_.assign(rows.size(), -1);
  l.h_.assign(rows.size(), 0);
  int y = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const auto g = static_cast<std::size_t>(row.group);
    const bool hidden = (row.kind != RowKind::kRankHeader && g < collapsed.size() && collapsed[g]) ||
                        (row.kind == RowKind::kQueue && (queues == nullptr || queues->for_stream(row.stream) == nullptr));
    l.h_[i] = row.height_px;
    if (hidden) continue;
    l.y_[i] = y;
    l.order_.push_back(static_cast<int>(i));
    y += row.height_px;
  }
  l.total_ = y;
  return l;
}

int RowLayout::row_at(int y) const {
  auto it = std::upper_bound(order_.begin(), order_.end(), y,
                             [&](int v, int row) { return v < y_[static_cast<std::size_t>(row)]; });
  if (it == order_.begin()) return -1;
  const int row = *std::prev(it);
  return y < y_[static_cast<std::size_t>(row)] + h_[static_cast<std::size_t>(row)] ? row : -1;
}

std::vector<int> RowLayout::rows_in(int y0, int y1) const {
  std::vector<int> out;
  auto it = std::upper_bound(order_.begin(), order_.end(), y0,
                             [&](int v, int row) { return v < y_[static_cast<std::size_t>(row)]; });
  if (it != order_.begin()) --it;
  for (; it != order_.end() && y_[static_cast<std::size_t>(*it)] < y1; ++it)
    if (y_[static_cast<std::size_t>(*it)] + h_[static_cast<std::size_t>(*it)] > y0) out.push_back(*it);
  return out;
}

}  // namespace moetrace::gui
