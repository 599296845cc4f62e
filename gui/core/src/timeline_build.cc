#include "timeline_build.h"

#include <array>
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
  auto packed = pack_rows(
      order, [&](std::uint32_t i) { return m.item_start({source, i}); },
      [&](std::uint32_t i) { return m.item_end({source, i}); }, max_sub_rows);
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

std::vector<Span> derive_spans(const analyzer::Trace& t) {
  std::vector<Span> out;
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
  out.reserve(spans.size());
  for (auto& [k, s] : spans) out.push_back(s);
  std::sort(out.begin(), out.end(), [](const Span& a, const Span& b) {
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
    for (std::size_t p = 0; p < ext.size(); ++p) {
      const ItemRef r = m.row_item(row, p);
      ext[p] = {m.item_start(r), m.item_end(r)};
    }
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
