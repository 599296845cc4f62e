#include "moetrace/gui/timeline_model.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>

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

namespace {

int role_order(std::string_view role) {
  if (role == "compute") return 0;
  if (role == "comm") return 1;
  if (role == "copy") return 2;
  return 3;
}

std::string stream_label(const analyzer::Stream& s) {
  const std::string role = s.role == "comm" ? "communication" : s.role;
  if (s.name.empty()) return role + " stream " + std::to_string(s.id.value);
  if (s.name == s.role || s.name == role) return s.name;
  return s.name + " (" + role + ")";
}

std::string activity_row_label(const analyzer::Stream& s) {
  return stream_label(s) + (s.role == "copy" ? " \xC2\xB7 copies" : " \xC2\xB7 kernels");
}

// Greedy interval packing: each item (sorted by start, then longest first)
// goes to the first sub-row that is free at its start, so nested op ranges
// land one row deeper than their parent. Past max_rows the last row takes the
// overflow and may overlap.
template <class StartFn, class EndFn>
std::vector<std::vector<std::uint32_t>> pack_rows(std::span<const std::uint32_t> order, StartFn start_of,
                                                  EndFn end_of, int max_rows) {
  std::vector<std::vector<std::uint32_t>> rows;
  std::vector<std::int64_t> last_end;
  for (auto i : order) {
    const auto s = start_of(i);
    std::size_t r = 0;
    while (r < rows.size() && last_end[r] > s) ++r;
    if (r == rows.size()) {
      if (static_cast<int>(rows.size()) >= std::max(1, max_rows)) {
        r = rows.size() - 1;
      } else {
        rows.emplace_back();
        last_end.push_back(std::numeric_limits<std::int64_t>::min());
      }
    }
    rows[r].push_back(i);
    last_end[r] = std::max(last_end[r], end_of(i));
  }
  return rows;
}

}  // namespace

