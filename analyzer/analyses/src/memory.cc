#include "moetrace/analyzer/memory.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "moetrace/analyzer/interval.h"
#include "op_intervals.h"

namespace moetrace::analyzer {

std::string_view memory_class_name(MemoryClass c) {
  switch (c) {
    case MemoryClass::kModelStates: return "model_states";
    case MemoryClass::kActivations: return "activations";
    case MemoryClass::kTemporaryBuffers: return "temporary_buffers";
    case MemoryClass::kUnattributed: return "unattributed";
  }
  return "unattributed";
}

MemoryClass memory_class(std::string_view tag) {
  if (tag == "params" || tag == "grads" || tag == "optimizer") return MemoryClass::kModelStates;
  if (tag == "T_I" || tag == "T_DI" || tag == "T_M" || tag == "T_DO" || tag == "T_O" ||
      tag == "activation" || tag == "routing")
    return MemoryClass::kActivations;
  if (tag.starts_with("dT_") || tag == "activation_grad" || tag == "workspace")
    return MemoryClass::kTemporaryBuffers;
  return MemoryClass::kUnattributed;
}

namespace {

bool on_device(schema::MemoryKind k) {
  return k == schema::MemoryKind::kDevice || k == schema::MemoryKind::kManaged ||
         k == schema::MemoryKind::kUnknown;
}

struct Alloc {
  std::int32_t rank;
  std::int64_t start, end, bytes;
  const Buffer* buffer;  // nullptr: raw allocation of no known buffer
  bool in_timeline = true;  // false: a buffer analysed for bubbles only (its rank's timeline comes from events)
};

// Step function of the summed bytes of intervals: one point per change.
std::vector<MemoryPoint> steps(std::vector<std::pair<std::int64_t, std::int64_t>> deltas) {
  std::sort(deltas.begin(), deltas.end());
  std::vector<MemoryPoint> out;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < deltas.size();) {
    const auto ts = deltas[i].first;
    for (; i < deltas.size() && deltas[i].first == ts; ++i) total += deltas[i].second;
    if (!out.empty() && out.back().bytes == total) continue;
    out.push_back({ts, total});
  }
  return out;
}

}  // namespace

