#include "timeline_build.h"

#include <array>
#include <climits>
#include <atomic>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>

namespace moetrace::gui::detail {

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

std::vector<std::int32_t> rank_streams(const analyzer::Trace& t, RankId rank) {
  std::vector<std::int32_t> streams;
  for (std::size_t s = 0; s < t.streams.size(); ++s)
    if (t.streams[s].rank == rank) streams.push_back(static_cast<std::int32_t>(s));
  std::stable_sort(streams.begin(), streams.end(), [&](std::int32_t a, std::int32_t b) {
    const auto& sa = t.streams[static_cast<std::size_t>(a)];
    const auto& sb = t.streams[static_cast<std::size_t>(b)];
    return std::pair(role_order(sa.role), sa.id) < std::pair(role_order(sb.role), sb.id);
  });
  return streams;
}

bool track_overlaps(const analyzer::Trace& t, std::uint32_t b, std::uint32_t e) {
  std::int64_t prev_end = std::numeric_limits<std::int64_t>::min();
  for (std::uint32_t i = b; i < e; ++i) {
    if (t.activities[i].start_ns < prev_end) return true;
    prev_end = std::max(prev_end, t.activities[i].end_ns);
  }
  return false;
}

void add_packed_rows(const TimelineModel& m, std::vector<Row>& rows, const RowHead& head, ItemSource source,
                     std::span<const std::uint32_t> order, int max_sub_rows) {
  std::vector<std::vector<std::uint32_t>> packed;
  with_item_extents(m, source, [&](auto start_of, auto end_of) {
    packed = pack_rows(order, start_of, end_of, max_sub_rows);
  });
  for (std::size_t r = 0; r < packed.size(); ++r) {
    Row row;
    row.kind = head.kind;
    row.rank = head.rank;
    row.stream = head.stream;
    row.sub_row = static_cast<int>(r);
    row.height_px = head.height_px;
    if (r == 0) row.label = head.label;
    row.items = RowItems::indexed(source, std::move(packed[r]));
    rows.push_back(std::move(row));
  }
}

bool add_stream_rows(const TimelineModel& m, std::vector<Row>& rows, const analyzer::Trace& t, RankId rank,
                     std::int32_t s, const StreamRows& spec) {
  const auto su = static_cast<std::size_t>(s);
  const std::string label = spec.prefix + stream_label(t.streams[su]);
  if (spec.op_rows) {
    const auto b = static_cast<std::uint32_t>(t.op_track_begin[su]);
    const auto e = static_cast<std::uint32_t>(t.op_track_begin[su + 1]);
    std::vector<std::uint32_t> order(e - b);
    for (std::uint32_t i = b; i < e; ++i) order[i - b] = i;
    if (!order.empty())
      add_packed_rows(m, rows, {spec.op_kind, rank, s, label + " \xC2\xB7 op ranges", 16}, spec.op_source, order,
                      spec.max_sub_rows);
  }
  const auto b = static_cast<std::uint32_t>(t.activity_track_begin[su]);
  const auto e = static_cast<std::uint32_t>(t.activity_track_begin[su + 1]);
  if (e == b) return false;
  const RowHead head{spec.activity_kind, rank, s, spec.prefix + activity_row_label(t.streams[su]), 20};
  if (!track_overlaps(t, b, e)) {
    Row row;
    row.kind = head.kind;
    row.rank = rank;
    row.stream = s;
    row.height_px = head.height_px;
    row.label = head.label;
    row.items = RowItems::contiguous(spec.activity_source, b, e - b);
    rows.push_back(std::move(row));
  } else {
    std::vector<std::uint32_t> order(e - b);
    for (std::uint32_t i = b; i < e; ++i) order[i - b] = i;
    add_packed_rows(m, rows, head, spec.activity_source, order, spec.max_sub_rows);
  }
  return true;
}

std::vector<ColourClass> activity_colours(const analyzer::Trace& t) {
  std::vector<std::int8_t> by_name(t.strings.size() + 1, -1);
  std::vector<ColourClass> out(t.activities.size());
  for (std::size_t i = 0; i < t.activities.size(); ++i) {
    const auto& a = t.activities[i];
    if (a.op < 0 && a.type == analyzer::ActivityType::kKernel && a.name.valid() &&
        static_cast<std::size_t>(a.name.value) < t.strings.size()) {
      auto& c = by_name[static_cast<std::size_t>(a.name.value)];
      if (c < 0) c = static_cast<std::int8_t>(colour_class(t, a));
      out[i] = static_cast<ColourClass>(c);
    } else {
      out[i] = colour_class(t, a);
    }
  }
  return out;
}

namespace {

// A span's coordinates: rank, iteration, phase, layer, micro-batch, chunk
// (-1 where its level has none).
using SpanKey = std::array<std::int32_t, 6>;

// The key of `op`'s span of `level`; false where it has none.
bool span_key(const analyzer::OpRange& op, SpanLevel level, SpanKey& key) {
  const auto phase = static_cast<std::int32_t>(op.phase);
  switch (level) {
    case SpanLevel::kIteration: key = {op.rank.value, op.iteration, 0, -1, -1, -1}; return op.iteration >= 0;
    case SpanLevel::kLayer: key = {op.rank.value, op.iteration, phase, op.layer, op.micro_batch, -1}; return op.layer >= 0;
    case SpanLevel::kChunk:
      key = {op.rank.value, op.iteration, phase, op.layer, op.micro_batch, op.chunk};
      return op.layer >= 0 && op.chunk >= 0;
  }
  return false;
}

// Where the span of each key of one level is: a dense table over the
// ranges that its keys take, where that table is small (for the traces of
// moetrace's writers: a few ranks, layers, phases and chunks, iterations
// numbered from 0), else a hash map.
class SpanIndex {
 public:
  SpanIndex(const std::vector<analyzer::OpRange>& ops, SpanLevel level) {
    lo_.fill(INT32_MAX);
    hi_.fill(INT32_MIN);
    SpanKey k{};
    for (const auto& op : ops) {
      if (!span_key(op, level, k)) continue;
      for (std::size_t f = 0; f < k.size(); ++f) {
        lo_[f] = std::min(lo_[f], k[f]);
        hi_[f] = std::max(hi_[f], k[f]);
      }
    }
    if (lo_[0] > hi_[0]) return;  // no op has a span of this level
    double size = 1;
    for (std::size_t f = 0; f < lo_.size(); ++f) size *= static_cast<double>(hi_[f]) - lo_[f] + 1;
    if (size > std::max<double>(1 << 16, 2.0 * static_cast<double>(ops.size()))) return;
    dense_.assign(static_cast<std::size_t>(size), kNone);
  }
  static constexpr std::uint32_t kNone = UINT32_MAX;
  // Keys the dense table has room for (0: a hash map).
  std::size_t dense_size() const { return dense_.size(); }
  // The index of `key`'s span in the spans found so far (kNone: none yet).
  std::uint32_t& operator[](const SpanKey& key) {
    if (dense_.empty()) return hashed_.try_emplace(key, kNone).first->second;
    std::size_t at = 0;
    for (std::size_t f = 0; f < key.size(); ++f)
      at = at * static_cast<std::size_t>(hi_[f] - lo_[f] + 1) + static_cast<std::size_t>(key[f] - lo_[f]);
    return dense_[at];
  }