// Orders spans by (rank, level) against a (rank, level) key, either way round.
struct SpanKeyLess {
  using Key = std::pair<RankId, SpanLevel>;
  bool operator()(const Span& s, const Key& k) const { return std::pair(s.rank, s.level) < k; }
  bool operator()(const Key& k, const Span& s) const { return k < std::pair(s.rank, s.level); }
};

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
      colour_activities();
      if (options_.host_rows) order_api_calls();
    };
    std::future<void> side_done;
    if (options_.threads == 1) side();
    else side_done = std::async(std::launch::async, side);
    m_.op_has_activity_.assign(t.ops.size(), false);
    for (const auto& a : t.activities)
      if (a.op >= 0 && static_cast<std::size_t>(a.op) < t.ops.size()) m_.op_has_activity_[static_cast<std::size_t>(a.op)] = true;
    if (options_.span_rows) derive_spans();
    if (options_.memory_rows) m_.counters_ = memory_counters(t);
    if (side_done.valid()) side_done.get();  // rethrows what the other thread threw
    lay_out_rows();
    std::vector<std::uint32_t>().swap(api_order_);
    build_pyramids();
    progress("level of detail", 1.0);
    return std::shared_ptr<const TimelineModel>(new TimelineModel(std::move(m_)));
  }

 private:
  void progress(std::string_view stage, double f) {
    if (options_.progress) options_.progress(stage, f);
  }

  // Colour per activity, computed once: a kernel that no op claims is
  // classified by its name, and names repeat, so classify each name once.
  void colour_activities() {
    const auto& t = *m_.trace_;
    std::vector<std::int8_t> by_name(t.strings.size() + 1, -1);
    m_.activity_colour_.resize(t.activities.size());
    for (std::size_t i = 0; i < t.activities.size(); ++i) {
      const auto& a = t.activities[i];
      if (a.op < 0 && a.type == analyzer::ActivityType::kKernel && a.name.valid() &&
          static_cast<std::size_t>(a.name.value) < t.strings.size()) {
        auto& c = by_name[static_cast<std::size_t>(a.name.value)];
        if (c < 0) c = static_cast<std::int8_t>(colour_class(t, a));
        m_.activity_colour_[i] = static_cast<ColourClass>(c);
      } else {
        m_.activity_colour_[i] = colour_class(t, a);
      }
    }
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

  void derive_spans() {
    const auto& t = *m_.trace_;
    using Key = std::tuple<std::int32_t, int, std::int32_t, int, std::int32_t, std::int32_t, std::int32_t>;
    struct KeyHash {
      std::size_t operator()(const Key& k) const {
        std::uint64_t h = 0xcbf29ce484222325ull;
        auto mix = [&h](std::int64_t v) { h = (h ^ static_cast<std::uint64_t>(v)) * 0x100000001b3ull; };
        std::apply([&](auto... v) { (mix(v), ...); }, k);
        return static_cast<std::size_t>(h ^ (h >> 29));
      }
    };
    std::unordered_map<Key, Span, KeyHash> spans;
    // Neighbouring ops on a stream mostly share their keys: remember the last
    // span of each level and skip the hash lookup for a repeat.
    std::array<std::pair<Key, Span*>, 3> last{};
    for (auto& l : last) std::get<0>(l.first) = -2;
    auto add = [&](const Key& key, const analyzer::OpRange& op, SpanLevel level) {
      auto& cached = last[static_cast<std::size_t>(level)];
      bool fresh = false;
      if (cached.second == nullptr || cached.first != key) {
        auto [it, inserted] = spans.try_emplace(key);
        fresh = inserted;
        cached = {key, &it->second};
      }
      Span& s = *cached.second;
      if (fresh) {
        s.start_ns = op.start_ns;
        s.end_ns = op.end_ns;
        s.rank = op.rank;
        s.level = level;
        s.iteration = op.iteration;
        if (level != SpanLevel::kIteration) {
          s.phase = op.phase;
          s.layer = op.layer;
          s.micro_batch = op.micro_batch;
        }
        if (level == SpanLevel::kChunk) s.chunk = op.chunk;
      } else {
        s.start_ns = std::min(s.start_ns, op.start_ns);
        s.end_ns = std::max(s.end_ns, op.end_ns);
      }
      ++s.ops;
    };
    for (const auto& op : t.ops) {
      if (op.iteration >= 0)
        add({op.rank.value, 0, op.iteration, 0, -1, -1, -1}, op, SpanLevel::kIteration);
      if (op.layer >= 0) {
        const int phase = static_cast<int>(op.phase);
        add({op.rank.value, 1, op.iteration, phase, op.layer, op.micro_batch, -1}, op, SpanLevel::kLayer);
        if (op.chunk >= 0)
          add({op.rank.value, 2, op.iteration, phase, op.layer, op.micro_batch, op.chunk}, op, SpanLevel::kChunk);
      }
    }
    m_.spans_.reserve(spans.size());
    for (auto& [k, s] : spans) m_.spans_.push_back(s);
    std::sort(m_.spans_.begin(), m_.spans_.end(), [](const Span& a, const Span& b) {
      return std::tuple(a.rank, a.level, a.start_ns, -a.end_ns) < std::tuple(b.rank, b.level, b.start_ns, -b.end_ns);
    });
  }

  void add_packed_rows(RowKind kind, RankId rank, std::int32_t stream, const std::string& label,
                       ItemSource source, std::span<const std::uint32_t> order, int height) {
    const auto& m = m_;
    auto packed = pack_rows(
        order, [&](std::uint32_t i) { return m.item_start({source, i}); },
        [&](std::uint32_t i) { return m.item_end({source, i}); }, options_.max_sub_rows);
    for (std::size_t r = 0; r < packed.size(); ++r) {
      Row row;
      row.kind = kind;
      row.rank = rank;
      row.stream = stream;
      row.sub_row = static_cast<int>(r);
      row.height_px = height;
      if (r == 0) row.label = label;
      row.items = RowItems::indexed(source, std::move(packed[r]));
      m_.rows_.push_back(std::move(row));
    }
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
        const auto range = std::equal_range(m_.spans_.begin(), m_.spans_.end(), std::pair(rank, level),
                                            SpanKeyLess{});
        std::vector<std::uint32_t> order;
        for (auto it = range.first; it != range.second; ++it)
          order.push_back(static_cast<std::uint32_t>(it - m_.spans_.begin()));
        if (order.empty()) continue;
        const RowKind kind = level == SpanLevel::kIteration ? RowKind::kIterations
                             : level == SpanLevel::kLayer   ? RowKind::kLayers
                                                            : RowKind::kChunks;
        const char* label = level == SpanLevel::kIteration ? "iterations" : level == SpanLevel::kLayer ? "layers" : "chunks";
        add_packed_rows(kind, rank, -1, label, ItemSource::kSpan, order, 16);
      }

      std::vector<std::int32_t> streams;
      for (std::size_t s = 0; s < t.streams.size(); ++s)
        if (t.streams[s].rank == rank) streams.push_back(static_cast<std::int32_t>(s));
      std::stable_sort(streams.begin(), streams.end(), [&](std::int32_t a, std::int32_t b) {
        const auto& sa = t.streams[static_cast<std::size_t>(a)];
        const auto& sb = t.streams[static_cast<std::size_t>(b)];
        return std::pair(role_order(sa.role), sa.id) < std::pair(role_order(sb.role), sb.id);
      });
      for (auto s : streams) {
        if (!tracks_ok) break;
        const auto su = static_cast<std::size_t>(s);
        const std::string label = stream_label(t.streams[su]);
        const std::string activity_label = activity_row_label(t.streams[su]);
        if (options_.op_rows) {
          const auto b = static_cast<std::uint32_t>(t.op_track_begin[su]);
          const auto e = static_cast<std::uint32_t>(t.op_track_begin[su + 1]);
          std::vector<std::uint32_t> order(e - b);
          for (std::uint32_t i = b; i < e; ++i) order[i - b] = i;
          if (!order.empty()) add_packed_rows(RowKind::kOps, rank, s, label + " \xC2\xB7 op ranges", ItemSource::kOp, order, 16);
        }
        const auto b = static_cast<std::uint32_t>(t.activity_track_begin[su]);
        const auto e = static_cast<std::uint32_t>(t.activity_track_begin[su + 1]);
        if (e == b) continue;
        bool overlaps = false;
        std::int64_t prev_end = std::numeric_limits<std::int64_t>::min();
        for (std::uint32_t i = b; i < e && !overlaps; ++i) {
          overlaps = t.activities[i].start_ns < prev_end;
          prev_end = std::max(prev_end, t.activities[i].end_ns);
        }
        if (!overlaps) {
          Row row;
          row.kind = RowKind::kActivities;
          row.rank = rank;
          row.stream = s;
          row.height_px = 20;
          row.label = activity_label;
          row.items = RowItems::contiguous(ItemSource::kActivity, b, e - b);
          m_.rows_.push_back(std::move(row));
        } else {
          std::vector<std::uint32_t> order(e - b);
          for (std::uint32_t i = b; i < e; ++i) order[i - b] = i;
          add_packed_rows(RowKind::kActivities, rank, s, activity_label, ItemSource::kActivity, order, 20);
        }
        if (options_.queue_rows) {
          Row row;
          row.kind = RowKind::kQueue;
          row.rank = rank;
          row.stream = s;
          row.height_px = 24;
          row.label = label + " \xC2\xB7 queue length";
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
    std::map<std::int64_t, std::vector<std::uint32_t>> api_by_thread;
    for (auto it = api_order_lower(rank); it < api_order_.size() && t.api_calls[api_order_[it]].rank == rank; ++it)
      api_by_thread[t.api_calls[api_order_[it]].thread_id].push_back(api_order_[it]);
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
    for (std::size_t i = 0; i < t.api_calls.size(); ++i) {
      const auto key = std::pair(t.api_calls[i].rank, t.api_calls[i].thread_id);
      auto it = bucket_of.find(key);
      if (it == bucket_of.end()) it = bucket_of.emplace(key, bucket_of.size()).first;
      bucket[i] = static_cast<std::uint32_t>(it->second);
    }
    // Buckets in (rank, thread) order; counting sort of the calls into them.
    std::vector<std::size_t> rank_of_bucket(bucket_of.size()), begin(bucket_of.size() + 1, 0);
    std::size_t order = 0;
    for (auto& [key, b] : bucket_of) rank_of_bucket[b] = order++;
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
      auto b = api_order_.begin() + static_cast<std::ptrdiff_t>(begin[k]);
      auto e = api_order_.begin() + static_cast<std::ptrdiff_t>(begin[k + 1]);
      if (!std::is_sorted(b, e, before)) std::stable_sort(b, e, before);
    }
  }
  std::size_t api_order_lower(RankId rank) const {
    const auto& t = *m_.trace_;
    return static_cast<std::size_t>(
        std::lower_bound(api_order_.begin(), api_order_.end(), rank,
                         [&](std::uint32_t i, RankId r) { return t.api_calls[i].rank < r; }) -
        api_order_.begin());
  }

  void build_pyramid(Row& row) {
    if (row.items.empty()) return;
    std::vector<ItemExtent> ext(row.items.size());
    for (std::size_t p = 0; p < ext.size(); ++p) {
      const ItemRef r = m_.row_item(row, p);
      ext[p] = {m_.item_start(r), m_.item_end(r)};
    }
    std::int64_t prev_end = std::numeric_limits<std::int64_t>::min();
    for (const auto& e : ext) {
      row.max_extent = std::max(row.max_extent, e.end - e.start);
      if (e.start < prev_end) row.monotone = false;
      prev_end = std::max(prev_end, e.end);
    }
    row.lod = LodPyramid::build(ext);
  }

  void build_pyramids() {
    std::vector<std::size_t> todo;
    for (std::size_t i = 0; i < m_.rows_.size(); ++i)
      if (!m_.rows_[i].items.empty()) todo.push_back(i);
    // Biggest rows first so the threads finish together.
    std::sort(todo.begin(), todo.end(),
              [&](std::size_t a, std::size_t b) { return m_.rows_[a].items.size() > m_.rows_[b].items.size(); });
    std::size_t total = 0;
    for (auto i : todo) total += m_.rows_[i].items.size();
    std::atomic<std::size_t> next{0}, done_items{0};
    std::mutex progress_mu;
    auto worker = [&] {
      for (;;) {
        const std::size_t k = next.fetch_add(1);
        if (k >= todo.size()) return;
        Row& row = m_.rows_[todo[k]];
        build_pyramid(row);
        const auto d = done_items.fetch_add(row.items.size()) + row.items.size();
        std::lock_guard lock(progress_mu);
        progress("level of detail", total ? static_cast<double>(d) / static_cast<double>(total) : 1.0);
      }
    };
    unsigned n = options_.threads ? options_.threads : std::max(1u, std::thread::hardware_concurrency());
    n = static_cast<unsigned>(std::min<std::size_t>(n, std::max<std::size_t>(1, todo.size())));
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < n; ++i) threads.emplace_back(worker);
    worker();
    for (auto& th : threads) th.join();
  }

  BuildOptions options_;
  TimelineModel m_;
  std::vector<std::uint32_t> api_order_;
};