namespace {

// pipeline_degree()'s count where the run configures none: the chunks of
// the layer's ops (the highest chunk index + 1, at least 1).
int degree_of_chunks(std::int32_t max_chunk) { return std::max(1, max_chunk + 1); }

// The layer's highest chunk so far, per layer.
void keep_highest_chunk(std::map<std::int32_t, std::int32_t>& chunks, std::int32_t layer, std::int32_t chunk) {
  auto& highest = chunks.try_emplace(layer, -1).first->second;
  highest = std::max(highest, chunk);
}

int configured_pipeline_degree(const Trace& trace) {
  for (const char* key : {"partitions", "pipeline_degree"})
    if (auto v = trace.config_int(key).value_or(0); v >= 1) return static_cast<int>(v);
  return 0;
}

// Allocations per rank: raw events where the rank has them, else buffers
// (the rule in memory.h); sorted by (rank, start, end). `ranks` gets every
// rank with memory information, from_events and unmatched_frees set.
std::vector<Alloc> collect_allocations(const Trace& trace, std::map<std::int32_t, RankMemory>& ranks) {
  std::int64_t run_start = trace.run.start_ns, run_end = trace.run.end_ns;
  if (run_end <= run_start) {
    run_start = INT64_MAX;
    run_end = INT64_MIN;
    for (const auto& e : trace.memory_events) {
      run_start = std::min(run_start, e.ts_ns);
      run_end = std::max(run_end, e.ts_ns);
    }
    for (const auto& o : trace.ops) {
      run_start = std::min(run_start, o.start_ns);
      run_end = std::max(run_end, o.end_ns);
    }
    if (run_start > run_end) run_start = run_end = 0;
  }
  std::unordered_map<std::int64_t, const Buffer*> buffer_by_id;
  for (const auto& b : trace.buffers) buffer_by_id.emplace(b.id.value, &b);
  auto buffer_of = [&](const MemoryEvent* a) -> const Buffer* {
    auto it = a->buffer.valid() ? buffer_by_id.find(a->buffer.value) : buffer_by_id.end();
    return it == buffer_by_id.end() ? nullptr : it->second;
  };

  std::vector<Alloc> allocs;
  std::map<std::pair<std::int32_t, std::uint64_t>, std::vector<const MemoryEvent*>> open;
  for (const auto& e : trace.memory_events) {
    if (!on_device(e.memory_kind)) continue;
    auto& rm = ranks[e.rank.value];
    rm.from_events = true;
    auto& stack = open[{e.rank.value, e.address}];
    if (e.alloc) {
      stack.push_back(&e);
      continue;
    }
    if (stack.empty()) {
      ++rm.unmatched_frees;
      continue;
    }
    const auto* a = stack.back();
    stack.pop_back();
    allocs.push_back({a->rank.value, a->ts_ns, e.ts_ns, a->bytes, buffer_of(a)});
  }
  for (const auto& [key, stack] : open)
    for (const auto* a : stack) allocs.push_back({a->rank.value, a->ts_ns, std::max(run_end, a->ts_ns), a->bytes, buffer_of(a)});
  std::unordered_map<std::int64_t, bool> named_by_event;
  for (const auto& a : allocs)
    if (a.buffer) named_by_event[a.buffer->id.value] = true;
  for (const auto& b : trace.buffers) {
    if (!on_device(b.memory_kind) || named_by_event.count(b.id.value)) continue;
    auto it = ranks.find(b.rank.value);
    const bool events = it != ranks.end() && it->second.from_events;
    if (!events) ranks[b.rank.value].from_events = false;
    const auto start = b.alloc_ns >= 0 ? b.alloc_ns : run_start;
    const auto end = b.free_ns >= 0 ? b.free_ns : std::max(run_end, start);
    // On a rank with raw events the buffer is already inside some raw
    // allocation: it counts for bubbles, not again for the timeline.
    allocs.push_back({b.rank.value, start, std::max(start, end), b.bytes, &b, !events});
  }
  // Stable: each rank's allocations keep their order whatever other ranks
  // the trace holds (a run's files analysed one by one agree with their union).
  std::stable_sort(allocs.begin(), allocs.end(), [](const Alloc& a, const Alloc& b) {
    return std::tie(a.rank, a.start, a.end) < std::tie(b.rank, b.start, b.end);
  });
  return allocs;
}

MemoryClass class_of(const Alloc& a) { return a.buffer ? memory_class(a.buffer->tag) : MemoryClass::kUnattributed; }

// The run's peak (the largest rank's) and byte-time from its ranks, summed
// rank by rank.
void combine_ranks(MemoryTimeline& m) {
  m.peak_bytes = 0;
  m.peak_rank = -1;
  m.allocated_bytes_ns = 0;
  for (const auto& rm : m.ranks) {
    if (rm.peak_bytes > m.peak_bytes || m.peak_rank < 0) {
      m.peak_bytes = rm.peak_bytes;
      m.peak_rank = rm.rank;
    }
    m.allocated_bytes_ns += rm.allocated_bytes_ns;
  }
}

// The timeline of every rank from its allocations, and the peak: the
// largest allocated total (frees and allocations at one instant net out
// first) and its composition by memory class.
MemoryTimeline timeline_of(const std::vector<Alloc>& allocs, std::map<std::int32_t, RankMemory> ranks) {
  MemoryTimeline m;
  m.has_allocations = !allocs.empty();
  std::map<std::int32_t, std::vector<std::pair<std::int64_t, std::int64_t>>> alloc_deltas;
  std::map<std::int32_t, std::vector<std::tuple<std::int64_t, int, std::int64_t>>> class_deltas;
  for (const auto& a : allocs) {
    if (!a.in_timeline) continue;
    const auto c = static_cast<int>(class_of(a));
    alloc_deltas[a.rank].push_back({a.start, a.bytes});
    alloc_deltas[a.rank].push_back({a.end, -a.bytes});
    class_deltas[a.rank].push_back({a.start, c, a.bytes});
    class_deltas[a.rank].push_back({a.end, c, -a.bytes});
    ranks[a.rank].allocated_bytes_ns += static_cast<double>(a.bytes) * static_cast<double>(a.end - a.start);
  }
  for (auto& [rank, rm] : ranks) {
    rm.rank = rank;
    rm.allocated = steps(std::move(alloc_deltas[rank]));
    auto& cd = class_deltas[rank];
    std::sort(cd.begin(), cd.end());
    MemoryClassBytes cur{};
    std::int64_t total = 0;
    rm.peak_bytes = 0;
    for (std::size_t i = 0; i < cd.size();) {
      const auto ts = std::get<0>(cd[i]);
      for (; i < cd.size() && std::get<0>(cd[i]) == ts; ++i) {
        cur[static_cast<std::size_t>(std::get<1>(cd[i]))] += std::get<2>(cd[i]);
        total += std::get<2>(cd[i]);
      }
      if (total > rm.peak_bytes) {
        rm.peak_bytes = total;
        rm.peak_ns = ts;
        rm.peak_by_class = cur;
      }
    }
    m.ranks.push_back(std::move(rm));
  }
  combine_ranks(m);
  return m;
}

}  // namespace

