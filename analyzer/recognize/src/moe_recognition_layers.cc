// MoE recognition, pass 3: what the ranges did not say, inferred by order
// (point-to-point against all-to-all, layers, all-to-all directions).
#include "moe_recognition_internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace moetrace::analyzer::recognition_detail {

// 2b. A pipeline stage's send/recv told from an all-to-all where no
// collective name did it (NCCL runs both in its SendRecv kernel, and
// batch_isend_irecv records only "coalesced"). For the all-to-all-class
// kernels outside every MoE range:
//  - the process group the trace recorded: a pipeline group, or a group
//    of two ranks (one peer), is point-to-point;
//  - else the communicator it ran on: another NCCL stream than the
//    rank's known all-to-alls (inside MoE ranges, or named) used.
// Pairing by time across ranks says nothing here: the stage pairs of a
// pipeline send at the same moment, so a send overlaps as many ranks' kernels
// as an all-to-all does.
void Recognizer::separate_point_to_point() {
  std::vector<std::size_t> loose;
  for (std::size_t i = 0; i < loose_a2a_.size(); ++i)
    if (loose_a2a_[i]) loose.push_back(i);
  if (loose.empty()) return;
  auto point_to_point = [&](std::size_t i, const char* rule) {
    kind_[i] = OpKind::kOtherComm;
    loose_a2a_[i] = false;
    ++s_.rules_used[rule];
  };
  std::vector<std::size_t> unnamed, named_a2a;
  for (const auto i : loose) {
    const auto* c = collective(t_.activities[i], launch_t_[i]);
    if (c && is_all_to_all_name(c->name)) {
      named_a2a.push_back(i);
      continue;
    }
    if (c && is_pipeline_group(c->process_group))
      point_to_point(i, "collective group: pipeline process group, send/recv not all-to-all");
    else if (c && c->recorded_ranks() == 2)
      point_to_point(i, "collective group: two ranks (one peer), send/recv not all-to-all");
    else
      unnamed.push_back(i);
  }
  if (unnamed.empty()) return;
  // The communicator: PyTorch gives every process group (and every
  // send/recv pair) its own NCCL stream, so a kernel on a stream that none
  // of the rank's known all-to-alls used ran on another group's
  // communicator than the expert-parallel one.
  std::set<std::pair<std::int32_t, std::int32_t>> a2a_streams;  // (rank, stream index)
  auto known = [&](std::size_t i) {
    const auto& a = t_.activities[i];
    a2a_streams.emplace(a.rank.value, a.stream);
  };
  for (const auto i : named_a2a) known(i);
  for (std::size_t i = 0; i < t_.activities.size(); ++i)
    if (!loose_a2a_[i] && kind_[i] && (*kind_[i] == OpKind::kDispatchAllToAll || *kind_[i] == OpKind::kCombineAllToAll))
      if (const auto* rule = kernel_rule(t_.activities[i]); rule && rule->category == Category::kAllToAll) known(i);
  for (const auto i : unnamed) {
    const auto& a = t_.activities[i];
    const auto first = a2a_streams.lower_bound({a.rank.value, INT32_MIN});
    if (first == a2a_streams.end() || first->first != a.rank.value) continue;  // no all-to-all known on the rank
    if (!a2a_streams.count({a.rank.value, a.stream}))
      point_to_point(i, "communicator: another NCCL stream than the MoE all-to-alls' (send/recv, not an MoE all-to-all)");
  }
}