std::shared_ptr<const TimelineModel> TimelineModel::build(std::shared_ptr<const analyzer::Trace> trace,
                                                          const BuildOptions& options) {
  return TimelineModelBuilder(std::move(trace), options).build();
}

std::int64_t TimelineModel::item_start(ItemRef r) const {
  switch (r.source) {
    case ItemSource::kActivity: return trace_->activities[r.index].start_ns;
    case ItemSource::kOp: return trace_->ops[r.index].start_ns;
    case ItemSource::kSpan: return spans_[r.index].start_ns;
    case ItemSource::kApiCall: return trace_->api_calls[r.index].start_ns;
    case ItemSource::kNvtx: return trace_->nvtx[r.index].start_ns;
    case ItemSource::kNone: break;
  }
  return 0;
}

std::int64_t TimelineModel::item_end(ItemRef r) const {
  switch (r.source) {
    case ItemSource::kActivity: return trace_->activities[r.index].end_ns;
    case ItemSource::kOp: return trace_->ops[r.index].end_ns;
    case ItemSource::kSpan: return spans_[r.index].end_ns;
    case ItemSource::kApiCall: return trace_->api_calls[r.index].end_ns;
    case ItemSource::kNvtx: {
      // A range never closed (the process ended inside it) runs to the end.
      const auto& n = trace_->nvtx[r.index];
      return n.end_ns >= n.start_ns ? n.end_ns : std::max(n.start_ns, end_ns_);
    }
    case ItemSource::kNone: break;
  }
  return 0;
}

