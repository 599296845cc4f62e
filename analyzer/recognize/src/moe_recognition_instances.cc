// MoE recognition, pass 1b: the layer and chunk instances of schedule parts.
//
// Schedules that overlap the chunks of several micro-batches (DualPipe-style
// pairs of a forward and a backward chunk, Megatron-Core's combined 1F1B)
// name the parts of an MoE block (dispatch(F), mlp(B), mlp(W), ...) but
// neither layer nor micro-batch. Each part belongs to exactly one layer
// instance (layer, micro-batch, phase):
// - Forward parts of one thread, in start order, make one instance each
//   pass through an MoE block: a new instance starts where the order of the
//   block goes back (gate, permute, dispatch, experts, unpermute, combine;
//   the backward runs it from combine to gate), or where a dispatch,
//   combine, gate or permute repeats. A layer holds one of each; experts may
//   repeat (shared and routed experts).
// - The functions that run the parts nest (Python function and module
//   ranges, recorded with with_stack=True): the highest range above a part
//   that holds at most one part of each kind and phase (and at least two)
//   is one layer's, so two parts under different such ranges are two
//   instances even where the order alone would join them. A part with no
//   such range (a backward chunk's first combine(B), issued before the
//   function of the first layer pair) joins its neighbours by order: a
//   leading part is never an instance of its own.
// - The chunk (micro-batch) of an instance: the range above its layer
//   range, or above its parts where they have none (the function running
//   a forward or backward chunk).
// - Weight-gradient parts (W) make instances by the same order; each
//   belongs to the backward instance it follows: the latest one where they
//   share a function range (the split backward's W right after its B, as in
//   the overlapped chunk pairs of the DeepSeek-V3 report, Figure 4), else
//   the oldest one no W instance has taken yet (W deferred to a function of
//   its own runs first in, first out: DualPipe's WeightGradStore.pop).
// Parts inside a recognised layer or micro-batch range keep those.
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "moe_recognition_internal.h"

