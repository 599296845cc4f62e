#include "moetrace/analyzer/memory.h"

#include <algorithm>
#include <charconv>
#include <cmath>
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

std::int64_t parse_int(std::string_view s, std::int64_t dflt) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() ? v : dflt;
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

int configured_pipeline_degree(const Trace& trace) {
  for (const char* key : {"partitions", "pipeline_degree"})
    if (auto v = parse_int(trace.config_value(key), 0); v >= 1) return static_cast<int>(v);
  return 0;
}

}  // namespace

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
  return std::max(1, max_chunk + 1);
}

MemoryAnalysis analyze_memory(const Trace& trace) {
  MemoryAnalysis m;
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

  // Allocations per rank: raw events where the rank has them, else buffers.
  std::map<std::int32_t, RankMemory> ranks;
  std::vector<Alloc> allocs;
  {
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
      auto it = a->buffer.valid() ? buffer_by_id.find(a->buffer.value) : buffer_by_id.end();
      allocs.push_back({a->rank.value, a->ts_ns, e.ts_ns, a->bytes,
                        it == buffer_by_id.end() ? nullptr : it->second});
    }
    for (const auto& [key, stack] : open)
      for (const auto* a : stack) {
        auto it = a->buffer.valid() ? buffer_by_id.find(a->buffer.value) : buffer_by_id.end();
        allocs.push_back({a->rank.value, a->ts_ns, std::max(run_end, a->ts_ns), a->bytes,
                          it == buffer_by_id.end() ? nullptr : it->second});
      }
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
  }
  m.has_allocations = !allocs.empty();
  std::sort(allocs.begin(), allocs.end(), [](const Alloc& a, const Alloc& b) {
    return std::tie(a.rank, a.start, a.end) < std::tie(b.rank, b.start, b.end);
  });

  // Which ops use each buffer, and when they ran.
  const OpIntervals oi(trace);
  std::unordered_map<std::int64_t, std::vector<std::size_t>> users;
  for (const auto& u : trace.op_buffers) {
    const int o = trace.op_index(u.op);
    if (o >= 0) users[u.buffer.value].push_back(static_cast<std::size_t>(o));
  }
  m.has_buffer_usage = !trace.op_buffers.empty() &&
                       std::any_of(allocs.begin(), allocs.end(), [](const Alloc& a) { return a.buffer; });

  std::map<std::string, TagBubbles> tags;
  std::map<std::int32_t, double> layer_bubbles;
  std::map<std::int32_t, std::vector<std::pair<std::int64_t, std::int64_t>>> alloc_deltas, idle_deltas;
  // Per rank: (ts, class, delta) for the peak composition; per (layer, class, rank) sweeps.
  std::map<std::int32_t, std::vector<std::tuple<std::int64_t, int, std::int64_t>>> class_deltas;
  std::map<std::tuple<std::int32_t, int, std::int32_t>, std::vector<std::pair<std::int64_t, std::int64_t>>>
      layer_class_deltas;
  for (const auto& a : allocs) {
    const auto cls = a.buffer ? memory_class(a.buffer->tag) : MemoryClass::kUnattributed;
    const auto c = static_cast<int>(cls);
    const double allocated_bytes_ns = static_cast<double>(a.bytes) * static_cast<double>(a.end - a.start);
    auto& rm = ranks[a.rank];
    if (a.in_timeline) {
      alloc_deltas[a.rank].push_back({a.start, a.bytes});
      alloc_deltas[a.rank].push_back({a.end, -a.bytes});
      class_deltas[a.rank].push_back({a.start, c, a.bytes});
      class_deltas[a.rank].push_back({a.end, c, -a.bytes});
      rm.allocated_bytes_ns += allocated_bytes_ns;
      m.allocated_bytes_ns += allocated_bytes_ns;
    }
    if (!a.buffer) continue;
    if (a.buffer->layer >= 0) {
      layer_class_deltas[{a.buffer->layer, c, a.rank}].push_back({a.start, a.bytes});
      layer_class_deltas[{a.buffer->layer, c, a.rank}].push_back({a.end, -a.bytes});
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
        for (const auto& i : oi.of(o)) used.push_back(i);
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
    const double bubble = use.memory_bubble_bytes_ns();
    auto& t = tags[use.tag];
    t.tag = use.tag;
    t.memory_class = cls;
    ++t.buffers;
    t.max_bytes = std::max(t.max_bytes, use.bytes);
    t.allocated_bytes_ns += allocated_bytes_ns;
    t.memory_bubble_bytes_ns += bubble;
    rm.memory_bubble_bytes_ns += bubble;
    rm.buffer_bytes_ns += allocated_bytes_ns;
    m.memory_bubble_bytes_ns += bubble;
    m.buffer_bytes_ns += allocated_bytes_ns;
    if (use.layer >= 0) layer_bubbles[use.layer] += bubble;
    m.buffers.push_back(std::move(use));
  }

  for (auto& [rank, rm] : ranks) {
    rm.rank = rank;
    rm.allocated = steps(std::move(alloc_deltas[rank]));
    rm.idle = steps(std::move(idle_deltas[rank]));
    // Peak and its composition: sweep the class deltas in time order.
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
    if (rm.peak_bytes > m.peak_bytes || m.peak_rank < 0) {
      m.peak_bytes = rm.peak_bytes;
      m.peak_rank = rank;
    }
    m.ranks.push_back(std::move(rm));
  }
  for (auto& [tag, t] : tags) m.tags.push_back(std::move(t));
  std::sort(m.bubbles.begin(), m.bubbles.end(), [](const MemoryBubble& a, const MemoryBubble& b) {
    return std::tie(a.rank, a.start_ns, a.end_ns) < std::tie(b.rank, b.start_ns, b.end_ns);
  });

  // mpipemoe Eq. 1-6 per MoE layer, next to what the trace shows.
  const int elem_bytes = static_cast<int>(std::max<std::int64_t>(1, parse_int(trace.config_value("elem_bytes"), 2)));
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
  std::map<std::int32_t, std::int32_t> max_chunk;  // per layer, for the pipeline degree
  if (configured_pipeline_degree(trace) == 0)
    for (const auto& op : trace.ops)
      if (op.layer >= 0) {
        auto [it, fresh] = max_chunk.emplace(op.layer, op.chunk);
        if (!fresh) it->second = std::max(it->second, op.chunk);
      }
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
    if (const int n = configured_pipeline_degree(trace); n > 0) lm.partitions = n;
    else if (auto it = max_chunk.find(l.layer); it != max_chunk.end()) lm.partitions = std::max(1, it->second + 1);
    lm.elem_bytes = elem_bytes;
    const double E = static_cast<double>(lm.experts), M = static_cast<double>(lm.model_dim),
                 H = static_cast<double>(lm.hidden_dim), B = static_cast<double>(lm.tokens),
                 n = lm.partitions, eb = elem_bytes;
    // Eq. 1 counts the gate (E x M) and one expert (2 H M) per device, four
    // copies each (Adam); with E/P experts per device the expert term scales.
    const double ms = 4.0 * (E * M + lm.experts_per_rank * 2.0 * H * M);
    const double act = 4.0 * B * M + B * H;                                    // Eq. 2
    const double buf = B * M + B * H;                                          // Eq. 3
    const double pipe = act;                                                   // Eq. 4
    const double saving = n >= 2 ? B * (2.0 * M * (n - 2) / n + H * (n - 1) / n) : 0.0;  // Eq. 5
    lm.model_states_bytes = static_cast<std::int64_t>(ms * eb);
    lm.activations_bytes = static_cast<std::int64_t>(act * eb);
    lm.temporary_buffers_bytes = static_cast<std::int64_t>(buf * eb);
    lm.pipelined_buffers_bytes = static_cast<std::int64_t>(pipe * eb);
    lm.reuse_saving_bytes = static_cast<std::int64_t>(saving * eb);
    lm.saving_ratio = 2.0 * saving / (ms + 2.0 * pipe);                       // Eq. 6
    for (int c = 0; c < kNumMemoryClasses; ++c)
      for (const auto& rm : m.ranks) {
        auto it = layer_class_deltas.find({l.layer, c, rm.rank});
        if (it == layer_class_deltas.end()) continue;
        std::int64_t peak = 0;
        for (const auto& p : steps(it->second)) peak = std::max(peak, p.bytes);
        auto& slot = lm.measured_peak_bytes[static_cast<std::size_t>(c)];
        slot = std::max(slot, peak);
      }
    lm.memory_bubble_bytes_ns = layer_bubbles[l.layer];
    m.layers.push_back(lm);
  }
  return m;
}

}  // namespace moetrace::analyzer