ColourClass TimelineModel::item_colour(ItemRef r) const {
  switch (r.source) {
    case ItemSource::kActivity:
      return r.index < activity_colour_.size() ? activity_colour_[r.index]
                                               : colour_class(*trace_, trace_->activities[r.index]);
    case ItemSource::kOp: return colour_class(trace_->ops[r.index].kind);
    case ItemSource::kSpan: {
      const auto& s = spans_[r.index];
      return span_colour_class(s.phase, s.level != SpanLevel::kIteration);
    }
    case ItemSource::kApiCall: return ColourClass::kApiCall;
    case ItemSource::kNvtx: return ColourClass::kNvtx;
    case ItemSource::kNone: break;
  }
  return ColourClass::kOtherCompute;
}

namespace {

std::string_view copy_kind_name(std::uint8_t k) {
  switch (static_cast<schema::CopyKind>(k)) {
    case schema::CopyKind::kHostToDevice: return "HtoD";
    case schema::CopyKind::kDeviceToHost: return "DtoH";
    case schema::CopyKind::kDeviceToDevice: return "DtoD";
    case schema::CopyKind::kHostToHost: return "HtoH";
    case schema::CopyKind::kPeerToPeer: return "PtoP";
    default: return "";
  }
}

}  // namespace

std::string TimelineModel::item_name(ItemRef r) const {
  switch (r.source) {
    case ItemSource::kActivity: {
      const auto& a = trace_->activities[r.index];
      if (a.type == analyzer::ActivityType::kKernel) {
        auto n = trace_->str(a.name);
        return n.empty() ? std::string("kernel") : std::string(n);
      }
      if (a.type == analyzer::ActivityType::kMemset) return "memset";
      const auto k = copy_kind_name(a.copy_kind);
      return k.empty() ? std::string("memcpy") : "memcpy " + std::string(k);
    }
    case ItemSource::kOp: {
      const auto& o = trace_->ops[r.index];
      auto n = trace_->str(o.name);
      return n.empty() ? std::string(op_kind_name(o.kind)) : std::string(n);
    }
    case ItemSource::kSpan: return item_label(r);
    case ItemSource::kApiCall: {
      auto n = trace_->str(trace_->api_calls[r.index].name);
      return n.empty() ? std::string("API call") : std::string(n);
    }
    case ItemSource::kNvtx: {
      auto n = trace_->str(trace_->nvtx[r.index].name);
      return n.empty() ? std::string("NVTX range") : std::string(n);
    }
    case ItemSource::kNone: break;
  }
  return {};
}

