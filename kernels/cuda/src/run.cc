#include "moetrace/cuda/run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "moetrace/cuda/device_probe.h"
#include "moetrace/cupti/collector.h"
#include "moetrace/instrument/trace_writer.h"
#include "moetrace/plan/reference.h"
#include "moetrace/schema/error.h"

namespace moetrace::cuda {
namespace {

// The median host issue time of each op kind and phase, microseconds, as a
// JSON object {"expert_ffn.fwd": 31.2, ...} (run_config
// cuda.host_issue_us): with the collector off, what the executor and the
// libraries it calls take to issue an op without CUPTI's cost per call.
std::string host_issue_medians(const plan::Plan& plan, const RunResult& r) {
  std::map<std::string, std::vector<std::int64_t>> by;
  for (const plan::Op& op : plan.ops) {
    const auto i = static_cast<std::size_t>(op.id.value);
    if (i < r.issue_ns.size() && r.issue_ns[i] >= 0)
      by[fmt::format("{}.{}", op_kind_name(op.kind), phase_name(op.coords.phase))].push_back(r.issue_ns[i]);
  }
  std::string out = "{";
  for (auto& [key, v] : by) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    const double median = n % 2 == 1 ? static_cast<double>(v[n / 2]) : 0.5 * static_cast<double>(v[n / 2 - 1] + v[n / 2]);
    out += fmt::format("{}\"{}\": {:.2f}", out.size() > 1 ? ", " : "", key, median / 1e3);
  }
  return out + "}";
}

// Tokens of every block, from the plan's load (iteration 0).
std::vector<std::int64_t> block_tokens(const plan::Plan& plan) {
  std::vector<std::int64_t> tokens(static_cast<std::size_t>(std::max(plan.blocks, 1)), 0);
  for (const auto& e : plan.loads)
    if (e.iteration == 0 && e.layer == 0 && e.source >= 0 && e.source < plan.blocks)
      tokens[static_cast<std::size_t>(e.source)] += e.tokens;
  for (auto& t : tokens) t /= std::max(plan.dims.top_k, 1);
  return tokens;
}

void write_plan_tables(instrument::TraceWriter& w, const plan::Plan& plan, const Executor& ex,
                       const std::vector<DeviceInfo>& devices, const std::vector<std::int64_t>& tokens) {
  const DeviceInfo& d = devices.at(static_cast<std::size_t>(ex.device()));
  w.add(instrument::DeviceRecord{.id = DeviceId(d.index), .name = d.name, .uuid = d.uuid,
                                 .compute_major = d.compute_major, .compute_minor = d.compute_minor,
                                 .sm_count = d.sm_count, .memory_bytes = d.memory_bytes});
  const auto pid = static_cast<std::int64_t>(getpid());
  for (int r = 0; r < plan.world_size; ++r) {
    if (!ex.runs_rank(RankId(r))) continue;
    w.add(instrument::RankRecord{RankId(r), DeviceId(d.index), d.index, instrument::host_name(), pid});
  }
  std::int64_t total_tokens = 0;
  for (auto t : tokens) total_tokens += t;
  for (int l = 0; l < plan.dims.num_layers; ++l) {
    w.add(instrument::LayerRecord{.layer = l, .num_experts = plan.dims.num_experts, .top_k = plan.dims.top_k,
                                  .model_dim = plan.dims.model_dim, .hidden_dim = plan.dims.expert_hidden,
                                  .tokens = total_tokens});
  }
  for (const plan::Op& op : plan.ops) {
    if (!ex.runs_rank(op.rank)) continue;
    for (OpId dep : op.deps) w.add(instrument::OpDepRecord{op.id, dep});
    for (const auto& b : op.buffers) w.add(instrument::OpBufferRecord{op.id, b.buffer, b.access});
  }
  for (const auto& p : plan.placements) {
    w.add(instrument::ExpertPlacementRecord{p.iteration, p.layer, p.expert, p.rank.value, p.role});
  }
}

}  // namespace

std::string rank_trace_path(const std::string& path, int rank) {
  const std::filesystem::path p(path);
  return (p.parent_path() / fmt::format("{}.rank{}{}", p.stem().string(), rank, p.extension().string())).string();
}

