// `moetrace run`: runs one MoE variant (a paper preset, a JSON config, command
// line overrides) on a backend and writes its trace. Resolution order: the
// preset (or the variant's default workload), then the config file, then the
// overrides; the result is validated (one line naming the field) before
// anything runs.
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>

#include "commands.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/run_spec.h"
#include "run_backend.h"
#include "trace_files.h"

namespace moetrace::cli {

void run_cuda_backend(const RunRequest& request);

std::vector<RunBackend> run_backends() {
  std::vector<RunBackend> b;
  b.push_back({"sim", "discrete-event simulator with a hardware cost model (no GPU needed)", run_sim_backend, ""});
  // Listing the CUDA backend must not load it (see run_backend.h): the
  // plugin opens when a run asks for it.
#ifdef MOETRACE_CUDA_BACKEND_MODULE
  b.push_back({"cuda", "real kernels on the GPU(s) (CUDA executor)", run_cuda_backend, ""});
#else
  b.push_back({"cuda", "real kernels on the GPU(s) (CUDA executor)", nullptr,
               "this build has no CUDA backend; use --backend sim"});
#endif
  return b;
}

void run_cuda_backend(const RunRequest& request) {
  std::string why;
  const auto* plugin = load_cuda_backend(&why);
  if (!plugin) throw Error(why);
  std::string error;
  switch (plugin->run(request, &error)) {
    case 0: return;
    case 2: throw ConfigError(error);
    default: throw Error(error);
  }
}

bool nvidia_device_present() {
  std::error_code ec;
  return std::filesystem::exists("/dev/nvidiactl", ec) || std::filesystem::exists("/dev/nvidia0", ec);
}

const CudaBackendPlugin* load_cuda_backend(std::string* why) {
#ifndef MOETRACE_CUDA_BACKEND_MODULE
  *why = "this build has no CUDA backend; use --backend sim";
  return nullptr;
#else
  static std::string error;
  static const CudaBackendPlugin* plugin = [] () -> const CudaBackendPlugin* {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    const auto path = (ec ? std::filesystem::path(".") : exe.parent_path()) / MOETRACE_CUDA_BACKEND_MODULE;
    if (!std::filesystem::exists(path, ec)) {
      error = fmt::format("this installation lacks the CUDA backend ({}); use --backend sim", path.string());
      return nullptr;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* e = dlerror();
      error = fmt::format("the CUDA backend cannot load ({}); use --backend sim", e ? e : path.string());
      return nullptr;
    }
    using Entry = const CudaBackendPlugin* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "moetrace_cuda_backend"));
    const CudaBackendPlugin* p = entry ? entry() : nullptr;
    if (!p || p->abi != kCudaBackendAbi) {
      error = fmt::format("{} is not a CUDA backend of this moetrace; reinstall", path.string());
      return nullptr;
    }
    return p;
  }();
  if (!plugin) *why = error;
  return plugin;
#endif
}

namespace {

std::string slurp(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot read {}", path, what));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string list_presets() {
  std::string out = "Workload presets (moetrace run --preset NAME):\n";
  std::size_t width = 0;
  const auto presets = sim::run_presets();
  for (const auto& p : presets) width = std::max(width, p.name.size());
  for (const auto& p : presets) out += fmt::format("  {:<{}}  {}\n", p.name, width, p.summary);
  out += fmt::format("  {}\n      pipemoe Table IV grid (e.g. pipemoe-t4-p16-b4-l1024-h4096-m4096-e1)\n",
                     sim::pipemoe_table4_pattern());
  out += "  dpmoe, ppmoe, pipemoe, mpipemoe, pro_prophet, fastermoe\n"
         "      the variant's default workload (8 ranks, H100 cost model)\n";
  out += "\nHardware cost models (--cost-model NAME, or a JSON file):\n";
  width = 0;
  for (const auto& c : sim::cost_model_presets()) width = std::max(width, c.name.size());
  for (const auto& c : sim::cost_model_presets()) out += fmt::format("  {:<{}}  {}\n", c.name, width, c.summary);
  return out;
}

}  // namespace