std::string TimelineModel::item_label(ItemRef r) const {
  switch (r.source) {
    case ItemSource::kActivity:
    case ItemSource::kApiCall:
    case ItemSource::kNvtx: return item_name(r);
    case ItemSource::kOp: {
      const auto& o = trace_->ops[r.index];
      std::string s = item_name(r);
      if (o.layer >= 0) s += " L" + std::to_string(o.layer);
      if (o.chunk >= 0) s += " c" + std::to_string(o.chunk);
      return s;
    }
    case ItemSource::kSpan: {
      const auto& s = spans_[r.index];
      if (s.level == SpanLevel::kIteration) return "iteration " + std::to_string(s.iteration);
      std::string l;
      if (s.level == SpanLevel::kChunk) l = "chunk " + std::to_string(s.chunk) + " ";
      l += "L" + std::to_string(s.layer) + " " + std::string(phase_name(s.phase));
      if (s.micro_batch >= 0) l += " mb" + std::to_string(s.micro_batch);
      return l;
    }
    case ItemSource::kNone: break;
  }
  return {};
}

std::pair<std::size_t, std::size_t> TimelineModel::visible_range(const Row& row, double t0, double t1) const {
  const std::size_t n = row.items.size();
  auto start_of = [&](std::size_t p) { return item_start(row_item(row, p)); };
  auto end_of = [&](std::size_t p) { return item_end(row_item(row, p)); };
  const std::size_t first = first_visible(n, t0, row.monotone, row.max_extent, start_of, end_of);
  std::size_t lo = first, hi = n;
  while (lo < hi) {  // starts are sorted in every row
    const std::size_t mid = lo + (hi - lo) / 2;
    if (static_cast<double>(start_of(mid)) <= t1) lo = mid + 1; else hi = mid;
  }
  return {first, lo};
}