std::int64_t memory_at(std::span<const MemoryPoint> timeline, std::int64_t t_ns) {
  auto it = std::upper_bound(timeline.begin(), timeline.end(), t_ns,
                             [](std::int64_t t, const MemoryPoint& p) { return t < p.ts_ns; });
  return it == timeline.begin() ? 0 : std::prev(it)->bytes;
}

MemoryWindow memory_in_window(std::span<const MemoryPoint> timeline, std::int64_t t0, std::int64_t t1) {
  MemoryWindow w;
  w.points.push_back({t0, memory_at(timeline, t0)});
  auto it = std::upper_bound(timeline.begin(), timeline.end(), t0,
                             [](std::int64_t t, const MemoryPoint& p) { return t < p.ts_ns; });
  for (; it != timeline.end() && it->ts_ns < t1; ++it) w.points.push_back(*it);
  w.peak_bytes = w.points.front().bytes;
  w.peak_ns = t0;
  for (const auto& p : w.points)
    if (p.bytes > w.peak_bytes) {
      w.peak_bytes = p.bytes;
      w.peak_ns = p.ts_ns;
    }
  return w;
}

std::vector<const BufferUse*> largest_bubbles(const MemoryAnalysis& m, std::size_t n) {
  std::vector<const BufferUse*> top;
  top.reserve(m.buffers.size());
  for (const auto& b : m.buffers) top.push_back(&b);
  auto key = [](const BufferUse* b) { return std::tuple(-b->memory_bubble_bytes_ns(), b->rank, b->buffer, b->alloc_ns); };
  const auto keep = std::min(n, top.size());
  std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(keep), top.end(),
                    [&](const BufferUse* a, const BufferUse* b) { return key(a) < key(b); });
  top.resize(keep);
  return top;
}

int pipeline_degree(const Trace& trace, std::int32_t layer) {
  if (const int n = configured_pipeline_degree(trace); n > 0) return n;
  std::int32_t max_chunk = -1;
  for (const auto& op : trace.ops)
    if (op.layer == layer) max_chunk = std::max(max_chunk, op.chunk);
  return degree_of_chunks(max_chunk);
}

namespace {

// The run's start where the trace records one, else the first allocation.
std::int64_t run_origin(const Trace& trace, const MemoryTimeline& t) {
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  for (const auto& r : t.ranks)
    if (!r.allocated.empty()) first = std::min(first, r.allocated.front().ts_ns);
  if (first == std::numeric_limits<std::int64_t>::max()) first = 0;
  return trace.run.start_ns > 0 && trace.run.start_ns <= first ? trace.run.start_ns : first;
}

}  // namespace

MemoryTimeline memory_timeline(const Trace& trace) {
  std::map<std::int32_t, RankMemory> ranks;
  const auto allocs = collect_allocations(trace, ranks);
  MemoryTimeline t = timeline_of(allocs, std::move(ranks));
  t.origin_ns = run_origin(trace, t);
  return t;
}