 private:
  struct Hash {
    std::size_t operator()(const SpanKey& k) const {
      std::uint64_t h = 0xcbf29ce484222325ull;
      for (auto v : k) h = (h ^ static_cast<std::uint64_t>(static_cast<std::int64_t>(v))) * 0x100000001b3ull;
      return static_cast<std::size_t>(h ^ (h >> 29));
    }
  };
  SpanKey lo_{}, hi_{};
  std::vector<std::uint32_t> dense_;
  std::unordered_map<SpanKey, std::uint32_t, Hash> hashed_;
};

}  // namespace

std::vector<Span> derive_spans(const analyzer::Trace& t) {
  constexpr std::array kLevels{SpanLevel::kIteration, SpanLevel::kLayer, SpanLevel::kChunk};
  std::vector<SpanIndex> index;
  std::size_t dense = 0;
  for (auto level : kLevels) dense += index.emplace_back(t.ops, level).dense_size();
  std::vector<Span> out;  // in the order first seen
  out.reserve(std::min(dense, 3 * t.ops.size()));  // the keys of dense tables are mostly spans
  // Neighbouring ops on a stream mostly share their keys: remember the last
  // span of each level and skip the look-up for a repeat.
  std::array<std::pair<SpanKey, std::uint32_t>, 3> last{};
  for (auto& l : last) l = {SpanKey{-2}, SpanIndex::kNone};
  SpanKey key{};
  for (const auto& op : t.ops)
    for (auto level : kLevels) {
      if (!span_key(op, level, key)) continue;
      const auto l = static_cast<std::size_t>(level);
      auto& cached = last[l];
      if (cached.second == SpanIndex::kNone || cached.first != key) {
        auto& at = index[l][key];
        if (at == SpanIndex::kNone) {
          at = static_cast<std::uint32_t>(out.size());
          Span& s = out.emplace_back();
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
        }
        cached = {key, at};
      }
      Span& s = out[cached.second];
      s.start_ns = std::min(s.start_ns, op.start_ns);
      s.end_ns = std::max(s.end_ns, op.end_ns);
      ++s.ops;
    }
  if (out.capacity() > out.size() + out.size() / 8) out.shrink_to_fit();
  // Spans of the same extent stay in the order first seen.
  std::stable_sort(out.begin(), out.end(), [](const Span& a, const Span& b) {
    return std::tuple(a.rank, a.level, a.start_ns, -a.end_ns) < std::tuple(b.rank, b.level, b.start_ns, -b.end_ns);
  });
  return out;
}

namespace {

// Orders spans by (rank, level) against a (rank, level) key, either way round.
struct SpanKeyLess {
  using Key = std::pair<RankId, SpanLevel>;
  bool operator()(const Span& s, const Key& k) const { return std::pair(s.rank, s.level) < k; }
  bool operator()(const Key& k, const Span& s) const { return k < std::pair(s.rank, s.level); }
};

}  // namespace

std::vector<std::uint32_t> spans_of(std::span<const Span> spans, RankId rank, SpanLevel level) {
  const auto range = std::equal_range(spans.begin(), spans.end(), std::pair(rank, level), SpanKeyLess{});
  std::vector<std::uint32_t> order;
  for (auto it = range.first; it != range.second; ++it) order.push_back(static_cast<std::uint32_t>(it - spans.begin()));
  return order;
}

void build_pyramids(const TimelineModel& m, std::span<Row> rows, std::vector<std::size_t> todo, unsigned threads,
                    const std::function<void(double)>& progress) {
  auto build_one = [&m](Row& row) {
    if (row.items.empty()) return;
    std::vector<ItemExtent> ext(row.items.size());
    with_item_extents(m, row.items.source(), [&](auto start_of, auto end_of) {
      for (std::size_t p = 0; p < ext.size(); ++p) {
        const std::uint32_t i = row.items[p];
        ext[p] = {start_of(i), end_of(i)};
      }
    });
    std::int64_t prev_end = std::numeric_limits<std::int64_t>::min();
    for (const auto& e : ext) {
      row.max_extent = std::max(row.max_extent, e.end - e.start);
      if (e.start < prev_end) row.monotone = false;
      prev_end = std::max(prev_end, e.end);
    }
    row.lod = LodPyramid::build(ext);
  };
  std::erase_if(todo, [&](std::size_t i) { return rows[i].items.empty(); });
  // Biggest rows first so the threads finish together.
  std::sort(todo.begin(), todo.end(),
            [&](std::size_t a, std::size_t b) { return rows[a].items.size() > rows[b].items.size(); });
  std::size_t total = 0;
  for (auto i : todo) total += rows[i].items.size();
  std::atomic<std::size_t> next{0}, done_items{0};
  std::mutex progress_mu;
  auto worker = [&] {
    for (;;) {
      const std::size_t k = next.fetch_add(1);
      if (k >= todo.size()) return;
      Row& row = rows[todo[k]];
      build_one(row);
      const auto d = done_items.fetch_add(row.items.size()) + row.items.size();
      if (!progress) continue;
      std::lock_guard lock(progress_mu);
      progress(total ? static_cast<double>(d) / static_cast<double>(total) : 1.0);
    }
  };
  unsigned n = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  n = static_cast<unsigned>(std::min<std::size_t>(n, std::max<std::size_t>(1, todo.size())));
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < n; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

}  // namespace moetrace::gui::detail