// 3. Layers and all-to-all directions inferred by order.
void Recognizer::infer_layers_and_directions() {
  // Dispatch-direction kernels in the backward are the backward of the
  // combine (its gradient flows from tokens to experts), and vice versa.
  for (std::size_t i = 0; i < placed_.size(); ++i) {
    auto& k = kind_[i];
    const auto& p = placed_[i];
    if (!k || pending_direction_[i] || !p.phase || !is_backward(*p.phase)) continue;
    const auto* rule = kernel_rule(t_.activities[i]);
    if (!rule || !rule->kind) continue;
    if (*k == OpKind::kDispatchAllToAll) k = OpKind::kCombineAllToAll;
    else if (*k == OpKind::kCombineAllToAll) k = OpKind::kDispatchAllToAll;
  }
  if (s_.moe) {
    for (std::size_t i = 0; i < placed_.size(); ++i) {
      // The whole trace is one iteration where no range marks them.
      if (!s_.iterations_marked) {
        placed_[i].iteration = std::max(placed_[i].iteration, 0);
        if (!kind_[i]) kind_[i] = fallback_[i];
      }
      // In an MoE job, an all-to-all outside the ranges is an MoE layer's
      // dispatch or combine.
      if (kind_[i] && loose_a2a_[i]) {
        kind_[i] = OpKind::kDispatchAllToAll;
        pending_direction_[i] = true;
        ++s_.a2a_assumed_moe;
      }
    }
  }
  // Group MoE activities by (rank, iteration, chunk, phase) in launch order:
  // layers are counted within each chunk (a micro-batch range, or the
  // implicit chunk of overlapped schedules) and phase, so that chunks of
  // several micro-batches that interleave do not run into one count.
  using GroupKey = std::tuple<std::int32_t, std::int32_t, std::int64_t, int>;  // rank, iteration, chunk, phase
  std::map<GroupKey, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < placed_.size(); ++i) {
    if (!kind_[i] || !op_kind_info(*kind_[i]).moe_layer) continue;
    const auto& p = placed_[i];
    if (p.follows_backward) continue;  // a W part: numbered with the backward instance it follows, below
    groups[{t_.activities[i].rank.value, p.iteration, p.chunk_instance,
            static_cast<int>(p.phase.value_or(Phase::kForward))}]
        .push_back(i);
  }
  std::map<std::pair<std::int32_t, std::int32_t>, std::int32_t> forward_layers;  // (rank, iteration), no chunks
  std::map<GroupKey, std::int32_t> instances;
  std::set<std::int32_t> layer_counts, chunk_layer_counts;
  std::int32_t per_chunk = 0;  // layers of a chunk: the most forward instances of any chunk
  for (auto& [key, list] : groups) {
    std::stable_sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) { return launch_t_[x] < launch_t_[y]; });
    const auto& [rank, iteration, chunk, phase] = key;
    const bool backward = is_backward(static_cast<Phase>(phase));
    const auto n = instances[key] = number_instances(list, backward);
    if (backward) continue;
    if (chunk == -1) {
      forward_layers[{rank, iteration}] = n;
      if (iteration >= 0) layer_counts.insert(n);
    } else {
      per_chunk = std::max(per_chunk, n);
      chunk_layer_counts.insert(n);
    }
  }
  // Chunks without a micro-batch number are numbered in order of their
  // first launch within (rank, iteration, phase).
  std::map<std::tuple<std::int32_t, std::int32_t, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> chunk_order;
  for (const auto& [key, list] : groups) {
    const auto& [rank, iteration, chunk, phase] = key;
    if (chunk != -1 && !list.empty() && placed_[list.front()].micro_batch < 0)
      chunk_order[{rank, iteration, phase}].push_back({launch_t_[list.front()], chunk});
  }
  std::map<std::pair<std::tuple<std::int32_t, std::int32_t, int>, std::int64_t>, std::int32_t> chunk_ordinal;
  for (auto& [k, v] : chunk_order) {
    std::sort(v.begin(), v.end());
    for (std::size_t j = 0; j < v.size(); ++j) chunk_ordinal[{k, v[j].second}] = static_cast<std::int32_t>(j);
  }
  for (auto& [key, list] : groups) {
    const auto& [rank, iteration, chunk, phase] = key;
    const bool backward = is_backward(static_cast<Phase>(phase));
    // Layers to count down from in the backward: the chunk's own count, the
    // iteration's forward count, or (forward chunks, backward without) a
    // forward chunk's; a backward that runs several such passes in a row
    // (micro-batches) counts down in each.
    std::int32_t n = -1;
    if (chunk != -1) {
      n = instances[key];
    } else if (const auto f = forward_layers.find({rank, iteration}); f != forward_layers.end()) {
      n = f->second;
    } else if (per_chunk > 0) {
      n = per_chunk;
    }
    for (auto i : list) {
      auto& p = placed_[i];
      if (chunk != -1 && p.micro_batch < 0)
        if (auto o = chunk_ordinal.find({{rank, iteration, phase}, chunk}); o != chunk_ordinal.end())
          p.micro_batch = o->second;
      if (p.layer >= 0 || instance_[i] < 0) continue;
      std::int32_t layer = instance_[i];
      if (backward && n > 0) {
        layer = n - 1 - instance_[i] % n;
        if (instances[key] > n && p.micro_batch < 0) p.micro_batch = instance_[i] / n;
      }
      // Model chunks of one rank (interleaved and V schedules) hold
      // different layers: chunk c's k-th layer comes after c whole chunks.
      if (chunk != -1 && p.chunk > 0 && per_chunk > 0) layer += p.chunk * per_chunk;
      p.layer = layer;
      ++s_.layers_by_order;
    }
  }
  // W parts take the layer and micro-batch of the backward instance they follow.
  std::map<std::int64_t, std::pair<std::int32_t, std::int32_t>> numbered;  // schedule instance -> (layer, micro-batch)
  for (std::size_t i = 0; i < placed_.size(); ++i) {
    const auto& p = placed_[i];
    if (!p.follows_backward && p.layer_instance >= kScheduleInstanceBase && p.layer >= 0)
      numbered.try_emplace(p.layer_instance, p.layer, p.micro_batch);
  }
  for (std::size_t i = 0; i < placed_.size(); ++i) {
    auto& p = placed_[i];
    if (!p.follows_backward || !kind_[i] || !op_kind_info(*kind_[i]).moe_layer) continue;
    if (const auto it = numbered.find(p.layer_instance); it != numbered.end()) {
      if (p.layer < 0) p.layer = it->second.first;
      if (p.micro_batch < 0) p.micro_batch = it->second.second;
      ++s_.layers_by_order;
    }
  }
  if (layer_counts.size() > 1)
    s_.ambiguities.push_back(fmt::format(
        "layers by order: the number of MoE layer instances per iteration and rank differs ({} to {}), so "
        "the k-th instance is not the same layer everywhere",
        *layer_counts.begin(), *layer_counts.rbegin()));
  if (chunk_layer_counts.size() > 1)
    s_.ambiguities.push_back(fmt::format(
        "layers by order: the number of MoE layer instances per forward chunk differs ({} to {}), so the "
        "k-th instance is not the same layer in every chunk",
        *chunk_layer_counts.begin(), *chunk_layer_counts.rbegin()));
}

