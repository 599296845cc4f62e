#include "moetrace/sim/trace_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/error.h"

namespace moetrace::sim {

using plan::CollectiveKind;
using plan::Op;
using plan::Plan;

namespace {

std::string nccl_dtype(int elem_bytes) {
  return elem_bytes == 4 ? "f32" : elem_bytes == 8 ? "f64" : elem_bytes == 1 ? "u8" : "bf16";
}

// GEMM kernel names as cuBLAS shows them in Nsight Systems on each family.
std::string gemm_name(const DeviceSpec& d, int elem_bytes) {
  const std::string& arch = d.kernel_arch;
  if (arch.rfind("sm", 0) == 0) {
    const std::string t = elem_bytes == 4 ? "f32" : "bf16";
    return fmt::format("{}_xmma_gemm_{}{}_{}f32_f32_tn_n_tilesize128x128x64", arch, t, t, t);
  }
  if (elem_bytes == 4) return fmt::format("{}_sgemm_128x128_tn", arch);
  return fmt::format("{}_fp16_s884gemm_fp16_128x128_ldg8_f2f_tn", arch);
}

}  // namespace

std::string kernel_name(const Plan& plan, const Op& op, const DeviceSpec& device) {
  const bool bwd = op.coords.phase == Phase::kBackward;
  const int eb = plan.dims.elem_bytes;
  if (const auto* c = op.collective()) {
    constexpr const char* kArgs = "(ncclDevComm*, unsigned long, ncclWork*)";
    switch (c->kind) {
      case CollectiveKind::kAllToAllV:
      case CollectiveKind::kSendRecv: return fmt::format("ncclDevKernel_SendRecv{}", kArgs);
      case CollectiveKind::kAllReduce:
        return fmt::format("ncclDevKernel_AllReduce_Sum_{}_RING_LL{}", nccl_dtype(eb), kArgs);
      case CollectiveKind::kBroadcast: return fmt::format("ncclDevKernel_Broadcast_RING_LL{}", kArgs);
      case CollectiveKind::kReduce:
        return fmt::format("ncclDevKernel_Reduce_Sum_{}_RING_LL{}", nccl_dtype(eb), kArgs);
    }
  }
  switch (op.kind) {
    case OpKind::kGate: return bwd ? "moe_gate_softmax_topk_backward_kernel" : "moe_gate_softmax_topk_kernel";
    case OpKind::kPermute: return bwd ? "moe_permute_tokens_backward_kernel" : "moe_permute_tokens_kernel";
    case OpKind::kUnpermute: return bwd ? "moe_unpermute_combine_backward_kernel" : "moe_unpermute_combine_kernel";
    case OpKind::kIndexSlice: return "index_select_large_index_kernel";
    case OpKind::kExpertFfn:
    case OpKind::kRecompute:
    case OpKind::kDenseFfn: return gemm_name(device, eb);
    case OpKind::kAttention:
      return bwd ? "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel" : "flash_fwd_kernel";
    case OpKind::kOptimizer: return "multi_tensor_apply_kernel<AdamFunctor<float>>";
    case OpKind::kPlan: return "pro_prophet_plan_search";
    default: break;
  }
  return fmt::format("moetrace_{}_kernel", op_kind_name(op.kind));
}

namespace {

bool is_copy(const Op& op) {
  return !op.collective() && (std::holds_alternative<plan::Copy>(op.data) || op.category() == Category::kMemcpy);
}

// Plausible launch shapes: GEMMs one CTA wave over the SMs, NCCL one block
// per channel, elementwise kernels enough 256-thread blocks for the bytes.
void launch_shape(const Op& op, const DeviceSpec& d, instrument::KernelRecord& k) {
  if (op.collective()) {
    k.grid = {16, 1, 1};
    k.block = {512, 1, 1};
    k.shared_bytes = 0;
  } else if (op.kind == OpKind::kExpertFfn || op.kind == OpKind::kRecompute || op.kind == OpKind::kDenseFfn ||
             op.kind == OpKind::kAttention) {
    k.grid = {std::max(1, d.sm_count), 1, 1};
    k.block = {384, 1, 1};
    k.shared_bytes = 200 * 1024;
  } else {
    const std::int64_t blocks = std::clamp<std::int64_t>(std::max<std::int64_t>(op.bytes, 0) / 4096, 1, 65535);
    k.grid = {static_cast<std::int32_t>(blocks), 1, 1};
    k.block = {256, 1, 1};
    k.shared_bytes = 0;
  }
}

// One trace being written: what does not depend on simulated times at
// construction, each op's kernel (or memcpy) record as it ends, the rest in
// finish().
class TraceOutput {
 public:
  TraceOutput(const std::string& path, const Plan& plan, const CostModel& model, const TraceOutputOptions& options);
  void op_ended(const Op& op, double start_s, double end_s);
  // Op ranges, buffers and memory events, then publishes the file.
  // `before_close` runs once every row is with the writer, while its thread
  // still inserts them (a caller frees the plan there: off the critical
  // path); the plan is not used after it.
  TraceOutputStats finish(const SimResult& result, const std::function<void()>& before_close = {});

