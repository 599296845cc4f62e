// MoE recognition, pass 2: each GPU activity placed by the contexts open at
// its launch, and its kind decided.
#include "moe_recognition_internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace moetrace::analyzer::recognition_detail {

// The contexts open at each query's time on its thread (and the rank's
// process-wide ones), merged innermost first; `on` receives each.
template <class On>
void Recognizer::sweep(std::vector<Query>& queries, On&& on) {
  std::sort(queries.begin(), queries.end(), [](const Query& a, const Query& b) {
    return std::tie(a.rank, a.thread, a.t) < std::tie(b.rank, b.thread, b.t);
  });
  static const std::vector<std::size_t> kNone;
  for (std::size_t q = 0; q < queries.size();) {
    const auto rank = queries[q].rank;
    const auto thread = queries[q].thread;
    const auto it = queries[q].has_call ? by_thread_.find({rank, thread}) : by_thread_.end();
    const auto& list = it == by_thread_.end() ? kNone : it->second;
    const auto pit = by_rank_.find(rank);
    const auto& plist = pit == by_rank_.end() ? kNone : pit->second;
    // The latest end among the first k process-wide contexts: the walk back
    // from the last one started stops where no earlier one reaches tq.
    std::vector<std::int64_t> reach(plist.size());
    for (std::size_t k = 0; k < plist.size(); ++k)
      reach[k] = std::max(k ? reach[k - 1] : INT64_MIN, contexts_[plist[k]].end);
    std::size_t next = 0;
    std::vector<std::size_t> open;  // contexts open on this thread, in start order
    for (; q < queries.size() && queries[q].rank == rank && queries[q].thread == thread; ++q) {
      const auto tq = queries[q].t;
      while (next < list.size() && contexts_[list[next]].start <= tq) open.push_back(list[next++]);
      std::erase_if(open, [&](std::size_t c) { return contexts_[c].end < tq; });
      Placement p;
      for (auto c = open.rbegin(); c != open.rend(); ++c) merge(contexts_[*c], p, context_names_[*c]);
      // Process-wide contexts (iterations), innermost (latest start) first.
      auto k = static_cast<std::size_t>(
          std::upper_bound(plist.begin(), plist.end(), tq,
                           [&](std::int64_t t, std::size_t c) { return t < contexts_[c].start; }) -
          plist.begin());
      while (k > 0 && reach[k - 1] >= tq) {
        const auto c = plist[--k];
        if (contexts_[c].end >= tq) merge(contexts_[c], p, context_names_[c]);
      }
      on(queries[q], p);
    }
  }
}

// 2a. Backward nodes of PyTorch's autograd run on a thread of their own,
// outside the module ranges of the forward; the forward op with the same
// sequence number ran inside them. Its placement, by (rank, sequence).
void Recognizer::forward_placements() {
  bool backward_nodes = false;
  for (const auto& c : contexts_) backward_nodes = backward_nodes || c.backward_seq >= 0;
  if (!backward_nodes) return;
  std::vector<Query> queries;
  for (std::size_t i = 0; i < t_.nvtx.size(); ++i) {
    const auto& r = t_.nvtx[i];
    if (r.autograd_seq >= 0 && !r.autograd_backward)
      queries.push_back({r.rank.value, r.thread_id, r.start_ns, i, true});
  }
  sweep(queries, [&](const Query& q, const Placement& p) {
    if (!p.kind && !p.in_layer) return;
    // The first forward op of a sequence (nested ops share it; the sweep
    // goes by start) speaks for it.
    const auto& r = t_.nvtx[q.activity];
    forward_.try_emplace({r.rank.value, r.autograd_seq}, p);
  });
}

void Recognizer::place_activities() {
  placed_.assign(t_.activities.size(), Placement{});
  launch_t_.assign(t_.activities.size(), 0);
  kind_.assign(t_.activities.size(), std::nullopt);
  fallback_.assign(t_.activities.size(), std::nullopt);
  pending_direction_.assign(t_.activities.size(), false);
  loose_a2a_.assign(t_.activities.size(), false);
  forward_placements();
  std::vector<Query> queries;
  queries.reserve(t_.activities.size());
  for (std::size_t i = 0; i < t_.activities.size(); ++i) {
    const auto& a = t_.activities[i];
    const ApiCall* call = t_.launching_call(a);
    launch_t_[i] = call ? call->start_ns : a.start_ns;
    queries.push_back({a.rank.value, call ? call->thread_id : INT64_MIN, launch_t_[i], i, call != nullptr});
  }
  sweep(queries, [&](const Query& q, Placement& p) {
    // A backward node outside every MoE range: the forward op of the same
    // sequence number says which module (layer, gate, experts) it is.
    if (p.backward_seq >= 0 && !p.kind && !p.in_layer)
      if (const auto f = forward_.find({t_.activities[q.activity].rank.value, p.backward_seq}); f != forward_.end()) {
        p.kind = f->second.kind;
        p.kind_nvtx = f->second.kind_nvtx;
        p.kind_name = f->second.kind_name;
        p.in_layer = f->second.in_layer;
        p.layer_instance = f->second.layer_instance;
        if (p.layer < 0) p.layer = f->second.layer;
        ++s_.backward_by_sequence;
      }
    decide_kind(q.activity, p);
    placed_[q.activity] = p;
  });
}

