// MoE recognition, pass 4: op ranges materialised, collectives looked up,
// load from all-to-all split sizes.
#include "moe_recognition_internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "moetrace/analyzer/dtype.h"
#include "moetrace/analyzer/gemm_shape.h"

namespace moetrace::analyzer::recognition_detail {

// 4. One op range per placed activity.
void Recognizer::materialise() {
  std::int64_t id = 1;
  std::map<std::string, StringId> interned;
  auto intern = [&](std::string text) {
    auto [it, fresh] = interned.try_emplace(text, StringId(static_cast<std::int64_t>(t_.strings.size())));
    if (fresh) t_.strings.push_back(std::move(text));
    return it->second;
  };
  // A GEMM kernel's FLOPs from the shapes its framework op recorded
  // (record_shapes=True): 2 x rows x in x out, given to the first kernel
  // the op launched (a split-K reduction after it computes none of them).
  const LaunchShapes shapes(t_);
  std::set<std::size_t> counted;
  t_.ops.reserve(t_.ops.size() + static_cast<std::size_t>(std::count_if(
                                     kind_.begin(), kind_.end(), [](const auto& k) { return k.has_value(); })));
  for (std::size_t i = 0; i < t_.activities.size(); ++i) {
    if (!kind_[i]) continue;
    auto& a = t_.activities[i];
    const auto& p = placed_[i];
    OpRange op;
    if (a.type == ActivityType::kKernel && !shapes.empty())
      if (const auto range = shapes.range_of(a); range && counted.insert(*range).second)
        if (const auto g = shapes.gemm_of(*range)) op.flops = g->flops();
    op.id = OpId(id++);
    op.start_ns = a.start_ns;
    op.end_ns = a.end_ns;
    op.stream = a.stream;
    op.rank = a.rank;
    op.kind = *kind_[i];
    op.layer = op_kind_info(op.kind).moe_layer ? p.layer : -1;
    op.iteration = p.iteration;
    op.micro_batch = p.micro_batch;
    op.chunk = p.chunk;
    op.phase = p.phase.value_or(Phase::kForward);
    op.name = a.type == ActivityType::kKernel && a.name.valid() ? a.name
                                                                : intern(std::string(op_kind_name(op.kind)));
    if (a.type != ActivityType::kKernel) op.bytes = a.bytes;
    if (const auto* c = collective(a, is_communication(op_category(op.kind)) ? launch_t_[i] : -1)) {
      const std::int64_t eb = dtype_bytes(c->dtype).value_or(0);
      if (eb > 0 && c->in_nelems >= 0) op.bytes = c->in_nelems * eb;
      // What an all-to-all receives, counted as its input is (the whole
      // output): the fit can then take the volume rule its times follow.
      if (eb > 0 && c->out_nelems >= 0 && collective_kind(op.kind) == "all_to_all")
        op.recv_bytes = c->out_nelems * eb;
    }
    a.op = static_cast<std::int32_t>(t_.ops.size());
    t_.ops.push_back(op);
    ++s_.activities_placed;
  }
  t_.index_ops();
  t_.kernel_category.resize(t_.strings.size(), -1);  // the loader classified the kernel names
  if (!rules_.kernels.empty())
    for (const auto& a : t_.activities)
      if (a.type == ActivityType::kKernel && a.name.valid())
        if (const auto* r = match_kernel_rule(rules_.kernels, t_.str(a.name)))
          t_.kernel_category[static_cast<std::size_t>(a.name.value)] = static_cast<std::int8_t>(r->category);
}

const Collective* Recognizer::collective(const Activity& a, std::int64_t launch_ns) {
  if (a.type == ActivityType::kKernel && launch_ns >= 0) {
    if (!host_calls_built_) {
      host_calls_built_ = true;
      for (const auto& c : t_.collectives)
        if (c.correlation_id == 0) host_calls_.push_back(&c);
      std::sort(host_calls_.begin(), host_calls_.end(), [](const Collective* x, const Collective* y) {
        return std::tie(x->rank, x->start_ns) < std::tie(y->rank, y->start_ns);
      });
    }
    // The call of the rank that started last before the launch (NCCL calls
    // of a thread do not nest).
    auto after = std::upper_bound(host_calls_.begin(), host_calls_.end(), std::pair{a.rank, launch_ns},
                                  [](const std::pair<RankId, std::int64_t>& k, const Collective* c) {
                                    return std::tie(k.first, k.second) < std::tie(c->rank, c->start_ns);
                                  });
    if (after != host_calls_.begin()) {
      const auto* c = *std::prev(after);
      if (c->rank == a.rank && launch_ns <= c->end_ns) return c;
    }
  }
  if (a.correlation_id == 0) return nullptr;
  if (by_correlation_.empty() && !t_.collectives.empty()) {
    // A compact copy of the keys (the collectives are sorted by them): the
    // search touches a few cache lines, not one collective record a step.
    by_correlation_.reserve(t_.collectives.size());
    for (const auto& c : t_.collectives) by_correlation_.push_back({c.rank.value, c.correlation_id});
  }
  const std::pair key{a.rank.value, a.correlation_id};
  const auto it = std::lower_bound(by_correlation_.begin(), by_correlation_.end(), key);
  return it != by_correlation_.end() && *it == key ? &t_.collectives[static_cast<std::size_t>(it - by_correlation_.begin())]
                                                   : nullptr;
}

// Load per destination rank from the forward dispatches' split sizes.
void Recognizer::load_from_splits() {
  if (!t_.expert_load.empty()) return;
  std::map<std::tuple<std::int32_t, std::int32_t, std::int32_t, std::int32_t>, std::int64_t> load;
  for (const auto& a : t_.activities) {
    if (a.op < 0) continue;
    const auto& op = t_.ops[static_cast<std::size_t>(a.op)];
    if (op.kind != OpKind::kDispatchAllToAll || op.phase != Phase::kForward || op.layer < 0 || op.iteration < 0)
      continue;
    const auto* c = collective(a);
    if (!c || c->in_splits.empty()) continue;
    ++s_.load_collectives;
    for (std::size_t j = 0; j < c->in_splits.size(); ++j)
      load[{op.iteration, op.layer, op.rank.value, static_cast<std::int32_t>(j)}] += c->in_splits[j];
  }
  for (const auto& [k, tokens] : load)
    t_.expert_load.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k), tokens});
  if (load.empty()) return;
  t_.expert_load_by_rank = true;
  t_.expert_load_origin =
      "all-to-all split sizes of the forward dispatches (elements sent to each destination rank, one "
      "\"expert\" per rank: the load of ranks, not of single experts)";
}

}  // namespace moetrace::analyzer::recognition_detail