 private:
  static instrument::RunRecord run_record(const Plan& plan, const TraceOutputOptions& options);

  const Plan& plan_;
  const CostModel& model_;
  const TraceOutputOptions& options_;
  const bool full_;
  instrument::TraceWriter w_;
  std::vector<StringId> kind_names_;
  std::map<std::tuple<int, int, int>, StringId> kernel_names_;  // (kind, phase, collective kind)
};

// The configuration the trace records: the caller's, else the plan's.
const std::string& config_json_of(const Plan& plan, const TraceOutputOptions& options) {
  return options.config_json.empty() ? plan.config_json : options.config_json;
}

instrument::RunRecord TraceOutput::run_record(const Plan& plan, const TraceOutputOptions& options) {
  instrument::RunRecord run;
  run.name = options.run_name.empty() ? plan.variant + " (simulated)" : options.run_name;
  run.backend = "sim";
  run.variant = plan.variant;
  run.simulated = true;
  run.world_size = plan.world_size;
  run.host = "simulator";
  run.config_json = config_json_of(plan, options);
  return run;
}

// Not durable: a simulated trace is useful only whole, so it is written
// without a journal and appears at `path` (by rename) once complete.
TraceOutput::TraceOutput(const std::string& path, const Plan& plan, const CostModel& model,
                         const TraceOutputOptions& options)
    : plan_(plan),
      model_(model),
      options_(options),
      full_(options.detail == TraceDetail::kFull),
      w_(path, run_record(plan, options), instrument::WriterOptions{.durable = false}) {
  auto& w = w_;
  // run_config: the configuration flattened to dotted keys, and the cost model.
  w.set_config_json(config_json_of(plan, options));
  w.set_config("sim.cost_model", model.name);
  w.set_config("sim.cost_model_json", to_json(model));
  w.set_config("sim.trace_detail", full_ ? "full" : "lean");

  const DeviceSpec& dev = model.device;
  for (int r = 0; r < plan.world_size; ++r) {
    w.add(instrument::DeviceRecord{DeviceId(r), dev.name, fmt::format("SIM-GPU-{}", r), dev.compute_major,
                                   dev.compute_minor, dev.sm_count, dev.memory_bytes, true});
    w.add(instrument::RankRecord{RankId(r), DeviceId(r), r % dev.gpus_per_node,
                                 fmt::format("sim-node{}", r / dev.gpus_per_node), -1});
  }
  for (const auto& s : plan.streams)
    w.add(instrument::StreamRecord{s.id, s.rank, DeviceId(s.rank.value), s.id.value,
                                   std::string(plan::stream_role_name(s.role)), s.name, s.priority});

  // Layers: tokens per rank (schemas/README.md) = tokens routed in
  // iteration 0 / top_k / ranks.
  for (int l = 0; l < plan.dims.num_layers; ++l) {
    std::int64_t routed = 0;
    for (const auto& e : plan.loads)
      if (e.iteration == 0 && e.layer == l) routed += e.tokens;
    instrument::LayerRecord lr;
    lr.layer = l;
    lr.kind = "moe";
    lr.num_experts = plan.dims.num_experts;
    lr.top_k = plan.dims.top_k;
    lr.model_dim = plan.dims.model_dim;
    lr.hidden_dim = plan.dims.expert_hidden;
    lr.tokens = plan.loads.empty() ? -1
                                   : routed / std::max(1, plan.dims.top_k) / std::max(1, plan.world_size);
    w.add(lr);
  }

  bool per_expert_totals = false;
  for (const auto& l : plan.loads) {
    w.add(instrument::ExpertLoadRecord{l.iteration, l.layer, l.source, l.expert, l.tokens});
    per_expert_totals = per_expert_totals || l.source < 0;
  }
  if (per_expert_totals)
    w.set_config("sim.expert_load",
                 "per-expert totals (src_rank = -1): the plan was built timing-only at a scale where the "
                 "per-source table would dominate the trace");
  for (const auto& p : plan.placements)
    w.add(instrument::ExpertPlacementRecord{p.iteration, p.layer, p.expert, p.rank.value, p.role});

  for (const auto& info : all_op_kinds()) kind_names_.push_back(w.intern(info.name));
}

// One synthesized kernel per op (a memcpy record for copies), attributed to
// the op, so the GPU-oriented views are populated.
void TraceOutput::op_ended(const Op& op, double start_s, double end_s) {
  if (!full_) return;
  if (is_copy(op)) {
    const auto dir = copy_direction(plan_, op);
    instrument::MemcpyRecord m;
    m.rank = op.rank;
    m.stream = op.stream;
    m.start_ns = to_ns(start_s);
    m.end_ns = to_ns(end_s);
    m.bytes = std::max<std::int64_t>(op.bytes, 0);
    m.copy_kind = dir.kind;
    m.src_kind = dir.src;
    m.dst_kind = dir.dst;
    m.op = op.id;
    w_.add(m);
    return;
  }
  const auto* c = op.collective();
  const auto key = std::tuple{static_cast<int>(op.kind), static_cast<int>(op.coords.phase),
                              c ? static_cast<int>(c->kind) : -1};
  auto it = kernel_names_.find(key);
  if (it == kernel_names_.end())
    it = kernel_names_.emplace(key, w_.intern(kernel_name(plan_, op, model_.device))).first;
  instrument::KernelRecord k;
  k.rank = op.rank;
  k.stream = op.stream;
  k.start_ns = to_ns(start_s);
  k.end_ns = to_ns(end_s);
  k.name = it->second;
  launch_shape(op, model_.device, k);
  k.op = op.id;
  w_.add(k);
}

TraceOutputStats TraceOutput::finish(const SimResult& result, const std::function<void()>& before_close) {
  const Plan& plan = plan_;
  auto& w = w_;
  w.set_config("sim.makespan_s", fmt::format("{:.9g}", result.makespan_s));

  // The streams of the ops that allocate and free each buffer (they go on
  // its memory events), gathered in the pass over the ops.
  std::vector<StreamId> alloc_stream(plan.buffers.size()), free_stream(plan.buffers.size());
  std::vector<instrument::OpBufferRecord> accesses;
  const std::size_t n = plan.ops.size();
  const std::size_t report_every = std::max<std::size_t>(1, n / 100);
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[i];
    for (BufferId b : op.alloc_before) alloc_stream[static_cast<std::size_t>(b.value)] = op.stream;
    for (BufferId b : op.free_after) free_stream[static_cast<std::size_t>(b.value)] = op.stream;
    instrument::OpRangeRecord r;
    r.id = op.id;
    r.rank = op.rank;
    r.stream = op.stream;
    r.kind = op.kind;
    r.name = options_.full_op_names && !op.name.empty() ? w.intern(op.name)
                                                        : kind_names_[static_cast<std::size_t>(op.kind)];
    r.layer = op.coords.layer;
    r.iteration = op.coords.iteration;
    r.micro_batch = op.coords.micro_batch;
    r.chunk = op.coords.chunk;
    r.phase = op.coords.phase;
    r.start_ns = to_ns(result.start_s[i]);
    r.end_ns = to_ns(result.end_s[i]);
    if (!result.issue_end_s.empty()) {  // the host issue the cost model charged
      r.launch_start_ns = to_ns(result.issue_start_s[i]);
      r.launch_end_ns = to_ns(result.issue_end_s[i]);
    }
    r.flops = op.flops > 0 ? op.flops : -1;
    r.bytes = op.bytes > 0 ? op.bytes : -1;
    r.peer = op.send_recv_peer();
    r.recv_bytes = op.received_bytes();
    if (const auto* c = op.collective(); c && (c->kind == CollectiveKind::kBroadcast || c->kind == CollectiveKind::kReduce)) {
      // The message, as NCCL's records give a broadcast's or reduce's size
      // (and as the simulator charges it, pipelined): the largest single
      // transfer, not the root's total to its peers.
      std::int64_t message = 0;
      for (const auto& t : c->sends) message = std::max(message, t.bytes);
      for (const auto& t : c->recvs) message = std::max(message, t.bytes);
      if (message > 0) r.bytes = message;
    }
    // The op's deps and buffer accesses go on its row (the writer merges
    // duplicates: a buffer both read and written becomes read-write).
    accesses.clear();
    if (full_)
      for (const auto& a : op.buffers) accesses.push_back({op.id, a.buffer, a.access});
    w.add(r, op.deps, accesses);
    if (options_.progress && i % report_every == 0)
      options_.progress(0.9 * static_cast<double>(i) / static_cast<double>(n));
  }