namespace {

// The simulated run at `whole` rewritten as one file per rank beside
// `output` (each with the run's id), then removed.
void split_into_rank_files(const std::string& whole, const std::string& output, bool quiet) {
  struct Remove {
    const std::string& path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{whole};
  analyzer::LoadOptions lo;
  lo.recognize = false;
  lo.project = false;
  const auto trace = load_with_progress(whole, lo);
  std::random_device rd;
  const std::string id = fmt::format("{:08x}{:08x}", rd(), rd());
  const auto ranks = trace.rank_ids();
  TraceFiles files(trace);
  Progress progress("writing rank files");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    progress.update("", static_cast<double>(i) / static_cast<double>(ranks.size()));
    files.write(rank_file_path(output, ranks[i].value), {ranks[i].value}, {{"run.id", id}});
  }
  if (!quiet && !ranks.empty())
    std::cerr << fmt::format("split into {} rank files: {} ... {}\n", ranks.size(),
                             rank_file_path(output, ranks.front().value), rank_file_path(output, ranks.back().value));
}

}  // namespace

void add_run_command(CLI::App& app) {
  struct Options {
    std::string backend;
    std::string variant, preset, config, cost_model, output;
    bool list = false, dump_config = false, quiet = false, short_names = false, calibrate = false;
    bool no_trace = false, split_ranks = false, cuda_graph = false;
    int warmup = 0;
    std::string detail = "full";
    int iterations = 0, ranks = 0, layers = 0, experts = 0, top_k = 0, r = 0;
    std::string strategy, routing, plan_builder;
    std::int64_t tokens = 0, memory_budget = 0;
    std::uint64_t seed = 0;
    double skew = 0, locality = 0;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("run", "Run an MoE variant (simulated, or on GPUs) and write its trace");
  std::string backends;
  for (const auto& b : run_backends()) backends += fmt::format("{}{} ({})", backends.empty() ? "" : ", ", b.name, b.help);
  cmd->add_option("--backend,-b", opt->backend, "Where to run: " + backends + "; default: cuda where a GPU is present (and this build has it), else sim");
  cmd->add_option("--variant,-v", opt->variant, "dpmoe, ppmoe, pipemoe, mpipemoe, pro_prophet, fastermoe");
  cmd->add_option("--preset,-p", opt->preset, "A workload from the papers' tables (see --list-presets)");
  cmd->add_option("--config,-c", opt->config, "JSON configuration (see kernels/sim/.../run_spec.h)");
  cmd->add_option("--cost-model", opt->cost_model, "Hardware cost model: a preset name or a JSON file");
  cmd->add_option("--output,-o", opt->output, "Trace database to write (default: <preset or variant>-sim.db)");
  cmd->add_flag("--list-presets", opt->list, "List workload presets and hardware cost models, then exit");
  cmd->add_flag("--dump-config", opt->dump_config, "Print the resolved configuration as JSON, then exit");
  cmd->add_flag("--quiet,-q", opt->quiet, "No summary line");
  cmd->add_flag("--calibrate", opt->calibrate,
                "Run the calibration sweep instead of a workload: isolated GEMMs, gate/permute/unpermute, "
                "all-to-alls and all-reduces (every group size), copies, and overlapped pairs, at the workload's "
                "model size, experts, top-k and ranks (default: the dpmoe preset's); fit it with `moetrace fit`");
  cmd->add_flag("--no-trace", opt->no_trace,
                "cuda: run without the CUPTI collector (the trace keeps the run, the plan's tables and the wall "
                "time, no GPU activity): the baseline of the collector's overhead");
  auto* o_warmup = cmd->add_option("--warmup", opt->warmup,
                                   "cuda: run the whole plan this many times first, unrecorded and left out of the "
                                   "trace (cold start: module loading, cuBLAS, memory pool, clocks)");
  cmd->add_flag("--cuda-graph", opt->cuda_graph,
                "cuda: capture each iteration's launches once into a CUDA graph and launch the graph, so the "
                "host's launch cost no longer paces the GPU within an iteration (default: off, ops launched one "
                "by one); with NCCL, needs NCCL 2.9 or later");
  cmd->add_flag("--split-ranks", opt->split_ranks,
                "sim: one trace file per rank (OUTPUT's name with .rankN before its extension), as a multi-GPU "
                "NCCL run writes them; every command reads them together as one run");
  cmd->add_flag("--short-op-names", opt->short_names,
                "Name op ranges by kind, not per op (fewer strings in very large traces)");
  cmd->add_option("--trace-detail", opt->detail,
                  "full (op ranges, kernels, deps, buffers, op_buffers, memory) or lean (no synthesized kernels, "
                  "no op_buffers: for very large what-ifs)")
      ->check(CLI::IsMember({"full", "lean"}))
      ->capture_default_str();
  auto* o_iter = cmd->add_option("--iterations,-i", opt->iterations, "Training iterations");
  auto* o_ranks = cmd->add_option("--ranks", opt->ranks, "World size P");
  auto* o_layers = cmd->add_option("--layers", opt->layers, "MoE layers (blocks)");
  auto* o_experts = cmd->add_option("--experts", opt->experts, "Experts per MoE layer E");
  auto* o_topk = cmd->add_option("--top-k", opt->top_k, "Experts per token k");
  auto* o_tokens = cmd->add_option("--tokens", opt->tokens,
                                   "Tokens per source block (a rank's batch; a micro-batch for ppmoe)");
  auto* o_r = cmd->add_option("-r,--pipeline-degree", opt->r, "pipemoe pipeline degree r / mpipemoe partitions n");
  auto* o_strategy = cmd->add_option("--strategy", opt->strategy, "mpipemoe memory reuse: " + plan::reuse_strategy_names());
  auto* o_budget = cmd->add_option("--memory-budget", opt->memory_budget, "Memory budget per rank, bytes (0: none)");
  auto* o_seed = cmd->add_option("--seed", opt->seed, "Seed of the routing load");
  auto* o_routing = cmd->add_option("--routing", opt->routing, "Routing load: balanced, zipf, drifting");
  auto* o_skew = cmd->add_option("--skew", opt->skew, "Zipf skew s of the expert popularity (zipf, drifting)");
  auto* o_builder = cmd->add_option("--plan-builder", opt->plan_builder,
                                    "auto, full (kernels/plan) or timing (aggregated all-to-alls; dpmoe, pipemoe)");
  auto* o_locality = cmd->add_option("--locality", opt->locality,
                                     "drifting: locality between consecutive iterations, in [0, 1]");

  cmd->callback([=] {
    if (opt->list) {
      write_output("", list_presets());
      return;
    }
    // Backend first: asking for one this build lacks is answered plainly.
    const auto backends_list = run_backends();
    std::string wanted = opt->backend;
    if (wanted.empty() && nvidia_device_present()) {
      std::string why;
      if (const auto* cuda = load_cuda_backend(&why); cuda && cuda->gpu_available()) wanted = "cuda";
    }
    const RunBackend* backend = nullptr;
    for (const auto& b : backends_list) {
      if (!wanted.empty() ? b.name == wanted : b.run != nullptr) {
        backend = &b;
        break;
      }
    }
    if (!backend) {
      std::string names;
      for (const auto& b : backends_list) names += (names.empty() ? "" : ", ") + b.name;
      throw ConfigError(fmt::format("backend \"{}\" is not one of {}", opt->backend, names));
    }
    if (opt->split_ranks && backend->name != "sim")
      throw ConfigError(fmt::format("--split-ranks is for --backend sim (not {}; its NCCL runs write a file per rank)",
                                    backend->name));
    if (backend->name != "cuda") {
      if (opt->no_trace) throw ConfigError(fmt::format("--no-trace is for --backend cuda (not {})", backend->name));
      if (o_warmup->count()) throw ConfigError(fmt::format("--warmup is for --backend cuda (not {})", backend->name));
      if (opt->cuda_graph)
        throw ConfigError(fmt::format("--cuda-graph is for --backend cuda (not {})", backend->name));
    }
    if (opt->warmup < 0) throw ConfigError(fmt::format("--warmup ({}) must be at least 0", opt->warmup));
    // The sweep's fit reads each op's host issue time, which a graph hides.
    if (opt->cuda_graph && opt->calibrate)
      throw ConfigError("--cuda-graph is not for --calibrate: the sweep measures each op as the host launches it");
    if (!backend->run) throw Error(fmt::format("--backend {}: {}", backend->name, backend->unavailable));

    sim::RunSpec spec;
    if (!opt->preset.empty()) spec = sim::run_preset(opt->preset);
    else if (!opt->variant.empty()) {
      if (std::find(std::begin(sim::kVariants), std::end(sim::kVariants), opt->variant) == std::end(sim::kVariants)) {
        spec.variant = opt->variant;
        spec.validate();  // names the variant field
      }
      spec = sim::run_preset(opt->variant);
    }
    if (!opt->config.empty()) spec = sim::run_spec_from_json(slurp(opt->config, "the configuration"), spec);
    if (opt->preset.empty() && opt->config.empty() && opt->variant.empty()) {
      if (!opt->calibrate)
        throw ConfigError("nothing to run: give --preset, --variant or --config (see --list-presets)");
      spec = sim::run_preset("dpmoe");  // the default shape and hardware for a calibration sweep
    }
    if (!opt->variant.empty()) spec.variant = opt->variant;
    if (!opt->cost_model.empty()) {
      if (std::filesystem::exists(opt->cost_model)) {
        spec.cost_model = sim::cost_model_from_json(slurp(opt->cost_model, "the cost model"));
      } else {
        sim::cost_model_preset(opt->cost_model);  // an unknown name fails here, listing the known ones
        spec.cost_model_name = opt->cost_model;
        spec.cost_model.reset();
      }
    }
    auto& m = spec.common.model;
    if (o_iter->count()) spec.common.iterations = opt->iterations;
    if (o_ranks->count()) spec.common.ranks = opt->ranks;
    if (o_layers->count()) m.num_layers = opt->layers;
    if (o_experts->count()) m.num_experts = opt->experts;
    if (o_topk->count()) m.top_k = opt->top_k;
    if (o_tokens->count()) spec.routing.tokens_per_source = opt->tokens;
    if (o_r->count()) {
      if (opt->r < 1) throw ConfigError(fmt::format("r ({}) must be at least 1", opt->r));
      spec.pipeline_degree = opt->r;
      spec.partitions = opt->r;
    }
    if (o_strategy->count()) spec.strategy = plan::parse_reuse_strategy(opt->strategy);
    if (o_budget->count()) spec.common.memory_budget_bytes = opt->memory_budget;
    if (o_seed->count()) spec.routing.seed = opt->seed;
    if (o_routing->count()) spec.routing.pattern = plan::parse_load_pattern(opt->routing, "routing");
    if (o_skew->count()) spec.routing.zipf_skew = opt->skew;
    if (o_locality->count()) spec.routing.locality = opt->locality;
    if (o_builder->count()) spec.plan_builder = opt->plan_builder;
    spec.validate();
    if (opt->dump_config) {
      write_output("", spec.to_json() + "\n");
      return;
    }

    RunRequest request;
    request.spec = spec;
    if (opt->calibrate) {
      plan::CalibrationConfig c;
      c.ranks = spec.common.ranks;
      c.model_dim = m.model_dim;
      c.expert_hidden = m.expert_hidden;
      c.elem_bytes = m.elem_bytes;
      c.experts = m.num_experts;
      c.top_k = m.top_k;
      c.validate();
      request.calibration = c;
    }
    request.output = !opt->output.empty() ? opt->output
                     : opt->calibrate     ? fmt::format("calibration-{}.db", backend->name)
                                          : fmt::format("{}-{}.db", spec.preset.empty() ? spec.variant : spec.preset,
                                                        backend->name);
    request.full_op_names = !opt->short_names;
    request.lean = opt->detail == "lean";
    request.quiet = opt->quiet;
    request.collect = !opt->no_trace;
    request.warmup_runs = opt->warmup;
    request.cuda_graph = opt->cuda_graph;
    if (!opt->split_ranks) {
      backend->run(request);
      return;
    }
    const std::string output = request.output;
    request.output = output + ".unsplit";
    backend->run(request);
    split_into_rank_files(request.output, output, opt->quiet);
  });
}

}  // namespace moetrace::cli