namespace {

// What the ranks' parts add up to (analyze_memory and merge_memory): the
// peak, the byte-times and tags summed rank by rank, the origin, and
// mpipemoe Eq. 1-6 per MoE layer next to what the ranks' buffers show.
void finish(MemoryAnalysis& m, const Trace& trace) {
  combine_ranks(m);
  m.origin_ns = run_origin(trace, m);
  m.memory_bubble_bytes_ns = m.buffer_bytes_ns = 0;
  std::map<std::string, TagBubbles> tags;
  std::map<std::int32_t, RankMemory::LayerBuffers> measured;  // by layer: peaks max over ranks, bubbles summed
  for (const auto& rm : m.ranks) {
    m.memory_bubble_bytes_ns += rm.memory_bubble_bytes_ns;
    m.buffer_bytes_ns += rm.buffer_bytes_ns;
    for (const auto& t : rm.tags) {
      auto& sum = tags[t.tag];
      sum.tag = t.tag;
      sum.memory_class = t.memory_class;
      sum.buffers += t.buffers;
      sum.max_bytes = std::max(sum.max_bytes, t.max_bytes);
      sum.allocated_bytes_ns += t.allocated_bytes_ns;
      sum.memory_bubble_bytes_ns += t.memory_bubble_bytes_ns;
    }
    for (const auto& l : rm.layers) {
      auto& sum = measured[l.layer];
      for (std::size_t c = 0; c < sum.peak_bytes.size(); ++c) sum.peak_bytes[c] = std::max(sum.peak_bytes[c], l.peak_bytes[c]);
      sum.memory_bubble_bytes_ns += l.memory_bubble_bytes_ns;
    }
  }
  m.tags.clear();
  for (auto& [tag, t] : tags) m.tags.push_back(std::move(t));

  // mpipemoe Eq. 1-6 per MoE layer, next to what the trace shows.
  m.layers.clear();
  const int elem_bytes = static_cast<int>(std::max<std::int64_t>(1, trace.config_int("elem_bytes").value_or(2)));
  const int world = std::max(1, trace.run.world_size);
  // Routed tokens per layer: (sum over iterations, iterations).
  std::map<std::int32_t, std::pair<double, int>> routed;
  {
    std::map<std::int32_t, std::set<std::int32_t>> iterations;
    for (const auto& e : trace.expert_load) {
      routed[e.layer].first += static_cast<double>(e.tokens);
      iterations[e.layer].insert(e.iteration);
    }
    for (auto& [layer, its] : iterations) routed[layer].second = static_cast<int>(its.size());
  }
  const int configured = configured_pipeline_degree(trace);
  for (const auto& l : trace.layers) {
    // B: tokens a device processes per iteration. Measured where the trace
    // has expert load (routed tokens, top-k included, over the devices);
    // else the layers table's tokens per rank times top_k.
    double routed_per_device = 0;
    if (auto it = routed.find(l.layer); it != routed.end() && it->second.second > 0)
      routed_per_device = it->second.first / static_cast<double>(it->second.second) / world;
    if (l.kind != "moe" || l.model_dim <= 0 || l.hidden_dim <= 0 || l.num_experts <= 0 ||
        (l.tokens <= 0 && routed_per_device <= 0))
      continue;
    LayerMemoryModel lm;
    lm.layer = l.layer;
    lm.experts = l.num_experts;
    lm.experts_per_rank = std::max(1.0, static_cast<double>(l.num_experts) / world);
    lm.model_dim = l.model_dim;
    lm.hidden_dim = l.hidden_dim;
    lm.tokens = routed_per_device > 0 ? static_cast<std::int64_t>(std::llround(routed_per_device))
                                      : l.tokens * std::max(1, l.top_k);
    lm.partitions = configured;
    if (lm.partitions <= 0) {  // pipeline_degree()'s count of chunks, over every rank's ops
      const auto it = std::lower_bound(m.layer_chunks.begin(), m.layer_chunks.end(), std::pair{l.layer, INT32_MIN});
      lm.partitions = degree_of_chunks(it != m.layer_chunks.end() && it->first == l.layer ? it->second : -1);
    }
    lm.elem_bytes = elem_bytes;
    MpipemoeShape shape;
    shape.tokens = static_cast<double>(lm.tokens);
    shape.model_dim = static_cast<double>(lm.model_dim);
    shape.hidden = static_cast<double>(lm.hidden_dim);
    shape.experts = static_cast<double>(lm.experts);
    shape.experts_per_device = lm.experts_per_rank;
    shape.partitions = lm.partitions;
    shape.elem_bytes = elem_bytes;
    const auto eq = mpipemoe_memory(shape);
    lm.model_states_bytes = static_cast<std::int64_t>(eq.model_states);
    lm.activations_bytes = static_cast<std::int64_t>(eq.activations);
    lm.temporary_buffers_bytes = static_cast<std::int64_t>(eq.temporary_buffers);
    lm.pipelined_buffers_bytes = static_cast<std::int64_t>(eq.buffers);
    lm.reuse_saving_bytes = static_cast<std::int64_t>(eq.saving);
    lm.saving_ratio = eq.saving_ratio;
    lm.layer_bytes_without_reuse = static_cast<std::int64_t>(eq.layer_bytes(false));
    lm.layer_bytes_with_reuse = static_cast<std::int64_t>(eq.layer_bytes(true));
    if (auto it = measured.find(l.layer); it != measured.end()) {
      lm.measured_peak_bytes = it->second.peak_bytes;
      lm.memory_bubble_bytes_ns = it->second.memory_bubble_bytes_ns;
    }
    m.layers.push_back(lm);
  }
}

}  // namespace