  // Buffers and their memory events (the analyzer's memory timeline). The
  // events go in (rank, time) order, memory_events' key order, so each
  // insert appends to the table.
  std::vector<std::uint64_t> next_address(static_cast<std::size_t>(std::max(plan.world_size, 0)));
  for (std::size_t r = 0; r < next_address.size(); ++r)
    next_address[r] = 0x7f0000000000ULL + (static_cast<std::uint64_t>(r) << 36);
  struct BufferEvent {
    std::int32_t rank;
    std::int64_t ts_ns;
    std::size_t buffer;  // index into plan.buffers
    bool alloc;
  };
  std::vector<BufferEvent> events;
  events.reserve(2 * plan.buffers.size());
  std::vector<std::uint64_t> address(plan.buffers.size(), 0);
  for (std::size_t i = 0; i < plan.buffers.size(); ++i) {
    const plan::Buffer& b = plan.buffers[i];
    if (result.alloc_s[i] < 0) continue;  // never used by any op
    auto& addr = next_address[static_cast<std::size_t>(b.rank.value)];
    instrument::BufferRecord br;
    br.id = b.id;
    br.rank = b.rank;
    br.tag = std::string(plan::buffer_tag_name(b.tag));
    br.bytes = b.bytes();
    br.memory_kind = b.memory;
    br.layer = b.layer;
    br.chunk = b.chunk;
    br.alloc_ns = to_ns(result.alloc_s[i]);
    br.free_ns = result.free_s[i] >= 0 ? to_ns(result.free_s[i]) : -1;
    br.address = addr;
    address[i] = addr;
    addr += static_cast<std::uint64_t>((b.bytes() + 511) / 512 * 512 + 512);
    w.add(br);
    events.push_back({b.rank.value, br.alloc_ns, i, true});
    if (br.free_ns >= 0) events.push_back({b.rank.value, br.free_ns, i, false});
  }
  std::stable_sort(events.begin(), events.end(), [](const BufferEvent& a, const BufferEvent& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.ts_ns < b.ts_ns;
  });
  for (const BufferEvent& ev : events) {
    const plan::Buffer& b = plan.buffers[ev.buffer];
    instrument::MemoryEventRecord e;
    e.rank = b.rank;
    e.ts_ns = ev.ts_ns;
    e.alloc = ev.alloc;
    e.address = address[ev.buffer];
    e.bytes = b.bytes();
    e.memory_kind = b.memory;
    e.stream = ev.alloc ? alloc_stream[ev.buffer] : free_stream[ev.buffer];
    e.buffer = b.id;
    w.add(e);
  }
  std::vector<BufferEvent>().swap(events);

