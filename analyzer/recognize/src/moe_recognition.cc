// MoE recognition: op ranges materialised from annotations, range rules and
// kernel names (moe_recognition.h has the rules of the game; the passes are
// in moe_recognition_*.cc, moe_recognition_internal.h lists them).
#include "moetrace/analyzer/moe_recognition.h"

#include <string>

#include "moe_recognition_internal.h"
#include "moetrace/schema/ascii.h"

namespace moetrace::analyzer {
namespace recognition_detail {

void merge(const Context& c, Placement& p, StringId name) {
  p.any = true;
  const auto& a = c.a;
  if (a.role == RangeRole::kOp && !p.kind) {
    p.kind = a.kind;
    p.kind_nvtx = c.nvtx;
    p.kind_name = name;
  }
  if (a.role == RangeRole::kMicroBatch && p.chunk_instance < 0) p.chunk_instance = static_cast<std::int64_t>(c.index);
  if (a.role == RangeRole::kLayer) {
    p.in_layer = true;
    if (p.layer_instance < 0) p.layer_instance = static_cast<std::int64_t>(c.index);
  }
  if (c.instance >= 0 && p.layer_instance < 0) {  // a schedule part (pass 1b)
    p.in_layer = true;
    p.layer_instance = c.instance;
    p.follows_backward = c.follows_backward;
    if (p.chunk_instance < 0) p.chunk_instance = c.instance_chunk;
  }
  if (p.backward_seq < 0) p.backward_seq = c.backward_seq;
  if (p.layer < 0) p.layer = a.layer;
  if (p.iteration < 0) p.iteration = a.iteration;
  if (p.micro_batch < 0) p.micro_batch = a.micro_batch;
  if (p.chunk < 0) p.chunk = a.chunk;
  if (!p.phase) p.phase = a.phase;
}

OpKind generic(Category c) {
  switch (c) {
    case Category::kAllToAll: return OpKind::kAllToAll;
    case Category::kAllReduce: return OpKind::kAllReduce;
    case Category::kOtherComm: return OpKind::kOtherComm;
    case Category::kMemcpy: return OpKind::kMemcpy;
    default: return OpKind::kOtherOp;
  }
}

bool is_moe_comm(OpKind k) {
  return k == OpKind::kDispatchAllToAll || k == OpKind::kCombineAllToAll ||
         k == OpKind::kRecommunicate || k == OpKind::kMoeAllReduce || k == OpKind::kTrans ||
         k == OpKind::kAgg;
}

bool is_point_to_point(std::string_view name) {
  std::string n = comparable_word(name);
  if (n.starts_with("nccl")) n.erase(0, 4);
  return n == "send" || n == "recv" || n == "isend" || n == "irecv" || n == "sendrecv" || n == "p2p";
}

bool is_all_to_all_name(std::string_view name) {
  const std::string n = comparable_word(name);
  return n.find("alltoall") != std::string::npos || n.find("all2all") != std::string::npos;
}

bool is_pipeline_group(std::string_view process_group) {
  const std::string g = to_ascii_lower(process_group);
  if (g.find("pipeline") != std::string::npos) return true;
  // "pp" as a word of its own ("pp", "mesh_pp", "(pp)").
  for (std::size_t at = g.find("pp"); at != std::string::npos; at = g.find("pp", at + 1)) {
    const bool start = at == 0 || !ascii_alnum(g[at - 1]);
    const bool end = at + 2 == g.size() || !ascii_alnum(g[at + 2]);
    if (start && end) return true;
  }
  return false;
}

RecognitionStats Recognizer::run() {
  s_.ran = true;
  s_.activities_total = static_cast<std::int64_t>(t_.activities.size());
  collect_contexts();
  iterations_by_period();
  infer_containers();
  index_contexts();
  place_activities();
  step_iterations();
  // Without MoE evidence or iterations there is nothing to materialise
  // (a phase alone gives no row of the breakdown): the trace stays as it is.
  if (!s_.moe && !s_.iterations_marked) return s_;
  separate_point_to_point();
  infer_layers_and_directions();
  materialise();
  load_from_splits();
  return s_;
}

}  // namespace recognition_detail

RecognitionStats recognize_moe(Trace& trace, const MoeRules& rules) {
  if (!trace.ops.empty()) {
    trace.recognition = RecognitionStats{};
    return trace.recognition;
  }
  trace.recognition = recognition_detail::Recognizer(trace, rules).run();
  return trace.recognition;
}

}  // namespace moetrace::analyzer