std::optional<std::size_t> TimelineModel::hit_test(int row_index, double t, double tol) const {
  if (row_index < 0 || static_cast<std::size_t>(row_index) >= rows_.size()) return std::nullopt;
  const Row& row = rows_[static_cast<std::size_t>(row_index)];
  if (row.items.empty()) return std::nullopt;
  auto [first, last] = visible_range(row, t - tol, t + tol);
  // Prefer an item containing t (the shortest, where a row overlaps), then
  // the nearest edge. Candidates are few: a packed row does not overlap.
  std::optional<std::size_t> best;
  double best_key = std::numeric_limits<double>::infinity();
  constexpr std::size_t kScanLimit = 4096;
  if (last - first > kScanLimit && row.monotone) {
    // Zoomed far out: only the items next to t can be nearest.
    const std::size_t p = visible_range(row, t, t).first;
    first = p > 0 ? p - 1 : 0;
    last = std::min(p + 2, row.items.size());
  }
  for (std::size_t p = first; p < last && p < first + kScanLimit; ++p) {
    const ItemRef r = row_item(row, p);
    const double s = static_cast<double>(item_start(r)), e = static_cast<double>(item_end(r));
    double key;
    if (s <= t && t <= e) key = -1.0 / (1.0 + (e - s));  // containing: shorter is better, all < 0
    else key = std::min(std::fabs(s - t), std::fabs(e - t));
    if (key >= 0 && key > tol) continue;
    if (key < best_key) {
      best_key = key;
      best = p;
    }
  }
  return best;
}

std::optional<TimelineModel::Place> TimelineModel::place_of(ItemRef r) const {
  if (!r.valid()) return std::nullopt;
  std::int32_t stream = -1;
  std::int64_t thread = -1;
  RowKind kind = RowKind::kActivities;
  RankId rank;
  switch (r.source) {
    case ItemSource::kActivity:
      if (r.index >= trace_->activities.size()) return std::nullopt;
      stream = trace_->activities[r.index].stream;
      break;
    case ItemSource::kOp:
      if (r.index >= trace_->ops.size()) return std::nullopt;
      stream = trace_->ops[r.index].stream;
      kind = RowKind::kOps;
      break;
    case ItemSource::kSpan: {
      if (r.index >= spans_.size()) return std::nullopt;
      const auto& s = spans_[r.index];
      rank = s.rank;
      kind = s.level == SpanLevel::kIteration ? RowKind::kIterations
             : s.level == SpanLevel::kLayer   ? RowKind::kLayers
                                              : RowKind::kChunks;
      break;
    }
    case ItemSource::kApiCall:
      if (r.index >= trace_->api_calls.size()) return std::nullopt;
      rank = trace_->api_calls[r.index].rank;
      thread = trace_->api_calls[r.index].thread_id;
      kind = RowKind::kApiCalls;
      break;
    case ItemSource::kNvtx:
      if (r.index >= trace_->nvtx.size()) return std::nullopt;
      rank = trace_->nvtx[r.index].rank;
      thread = trace_->nvtx[r.index].thread_id;
      kind = RowKind::kNvtx;
      break;
    case ItemSource::kNone: return std::nullopt;
  }
  const std::int64_t start = item_start(r);
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    const Row& row = rows_[i];
    if (row.kind != kind || row.items.source() != r.source) continue;
    if (r.source == ItemSource::kSpan && row.rank != rank) continue;
    if ((r.source == ItemSource::kApiCall || r.source == ItemSource::kNvtx) && (row.rank != rank || row.thread != thread))
      continue;
    if ((r.source == ItemSource::kActivity || r.source == ItemSource::kOp) && row.stream != stream) continue;
    std::size_t lo = 0, hi = row.items.size();
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (item_start(row_item(row, mid)) < start) lo = mid + 1; else hi = mid;
    }
    for (std::size_t p = lo; p < row.items.size() && item_start(row_item(row, p)) == start; ++p)
      if (row.items[p] == r.index) return Place{static_cast<int>(i), p};
  }
  return std::nullopt;
}

std::size_t TimelineModel::memory_bytes() const {
  std::size_t b = sizeof(*this) + spans_.capacity() * sizeof(Span) + op_has_activity_.capacity() / 8;
  for (const auto& r : rows_) b += sizeof(Row) + r.items.memory_bytes() + r.lod.memory_bytes();
  for (const auto& c : counters_) b += c.memory_bytes();
  return b;
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