  if (before_close) before_close();
  const auto t_close = std::chrono::steady_clock::now();
  w.close();
  const double close_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_close).count();
  if (options_.progress) options_.progress(1.0);
  return {w.stats().rows_written, close_seconds};
}

}  // namespace

TraceOutputStats write_trace(const std::string& path, const Plan& plan, const CostModel& model,
                             const SimResult& result, const TraceOutputOptions& options) {
  if (result.start_s.size() != plan.ops.size() || result.alloc_s.size() != plan.buffers.size())
    throw Error("write_trace: the simulation result does not belong to this plan");
  TraceOutput out(path, plan, model, options);
  for (std::size_t i = 0; i < plan.ops.size(); ++i) out.op_ended(plan.ops[i], result.start_s[i], result.end_s[i]);
  return out.finish(result);
}

SimulatedTrace simulate_to_trace(const std::string& path, Plan plan, const CostModel& model,
                                 const SimOptions& sim_options, const TraceOutputOptions& options) {
  model.validate();
  SimulatedTrace t;
  t.ops = plan.ops.size();
  t.buffers = plan.buffers.size();
  TraceOutput out(path, plan, model, options);
  SimOptions so = sim_options;
  so.op_ended = [&out, caller = sim_options.op_ended](const Op& op, double start_s, double end_s) {
    out.op_ended(op, start_s, end_s);
    if (caller) caller(op, start_s, end_s);
  };
  const auto t0 = std::chrono::steady_clock::now();
  t.result = simulate(plan, model, so);
  t.simulate_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.stats = out.finish(t.result, [&plan] { plan = Plan(); });
  return t;
}

}  // namespace moetrace::sim