namespace moetrace::analyzer::recognition_detail {
namespace {

// A part's position in one pass of an MoE block; -1: a kind with no place
// of its own (it joins the instance around it).
int block_position(OpKind kind, bool backward) {
  int forward = -1;
  switch (kind) {
    case OpKind::kGate: forward = 0; break;
    case OpKind::kPermute: forward = 1; break;
    case OpKind::kDispatchAllToAll: forward = 2; break;
    case OpKind::kExpertFfn: forward = 3; break;
    case OpKind::kUnpermute: forward = 4; break;
    case OpKind::kCombineAllToAll: forward = 5; break;
    default: return -1;
  }
  return backward ? 5 - forward : forward;
}

enum class PartPhase : std::uint8_t { kForward, kBackward, kWeight };

PartPhase part_phase(const std::optional<Phase>& p) {
  if (!p || *p == Phase::kForward || *p == Phase::kOther) return PartPhase::kForward;
  return *p == Phase::kWeightGradient ? PartPhase::kWeight : PartPhase::kBackward;
}

}  // namespace

void Recognizer::infer_containers() {
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> parts_by_thread;
  for (const auto& c : contexts_)
    if (c.a.role == RangeRole::kOp && c.a.kind && op_kind_info(*c.a.kind).moe_layer && !c.process && c.a.layer < 0)
      parts_by_thread[{c.rank, c.thread}].push_back(c.index);
  if (parts_by_thread.empty()) return;
  // Parents of the host ranges on those threads: sorted by (start, longer
  // first), a stack of the open ranges; a range's parent is the innermost
  // open range that contains it.
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> ranges_by_thread;
  for (std::size_t i = 0; i < t_.nvtx.size(); ++i) {
    const auto& r = t_.nvtx[i];
    const auto key = std::pair{r.rank.value, r.thread_id};
    if (parts_by_thread.count(key)) ranges_by_thread[key].push_back(i);
  }
  std::vector<std::size_t> parent(t_.nvtx.size(), SIZE_MAX);  // per range: the range enclosing it
  auto end = [&](std::size_t i) { return end_of(t_.nvtx[i]); };
  for (auto& [key, list] : ranges_by_thread) {
    std::sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) {
      const auto& a = t_.nvtx[x];
      const auto& b = t_.nvtx[y];
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : end(x) != end(y) ? end(x) > end(y) : x < y;
    });
    std::vector<std::size_t> open;
    for (auto i : list) {
      while (!open.empty() && end(open.back()) <= t_.nvtx[i].start_ns) open.pop_back();
      if (!open.empty() && end(open.back()) >= end(i)) parent[i] = open.back();
      open.push_back(i);
    }
  }
  // Parts under every range: how many, and whether two share a kind and phase.
  std::vector<int> parts_in(t_.nvtx.size(), 0);
  std::vector<char> repeated(t_.nvtx.size(), 0);
  std::unordered_map<std::uint64_t, int> of_key;  // (range, kind, phase) -> parts
  for (const auto& [thread, parts] : parts_by_thread)
    for (auto ci : parts) {
      const auto& c = contexts_[ci];
      const std::uint64_t key = static_cast<std::uint64_t>(*c.a.kind) * 8 + (c.a.phase ? static_cast<std::uint64_t>(*c.a.phase) + 1 : 0);
      for (auto up = parent[c.range]; up != SIZE_MAX; up = parent[up]) {
        ++parts_in[up];
        if (++of_key[static_cast<std::uint64_t>(up) * 1024 + key] > 1) repeated[up] = 1;
      }
    }
  std::vector<char> recognised(t_.nvtx.size(), 0);  // ranges that are contexts already
  std::vector<char> structural(t_.nvtx.size(), 0);  // ... of a layer or micro-batch
  std::vector<char> iteration(t_.nvtx.size(), 0);   // ... of an iteration
  for (const auto& c : contexts_) {
    recognised[c.range] = 1;
    if (c.a.role == RangeRole::kLayer || c.a.role == RangeRole::kMicroBatch) structural[c.range] = 1;
    if (c.a.role == RangeRole::kIteration) iteration[c.range] = 1;
  }

  // Per part: its layer range (SIZE_MAX: none) and chunk range, by nesting.
  struct Part {
    std::size_t context, layer_range, chunk_range;
    PartPhase phase;
    std::pair<std::int64_t, std::int64_t> iteration;  // (iteration range, steps ended before): a new one starts an instance
  };
  // The iteration a part runs in: the latest-starting iteration range of its
  // rank open at its start, and how many iteration-ending ranges (optimizer
  // steps, periodicity) ended before it.
  std::map<std::int32_t, std::vector<std::size_t>> iterations_of_rank;
  for (const auto& c : contexts_)
    if (c.a.role == RangeRole::kIteration) iterations_of_rank[c.rank].push_back(c.index);
  for (auto& [r, v] : iterations_of_rank)
    std::sort(v.begin(), v.end(), [&](std::size_t x, std::size_t y) { return contexts_[x].start < contexts_[y].start; });
  auto iteration_of = [&](const Context& c) {
    std::int64_t range = -1, steps = 0;
    if (const auto it = iterations_of_rank.find(c.rank); it != iterations_of_rank.end())
      for (auto i : it->second) {
        if (contexts_[i].start > c.start) break;
        if (contexts_[i].end >= c.start) range = static_cast<std::int64_t>(i);
      }
    if (const auto it = step_ends_.find(c.rank); it != step_ends_.end())
      steps = std::count_if(it->second.begin(), it->second.end(), [&](std::int64_t e) { return e <= c.start; });
    return std::pair{range, steps};
  };
  // Threads whose parts say nothing of a block's order (one kind, no phase
  // marker: an engine's fused-experts op) are left to the kernels' order.
  std::set<std::pair<std::int32_t, std::int64_t>> ordered;
  for (const auto& [thread, parts] : parts_by_thread) {
    std::set<OpKind> kinds;
    bool phases = false;
    for (auto ci : parts) {
      kinds.insert(*contexts_[ci].a.kind);
      phases = phases || contexts_[ci].a.phase.has_value();
    }
    if (kinds.size() > 1 || phases) ordered.insert(thread);
  }
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<Part>> free_parts;  // (rank, thread) -> parts
  for (const auto& [thread, parts] : parts_by_thread)
    for (auto ci : parts) {
      if (!ordered.count(thread)) break;
      const auto& c = contexts_[ci];
      // A part inside a recognised layer or micro-batch range keeps those:
      // no implicit instance (above a module's range lies the training
      // step, whose other work is not the layer's).
      bool placed = false;
      for (auto up = parent[c.range]; up != SIZE_MAX && !placed; up = parent[up]) placed = structural[up] != 0;
      if (placed) continue;
      // The highest enclosing range with one part of each kind and phase,
      // below the iteration's range.
      std::size_t top = SIZE_MAX;
      for (auto up = parent[c.range]; up != SIZE_MAX && repeated[up] == 0 && !iteration[up]; up = parent[up]) top = up;
      const bool layer_range = top != SIZE_MAX && parts_in[top] >= 2 && !recognised[top];
      auto chunk = layer_range ? parent[top] : top != SIZE_MAX ? parent[top] : parent[c.range];
      if (chunk != SIZE_MAX && recognised[chunk]) chunk = SIZE_MAX;
      free_parts[thread].push_back({ci, layer_range ? top : SIZE_MAX, chunk, part_phase(c.a.phase), iteration_of(c)});
    }

  // Instances of each thread's parts, per phase, by block order and layer
  // ranges. An instance's chunk: the first chunk range of its parts.
  std::int64_t next_instance = kScheduleInstanceBase;
  std::map<std::int64_t, std::size_t> chunk_of;  // instance -> chunk range
  std::map<std::size_t, std::int64_t> instance_of;  // context -> instance
  // Per thread, the W instances in order: (first part, instance).
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::pair<const Part*, std::int64_t>>> weight_instances;
  for (auto& [thread, parts] : free_parts) {
    std::sort(parts.begin(), parts.end(),
              [&](const Part& x, const Part& y) { return contexts_[x.context].start < contexts_[y.context].start; });
    for (const auto phase : {PartPhase::kForward, PartPhase::kBackward, PartPhase::kWeight}) {
      const bool backward = phase != PartPhase::kForward;
      std::int64_t current = -1;
      int last_position = -1;
      std::size_t last_layer_range = SIZE_MAX;
      std::set<OpKind> kinds;
      std::pair<std::int64_t, std::int64_t> last_iteration{-2, -2};
      for (const auto& part : parts) {
        if (part.phase != phase) continue;
        const auto kind = *contexts_[part.context].a.kind;
        const int position = block_position(kind, backward);
        const bool goes_back = position >= 0 && position < last_position;
        const bool repeats = kinds.count(kind) && (kind != OpKind::kExpertFfn || phase == PartPhase::kWeight);
        const bool other_range = part.layer_range != SIZE_MAX && last_layer_range != SIZE_MAX &&
                                 part.layer_range != last_layer_range;
        if (current < 0 || goes_back || repeats || other_range || part.iteration != last_iteration) {
          last_iteration = part.iteration;
          current = next_instance++;
          last_position = -1;
          last_layer_range = SIZE_MAX;
          kinds.clear();
          if (phase == PartPhase::kWeight) weight_instances[thread].push_back({&part, current});
        }
        if (position >= 0) last_position = position;
        if (part.layer_range != SIZE_MAX) last_layer_range = part.layer_range;
        kinds.insert(kind);
        if (part.chunk_range != SIZE_MAX) chunk_of.try_emplace(current, part.chunk_range);
        instance_of[part.context] = current;
      }
    }
  }

  // Each W instance belongs to a backward instance of its thread (else of
  // its rank): the one it follows where they share a function range (the
  // split backward's W right after its B, in one layer pair's or chunk's
  // function), else the oldest backward instance not yet followed by W
  // (W deferred to a function of its own runs first in, first out:
  // DualPipe's WeightGradStore.pop, zero-bubble's W passes).
  struct Backward {
    std::int64_t start, instance;
    const Part* part;
  };
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<Backward>> backward_by_thread;
  std::map<std::int32_t, std::vector<Backward>> backward_by_rank;
  for (const auto& [thread, parts] : free_parts)
    for (const auto& part : parts)
      if (part.phase == PartPhase::kBackward) {
        const Backward b{contexts_[part.context].start, instance_of[part.context], &part};
        backward_by_thread[thread].push_back(b);
        backward_by_rank[thread.first].push_back(b);
      }
  for (auto& [r, v] : backward_by_rank)
    std::sort(v.begin(), v.end(), [](const Backward& x, const Backward& y) { return x.start < y.start; });
  std::set<std::int64_t> followed;  // backward instances a W instance took
  std::map<std::int64_t, std::int64_t> weight_of;  // W instance -> backward instance
  for (const auto& [thread, list] : weight_instances)
    for (const auto& [first, w] : list) {
      const auto t = contexts_[first->context].start;
      const std::vector<Backward>* candidates = nullptr;
      if (const auto it = backward_by_thread.find(thread); it != backward_by_thread.end()) candidates = &it->second;
      if (!candidates || candidates->front().start >= t)
        if (const auto it = backward_by_rank.find(thread.first); it != backward_by_rank.end()) candidates = &it->second;
      if (!candidates) continue;
      const auto before = std::lower_bound(candidates->begin(), candidates->end(), t,
                                           [](const Backward& b, std::int64_t x) { return b.start < x; });
      if (before == candidates->begin()) continue;
      const auto& latest = *std::prev(before);
      const bool shared = (first->layer_range != SIZE_MAX && first->layer_range == latest.part->layer_range) ||
                          (first->chunk_range != SIZE_MAX && first->chunk_range == latest.part->chunk_range);
      std::int64_t b = latest.instance;
      if (!shared)
        for (auto it = candidates->begin(); it != before; ++it)
          if (!followed.count(it->instance)) {
            b = it->instance;
            break;
          }
      followed.insert(b);
      weight_of[w] = b;
    }

  // The chunk ranges join the contexts as micro-batch ranges without numbers.
  std::map<std::size_t, std::size_t> chunk_context;  // range -> context index
  std::set<std::int64_t> used;  // instances the parts end in (a W instance taken by a backward one is not)
  for (const auto& [ci, own] : instance_of) used.insert(weight_of.count(own) ? weight_of[own] : own);
  for (const auto& [inst, range] : chunk_of)
    if (used.count(inst) && !chunk_context.count(range)) {
      Context c = context_of(range);
      c.a.role = RangeRole::kMicroBatch;
      chunk_context[range] = c.index;
      add_context(c);
    }
  auto chunk_context_of = [&](std::int64_t inst) -> std::int64_t {
    const auto it = chunk_of.find(inst);
    return it == chunk_of.end() ? -1 : static_cast<std::int64_t>(chunk_context[it->second]);
  };
  for (const auto& [ci, own] : instance_of) {
    auto& c = contexts_[ci];
    const auto w = weight_of.find(own);
    c.instance = w == weight_of.end() ? own : w->second;
    c.instance_chunk = chunk_context_of(c.instance);
    c.follows_backward = w != weight_of.end();
    ++s_.layers_by_nesting;
  }
}

}  // namespace moetrace::analyzer::recognition_detail