CudaRunSummary run_plan(const plan::Plan& plan, const CudaRunOptions& options) {
  if (options.warmup_runs < 0)
    throw ConfigError(fmt::format("warmup runs ({}) must be at least 0", options.warmup_runs));
  const auto devices = probe_devices();  // one clear line where there is no GPU
  const plan::ModelShape& m = options.shape;
  if (m.num_layers != plan.dims.num_layers || m.num_experts != plan.dims.num_experts ||
      m.top_k != plan.dims.top_k || m.model_dim != plan.dims.model_dim ||
      m.expert_hidden != plan.dims.expert_hidden || m.dense_hidden != plan.dims.dense_hidden)
    throw ConfigError("the model shape does not match the plan's dimensions");
  Executor ex(plan, options.executor);
  CudaRunSummary summary;
  summary.device_name = devices.at(static_cast<std::size_t>(ex.device())).name;
  summary.trace_path = options.trace_path;
  const bool per_rank = options.executor.communicator == CommunicatorKind::kNccl && plan.world_size > 1;
  if (per_rank) {
    for (int r = 0; r < plan.world_size; ++r)
      if (ex.runs_rank(RankId(r))) summary.trace_path = rank_trace_path(options.trace_path, r);
  }
  const std::vector<std::int64_t> tokens = block_tokens(plan);
  const plan::ModelWeights weights = plan::random_weights(m, options.seed);
  // Drawn on the device buffer by buffer (host_data.h): made here, a large
  // preset's inputs and output gradients filled the host's memory.
  const RandomTrainingData data{plan.iterations, tokens, m.model_dim, options.seed + 1};

  instrument::RunRecord run = options.run;
  run.backend = "cuda";
  run.simulated = false;
  run.world_size = plan.world_size;
  if (run.variant.empty()) run.variant = plan.variant;
  if (run.config_json.empty()) run.config_json = plan.config_json;
  run.host = instrument::host_name();
  auto writer = std::make_unique<instrument::TraceWriter>(summary.trace_path, run);
  // The run's configuration as dotted keys, as a simulated trace of it has
  // them ("iterations", "model.num_layers"): what readers of either look up.
  writer->set_config_json(run.config_json);
  writer->set_config("cuda.precision", precision_name(options.executor.precision));
  writer->set_config("cuda.expert_gemm", expert_gemm_name(options.executor.expert_gemm));
  writer->set_config("cuda.communicator", communicator_name(options.executor.communicator));
  writer->set_config("cuda.routing", options.executor.routing == RoutingMode::kPlanned ? "planned" : "computed");
  if (options.executor.communicator == CommunicatorKind::kEmulated)
    writer->set_config("cuda.link", to_string(options.executor.link));
  writer->set_config("cuda.device", summary.device_name);
  writer->set_config("cuda.collector", options.collect ? "on" : "off");
  if (options.collect) writer->set_config("cuda.query_api", options.cupti_query_api ? "recorded" : "left out");
  writer->set_config("cuda.warmup_runs", std::to_string(options.warmup_runs));
  writer->set_config("cuda.graph", options.executor.cuda_graph ? "on" : "off");
  // The launcher's job id ties the rank files of one run together (a reader
  // refuses a rank file of another run; analyzer/run_loader.h).
  if (per_rank && options.executor.launch && !options.executor.launch->job_id.empty())
    writer->set_config("run.id", options.executor.launch->job_id);
  write_plan_tables(*writer, plan, ex, devices, tokens);

  for (int i = 0; i < options.warmup_runs; ++i) ex.run(weights, data, nullptr);

  if (!options.collect) {
    summary.result = ex.run(weights, data, nullptr);
    writer->set_config("cuda.wall_ms", fmt::format("{:.3f}", summary.result.wall_ms));
    writer->set_config("cuda.host_issue_us", host_issue_medians(plan, summary.result));
    writer->close();
    return summary;
  }
  cupti::CollectorOptions co;
  co.buffer_bytes = options.cupti_buffer_bytes;
  co.max_buffers = options.cupti_max_buffers;
  co.query_api = options.cupti_query_api;
  for (int r = 0; r < plan.world_size; ++r)
    if (ex.runs_rank(RankId(r))) {
      co.default_rank = RankId(r);
      break;
    }
  cupti::Collector collector(std::move(writer), co);
  summary.result = ex.run(weights, data, &collector);
  collector.writer().set_config("cuda.wall_ms", fmt::format("{:.3f}", summary.result.wall_ms));
  collector.writer().set_config("cuda.host_issue_us", host_issue_medians(plan, summary.result));
  collector.close();
  const cupti::CollectorStats s = collector.stats();
  summary.kernels = s.kernels;
  summary.op_ranges = s.op_ranges;
  summary.dropped_records = s.dropped_records;
  summary.activities_without_op = s.activities_without_op;
  summary.graph_activities = s.graph_activities;
  return summary;
}

}  // namespace moetrace::cuda
