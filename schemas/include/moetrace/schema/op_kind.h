// The vocabulary shared by plans, executors, traces and analyses: what an op
// is (its kind), how the breakdown counts it (its category) and in which pass
// it runs (its phase). The numeric values are stored in traces (op_ranges.kind,
// op_ranges.phase) and documented in schemas/README.md: append, never renumber.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace moetrace {

// Breakdown categories: where the time of a rank goes.
enum class Category : std::uint8_t {
  kAllToAll = 0,      // dispatch / combine / re-communicate all-to-all
  kAllReduce = 1,     // MoE all-reduce (PPMoE), tensor-parallel, gradient
  kOtherComm = 2,     // Trans / Agg broadcast-reduce, pipeline send/recv
  kExpertCompute = 3, // expert FFN GEMMs and GeLU, recompute of T_M
  kGating = 4,        // gating GEMM, softmax, top-k
  kOtherCompute = 5,  // permute, attention, dense layers, optimizer, Plan
  kMemcpy = 6,        // offload, prefetch, other copies
};
inline constexpr int kNumCategories = 7;

std::string_view category_name(Category c);
std::optional<Category> parse_category(std::string_view name);
constexpr bool is_communication(Category c) {
  return c == Category::kAllToAll || c == Category::kAllReduce || c == Category::kOtherComm;
}
constexpr bool is_computation(Category c) {
  return c == Category::kExpertCompute || c == Category::kGating || c == Category::kOtherCompute;
}

// kWeightGradient: the weight-gradient half of a backward pass that is split
// in two (DualPipe and zero-bubble schedules: backward for inputs, then for
// weights); the reports count it with the backward.
enum class Phase : std::uint8_t { kForward = 0, kBackward = 1, kOther = 2, kWeightGradient = 3 };
std::string_view phase_name(Phase p);  // "fwd", "bwd", "other", "wgrad"
constexpr bool is_backward(Phase p) { return p == Phase::kBackward || p == Phase::kWeightGradient; }
std::optional<Phase> parse_phase(std::string_view name);

// X(enumerator, trace name, category, part of the MoE layer)
#define MOETRACE_OP_KINDS(X)                                                 \
  X(kGate, "gate", kGating, true)                                            \
  X(kPermute, "permute", kOtherCompute, true)                                \
  X(kDispatchAllToAll, "dispatch_all_to_all", kAllToAll, true)               \
  X(kExpertFfn, "expert_ffn", kExpertCompute, true)                          \
  X(kCombineAllToAll, "combine_all_to_all", kAllToAll, true)                 \
  X(kUnpermute, "unpermute", kOtherCompute, true)                            \
  X(kIndexSlice, "index_slice", kOtherCompute, true)                         \
  X(kMoeAllReduce, "moe_all_reduce", kAllReduce, true)                       \
  X(kOffload, "offload", kMemcpy, true)                                      \
  X(kPrefetch, "prefetch", kMemcpy, true)                                    \
  X(kRecompute, "recompute", kExpertCompute, true)                           \
  X(kRecommunicate, "recommunicate", kAllToAll, true)                        \
  X(kPlan, "plan", kOtherCompute, true)                                      \
  X(kTrans, "trans", kOtherComm, true)                                       \
  X(kAgg, "agg", kOtherComm, true)                                           \
  X(kAttention, "attention", kOtherCompute, false)                           \
  X(kDenseFfn, "dense_ffn", kOtherCompute, false)                            \
  X(kTensorParallelAllReduce, "tp_all_reduce", kAllReduce, false)            \
  X(kGradAllReduce, "grad_all_reduce", kAllReduce, false)                    \
  X(kPipelineSend, "pipeline_send", kOtherComm, false)                       \
  X(kPipelineRecv, "pipeline_recv", kOtherComm, false)                       \
  X(kOptimizer, "optimizer", kOtherCompute, false)                           \
  X(kMemcpy, "memcpy", kMemcpy, false)                                       \
  X(kOtherOp, "other", kOtherCompute, false)                                 \
  X(kAllToAll, "all_to_all", kAllToAll, false)                               \
  X(kAllReduce, "all_reduce", kAllReduce, false)                             \
  X(kOtherComm, "other_comm", kOtherComm, false)                             \
  X(kMoeOther, "moe_other", kOtherCompute, true)                             \
  X(kMoeMemcpy, "moe_memcpy", kMemcpy, true)

enum class OpKind : std::uint8_t {
#define MOETRACE_X(e, name, cat, moe) e,
  MOETRACE_OP_KINDS(MOETRACE_X)
#undef MOETRACE_X
};

struct OpKindInfo {
  OpKind kind;
  std::string_view name;
  Category category;
  bool moe_layer;  // counts towards MoE-layer time
};

std::span<const OpKindInfo> all_op_kinds();
const OpKindInfo& op_kind_info(OpKind k);
inline std::string_view op_kind_name(OpKind k) { return op_kind_info(k).name; }
inline Category op_category(OpKind k) { return op_kind_info(k).category; }
std::optional<OpKind> parse_op_kind(std::string_view name);

}  // namespace moetrace