MemoryAnalysis analyze_memory(const Trace& trace) {
  MemoryAnalysis m;
  std::map<std::int32_t, RankMemory> rank_info;
  const auto allocs = collect_allocations(trace, rank_info);
  static_cast<MemoryTimeline&>(m) = timeline_of(allocs, std::move(rank_info));
  std::map<std::int32_t, RankMemory*> ranks;
  for (auto& rm : m.ranks) ranks[rm.rank] = &rm;

  // Which ops use each buffer, and when they ran.
  const OpIntervals oi(trace);
  std::unordered_map<std::int64_t, std::vector<std::size_t>> users;
  for (const auto& u : trace.op_buffers) {
    const int o = trace.op_index(u.op);
    if (o >= 0) users[u.buffer.value].push_back(static_cast<std::size_t>(o));
  }
  m.has_buffer_usage = !trace.op_buffers.empty() &&
                       std::any_of(allocs.begin(), allocs.end(), [](const Alloc& a) { return a.buffer; });

  // Per rank: tags and layers (by name, by layer).
  std::map<std::int32_t, std::map<std::string, TagBubbles>> tags;
  std::map<std::int32_t, std::map<std::int32_t, double>> layer_bubbles;
  std::map<std::int32_t, std::vector<std::pair<std::int64_t, std::int64_t>>> idle_deltas;
  // Per (rank, layer, class): the layer's buffers of a class, for the model's measured peaks.
  std::map<std::tuple<std::int32_t, std::int32_t, int>, std::vector<std::pair<std::int64_t, std::int64_t>>>
      layer_class_deltas;
  for (const auto& a : allocs) {
    if (!a.buffer) continue;
    const auto cls = class_of(a);
    if (a.buffer->layer >= 0) {
      auto& d = layer_class_deltas[{a.rank, a.buffer->layer, static_cast<int>(cls)}];
      d.push_back({a.start, a.bytes});
      d.push_back({a.end, -a.bytes});
    }
    if (!m.has_buffer_usage) continue;

    // Used time: union of the GPU time of the ops that touch the buffer.
    BufferUse use;
    use.rank = RankId(a.rank);
    use.buffer = a.buffer->id;
    use.tag = a.buffer->tag;
    use.memory_class = cls;
    use.layer = a.buffer->layer;
    use.chunk = a.buffer->chunk;
    use.bytes = a.bytes;
    use.alloc_ns = a.start;
    use.free_ns = a.end;
    std::vector<Interval> used;
    if (auto it = users.find(a.buffer->id.value); it != users.end()) {
      use.ops = static_cast<int>(it->second.size());
      for (auto o : it->second)
        for (const auto i : oi.of(o)) used.push_back(i);
    }
    const auto life = IntervalSet::from({{a.start, a.end}});
    const auto used_set = IntervalSet::from(std::move(used)).clip({a.start, a.end});
    use.used_ns = used_set.length();
    use.bubble_ns = (a.end - a.start) - use.used_ns;
    const auto gaps = life.subtract(used_set);
    for (const auto& gap : gaps.intervals()) {
      m.bubbles.push_back({use.rank, use.buffer, use.tag, use.layer, use.chunk, use.bytes, gap.start, gap.end});
      idle_deltas[a.rank].push_back({gap.start, a.bytes});
      idle_deltas[a.rank].push_back({gap.end, -a.bytes});
    }
    const double allocated_bytes_ns = static_cast<double>(a.bytes) * static_cast<double>(a.end - a.start);
    const double bubble = use.memory_bubble_bytes_ns();
    auto& t = tags[a.rank][use.tag];
    t.tag = use.tag;
    t.memory_class = cls;
    ++t.buffers;
    t.max_bytes = std::max(t.max_bytes, use.bytes);
    t.allocated_bytes_ns += allocated_bytes_ns;
    t.memory_bubble_bytes_ns += bubble;
    auto& rm = *ranks[a.rank];
    rm.memory_bubble_bytes_ns += bubble;
    rm.buffer_bytes_ns += allocated_bytes_ns;
    if (use.layer >= 0) layer_bubbles[a.rank][use.layer] += bubble;
    m.buffers.push_back(std::move(use));
  }
  for (auto& rm : m.ranks) {
    rm.idle = steps(std::move(idle_deltas[rm.rank]));
    for (auto& [tag, t] : tags[rm.rank]) rm.tags.push_back(std::move(t));
    std::map<std::int32_t, RankMemory::LayerBuffers> layers;
    for (const auto& [layer, bubble] : layer_bubbles[rm.rank]) {
      layers[layer].layer = layer;
      layers[layer].memory_bubble_bytes_ns = bubble;
    }
    for (auto it = layer_class_deltas.lower_bound({rm.rank, INT32_MIN, 0});
         it != layer_class_deltas.end() && std::get<0>(it->first) == rm.rank; ++it) {
      const auto& [rank, layer, c] = it->first;
      std::int64_t peak = 0;
      for (const auto& p : steps(it->second)) peak = std::max(peak, p.bytes);
      auto& l = layers[layer];
      l.layer = layer;
      l.peak_bytes[static_cast<std::size_t>(c)] = peak;
    }
    for (auto& [layer, l] : layers) rm.layers.push_back(l);
  }
  // Stable, as the allocations' order (their ranks' own).
  std::stable_sort(m.bubbles.begin(), m.bubbles.end(), [](const MemoryBubble& a, const MemoryBubble& b) {
    return std::tie(a.rank, a.start_ns, a.end_ns) < std::tie(b.rank, b.start_ns, b.end_ns);
  });
  {
    std::map<std::int32_t, std::int32_t> chunks;
    for (const auto& op : trace.ops)
      if (op.layer >= 0) keep_highest_chunk(chunks, op.layer, op.chunk);
    m.layer_chunks.assign(chunks.begin(), chunks.end());
  }
  finish(m, trace);
  return m;
}

