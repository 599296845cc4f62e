// Private to MoE recognition (moe_recognition.h has the rules of the game):
// the recognizer and what its passes share. One file per pass:
//   moe_recognition_contexts.cc   1.  host ranges -> contexts
//   moe_recognition_instances.cc  1b. schedule parts -> layer and chunk instances
//   moe_recognition_placement.cc  2.  GPU activities placed and their kinds decided
//   moe_recognition_layers.cc     3.  point-to-point, layers and directions inferred
//   moe_recognition_output.cc     4.  op ranges, collectives, load from splits
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "moetrace/analyzer/moe_recognition.h"

namespace moetrace::analyzer::recognition_detail {

// A recognised host range.
struct Context {
  std::int64_t start = 0, end = 0;
  std::int64_t thread = 0;
  std::int32_t rank = 0;
  bool process = false;
  Annotation a;
  std::int64_t nvtx = -1;  // NvtxRange::id
  std::size_t range = 0;   // position in Trace::nvtx
  std::size_t index = 0;   // position in the context list (layer instances)
  std::int64_t backward_seq = -1;  // a backward node's autograd sequence number
  // A schedule part's layer instance (pass 1b; >= kScheduleInstanceBase),
  // -1 for none, and the context of its chunk (-1: none). A weight-gradient
  // part takes the instance of the backward part it follows, and its layer
  // and micro-batch once that instance is numbered.
  std::int64_t instance = -1, instance_chunk = -1;
  bool follows_backward = false;
};

// Layer instances of schedule parts are numbered from here, apart from the
// layer contexts' own (their context indices).
inline constexpr std::int64_t kScheduleInstanceBase = std::int64_t{1} << 40;

// Coordinates gathered for one activity from the contexts open at its launch.
struct Placement {
  std::optional<OpKind> kind;            // innermost op context's kind
  std::int64_t kind_nvtx = -1;           // that context's range
  StringId kind_name;
  std::int32_t layer = -1, iteration = -1, micro_batch = -1, chunk = -1;
  std::optional<Phase> phase;
  std::int64_t layer_instance = -1;      // the layer context (numbered or not)
  std::int64_t chunk_instance = -1;      // the micro-batch context (named or implicit)
  bool in_layer = false;
  bool any = false;                      // some context covered it
  std::int64_t backward_seq = -1;        // innermost backward node's autograd sequence number
  bool follows_backward = false;         // a W part: layer and micro-batch of the backward instance it follows
};

void merge(const Context& c, Placement& p, StringId name);
// The kind of work outside MoE layers, by its category.
OpKind generic(Category c);
bool is_moe_comm(OpKind k);
// A collective name of a point-to-point transfer, as PyTorch's profiler
// ("send", "recv": ProcessGroupNCCL's record_param_comms) and NCCL's NVTX
// ranges ("ncclSend", "ncclRecv") record it, in any case.
bool is_point_to_point(std::string_view name);
// A collective name of an all-to-all(v): PyTorch's "all_to_all",
// "all_to_allv", "alltoall_base", NCCL's "ncclAllToAll", any case.
bool is_all_to_all_name(std::string_view name);
// A process group that carries a pipeline's stage-to-stage transfers, by its
// recorded name or description: Megatron-Core's
// "PIPELINE_MODEL_PARALLEL_GROUP", a device mesh's "pp" dimension.
bool is_pipeline_group(std::string_view process_group);

class Recognizer {
 public:
  Recognizer(Trace& t, const MoeRules& rules) : t_(t), rules_(rules) {}
  RecognitionStats run();

 private:
  // 1. Contexts from the host ranges.
  std::optional<Annotation> recognise(const NvtxRange& r);
  std::string rule_name(std::int32_t i) const;
  void collect_contexts();
  void number_iterations();
  void iterations_by_period();
  // A range never closed lasts to the end of the trace.
  static std::int64_t end_of(const NvtxRange& r) { return r.end_ns < 0 ? INT64_MAX : r.end_ns; }
  Context context_of(std::size_t ri) const;
  void add_context(const Context& c);
  void index_contexts();
  // 1b. Implicit layer and chunk instances of schedule parts.
  void infer_containers();

  // 2. Each activity's placement and kind.
  struct Query {
    std::int32_t rank;
    std::int64_t thread, t;
    std::size_t activity;
    bool has_call;
  };
  template <class On>
  void sweep(std::vector<Query>& queries, On&& on);
  void forward_placements();
  void place_activities();
  const KernelRule* kernel_rule(const Activity& a);
  void decide_kind(std::size_t i, Placement& p);
  void step_iterations();

  // 3. Inferred by order.
  void separate_point_to_point();
  void infer_layers_and_directions();
  std::int32_t number_instances(const std::vector<std::size_t>& list, bool backward);

  // 4. Output.
  void materialise();
  // The collective a kernel ran: by correlation id (Kineto's kernel args),
  // else, for a communication kernel, the NCCL call whose host range holds
  // its launch (nsys's NCCL payloads have no correlation id).
  const Collective* collective(const Activity& a, std::int64_t launch_ns = -1);
  void load_from_splits();

  Trace& t_;
  const MoeRules& rules_;
  RecognitionStats s_;
  std::map<std::pair<std::int64_t, std::int64_t>, std::pair<std::optional<Annotation>, std::int32_t>> cache_;
  std::map<std::pair<std::int64_t, std::int64_t>, bool> process_rule_;
  std::vector<Context> contexts_;
  std::vector<StringId> context_names_;
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> by_thread_;
  std::map<std::int32_t, std::vector<std::size_t>> by_rank_;
  std::vector<Placement> placed_;
  std::vector<std::int64_t> launch_t_;
  std::map<std::int32_t, std::vector<std::int64_t>> step_ends_;  // rank -> ends of its iteration_end ranges
  std::map<std::pair<std::int32_t, std::int64_t>, Placement> forward_;  // (rank, autograd sequence) -> forward op
  std::vector<std::optional<OpKind>> kind_;
  std::vector<std::optional<OpKind>> fallback_;  // kind of an activity no context covers
  std::vector<bool> pending_direction_;          // an MoE all-to-all whose direction comes by order
  std::vector<bool> loose_a2a_;                  // an all-to-all outside every MoE range
  std::vector<std::int32_t> instance_;
  std::unordered_map<std::int64_t, const KernelRule*> kernel_rule_cache_;
  int ambiguous_directions_ = 0;
  std::vector<const Collective*> host_calls_;  // collectives without correlation id, by (rank, start)
  std::vector<std::pair<std::int32_t, std::int64_t>> by_correlation_;  // (rank, correlation id) of t_.collectives
  bool host_calls_built_ = false;
};

}  // namespace moetrace::analyzer::recognition_detail