const KernelRule* Recognizer::kernel_rule(const Activity& a) {
  if (a.type != ActivityType::kKernel || !a.name.valid()) return nullptr;
  auto [it, fresh] = kernel_rule_cache_.try_emplace(a.name.value, nullptr);
  if (fresh) {
    const auto name = t_.str(a.name);
    it->second = match_kernel_rule(rules_.kernels, name);
    if (!it->second)
      if (const int i = match_kernel_rule(name); i >= 0) it->second = &kernel_rules()[static_cast<std::size_t>(i)];
  }
  return it->second;
}

void Recognizer::decide_kind(std::size_t i, Placement& p) {
  const auto& a = t_.activities[i];
  const KernelRule* rule = kernel_rule(a);
  const bool copy = a.type != ActivityType::kKernel;
  const Category cat = copy ? Category::kMemcpy : rule ? rule->category : Category::kOtherCompute;
  // NCCL runs all-to-all and a pipeline stage's send/recv in the same
  // kernel (SendRecv); the collective the trace records tells them apart.
  if (cat == Category::kAllToAll)
    if (const auto* c = collective(a, launch_t_[i]); c && is_point_to_point(c->name)) {
      ++s_.rules_used["collective: point-to-point send/recv (pipeline stages), not all-to-all"];
      kind_[i] = OpKind::kOtherComm;
      return;
    }
  const bool in_moe = p.in_layer || (p.kind && op_kind_info(*p.kind).moe_layer);
  std::optional<OpKind> kind;
  if (copy) {
    if (p.kind && (*p.kind == OpKind::kOffload || *p.kind == OpKind::kPrefetch)) kind = p.kind;
    else kind = in_moe ? OpKind::kMoeMemcpy : OpKind::kMemcpy;
  } else if (rule && rule->kind) {
    kind = rule->kind;
    ++s_.kernels_by_name;
    s_.moe = true;
    ++s_.rules_used["kernel: " + rule->display_name()];
  } else if (is_communication(cat) && p.kind && is_communication(op_category(*p.kind))) {
    kind = p.kind;
  } else if (cat == Category::kAllToAll && in_moe) {
    kind = OpKind::kDispatchAllToAll;
    pending_direction_[i] = true;
  } else if (cat == Category::kAllReduce && in_moe) {
    kind = OpKind::kMoeAllReduce;
  } else if (is_communication(cat)) {
    kind = generic(cat);
    loose_a2a_[i] = cat == Category::kAllToAll;
  } else if (p.kind) {
    // Communication is decided by what ran, the rest by where it ran: the
    // compute inside a dispatch is its token permutation.
    switch (*p.kind) {
      case OpKind::kDispatchAllToAll:
      case OpKind::kRecommunicate: kind = OpKind::kPermute; break;
      case OpKind::kCombineAllToAll: kind = OpKind::kUnpermute; break;
      default: kind = is_moe_comm(*p.kind) ? OpKind::kMoeOther
                      : is_communication(op_category(*p.kind)) ? OpKind::kOtherOp
                                                               : *p.kind;
    }
  } else if (in_moe) {
    kind = cat == Category::kGating ? OpKind::kGate
           : cat == Category::kExpertCompute ? OpKind::kExpertFfn
                                             : OpKind::kMoeOther;
  } else if (p.any) {
    kind = generic(cat);
  } else {
    fallback_[i] = generic(cat);  // taken when the whole trace is one iteration of an MoE job
  }
  kind_[i] = kind;
}

// 2b. Where no range marks iterations but ranges end them (an optimizer's
// step: a training loop profiled without ProfilerStep), an activity
// launched after the k-th step of its rank ended is in iteration k (the
// step's own work closes the iteration it ends).
void Recognizer::step_iterations() {
  if (s_.iterations_marked || step_ends_.empty()) return;
  for (auto& [rank, ends] : step_ends_) std::sort(ends.begin(), ends.end());
  for (std::size_t i = 0; i < placed_.size(); ++i) {
    const auto it = step_ends_.find(t_.activities[i].rank.value);
    if (it == step_ends_.end()) {  // a rank without steps: one iteration, as without any
      placed_[i].iteration = std::max(placed_[i].iteration, 0);
      continue;
    }
    const auto& ends = it->second;
    placed_[i].iteration =
        static_cast<std::int32_t>(std::upper_bound(ends.begin(), ends.end(), launch_t_[i]) - ends.begin());
    // Every activity is in some iteration, as under ProfilerStep ranges:
    // work outside the recognised ranges keeps its generic kind.
    if (!kind_[i]) kind_[i] = fallback_[i];
  }
  s_.iterations_marked = true;
  s_.iterations_from_steps = true;
}

}  // namespace moetrace::analyzer::recognition_detail