MemoryAnalysis merge_memory(std::vector<MemoryAnalysis> parts, const Trace& run) {
  MemoryAnalysis m;
  std::map<std::int32_t, std::int32_t> chunks;
  for (auto& p : parts) {
    m.has_allocations = m.has_allocations || p.has_allocations;
    m.has_buffer_usage = m.has_buffer_usage || p.has_buffer_usage;
    for (auto& r : p.ranks) m.ranks.push_back(std::move(r));
    for (auto& b : p.buffers) m.buffers.push_back(std::move(b));
    for (auto& b : p.bubbles) m.bubbles.push_back(std::move(b));
    for (const auto& [layer, chunk] : p.layer_chunks) keep_highest_chunk(chunks, layer, chunk);
    p = MemoryAnalysis();
  }
  std::stable_sort(m.ranks.begin(), m.ranks.end(), [](const RankMemory& a, const RankMemory& b) { return a.rank < b.rank; });
  std::stable_sort(m.buffers.begin(), m.buffers.end(), [](const BufferUse& a, const BufferUse& b) { return a.rank < b.rank; });
  std::stable_sort(m.bubbles.begin(), m.bubbles.end(), [](const MemoryBubble& a, const MemoryBubble& b) {
    return std::tie(a.rank, a.start_ns, a.end_ns) < std::tie(b.rank, b.start_ns, b.end_ns);
  });
  m.layer_chunks.assign(chunks.begin(), chunks.end());
  finish(m, run);
  return m;
}

}  // namespace moetrace::analyzer