// Numbers the MoE layer instances of one (rank, iteration, phase) group
// and resolves pending all-to-all directions; returns the instance count.
std::int32_t Recognizer::number_instances(const std::vector<std::size_t>& list, bool backward) {
  instance_.resize(placed_.size(), -1);
  // Instances from layer contexts (numbered or not), in order of appearance.
  std::map<std::int64_t, std::int32_t> from_context;
  std::int32_t next = 0;
  // Without layer contexts: a new instance starts at a gate, a permute or
  // an opening all-to-all that follows a closing one.
  const OpKind opening = backward ? OpKind::kCombineAllToAll : OpKind::kDispatchAllToAll;
  const OpKind closing = backward ? OpKind::kDispatchAllToAll : OpKind::kCombineAllToAll;
  std::int32_t current = -1;
  bool closed = false, seen_non_gate = false;
  // Pending directions per instance, resolved after: first half opening.
  std::map<std::int32_t, std::vector<std::size_t>> pending;
  // Instances of schedule parts (pass 1b) and the work launched outside
  // them share one count: the gate kernel an instance's first part follows
  // (open, of no part yet) is that instance's, and work after a part joins
  // it until something starts a new instance.
  std::set<std::int32_t> of_parts;  // instances bound to schedule parts
  for (auto i : list) {
    const auto& p = placed_[i];
    auto& k = *kind_[i];
    const bool part = p.layer_instance >= kScheduleInstanceBase;
    if (p.layer_instance >= 0 && !part) {
      auto [it, fresh] = from_context.try_emplace(p.layer_instance, next);
      if (fresh) ++next;
      instance_[i] = it->second;
      if (pending_direction_[i]) pending[instance_[i]].push_back(i);
      continue;
    }
    if (part) {
      auto it = from_context.find(p.layer_instance);
      if (it == from_context.end()) {
        const bool open = current >= 0 && !closed && !of_parts.count(current);
        it = from_context.emplace(p.layer_instance, open ? current : next++).first;
        of_parts.insert(it->second);
      }
      if (it->second != current) {
        current = it->second;
        closed = false;
        seen_non_gate = false;
      }
    } else {
      if (p.layer >= 0) continue;  // named by a range: nothing to infer
      const bool starts = current < 0 ||
                          (closed && (k == OpKind::kGate || k == OpKind::kPermute || k == opening ||
                                      pending_direction_[i])) ||
                          (k == OpKind::kGate && seen_non_gate && !backward);
      if (starts) {
        current = next++;
        closed = false;
        seen_non_gate = false;
      }
    }
    if (k != OpKind::kGate) seen_non_gate = true;
    instance_[i] = current;
    if (pending_direction_[i]) {
      // Alternate within the instance: opening, then closing.
      auto& pend = pending[current];
      pend.push_back(i);
      if (pend.size() % 2 == 0) closed = true;
    } else if (k == closing) {
      closed = true;
    }
  }
  for (auto& [inst, ids] : pending) {
    if (ids.size() % 2 != 0 && ambiguous_directions_++ == 0)
      s_.ambiguities.push_back(
          "all-to-all direction by order: a layer instance has an odd number of all-to-all kernels, so "
          "which are its dispatch and which its combine is a guess");
    const std::size_t half = (ids.size() + 1) / 2;
    for (std::size_t j = 0; j < ids.size(); ++j) {
      *kind_[ids[j]] = j < half ? opening : closing;
      ++s_.directions_by_order;
    }
  }
  return next;
}

}  // namespace moetrace::analyzer::recognition_detail
