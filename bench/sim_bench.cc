// Benchmark of the simulator (issue 3, item 7): builds a plan of an
// expert-parallel variant at scale, simulates it and writes its trace;
// prints the wall time of each phase and the peak RSS.
//
//   sim_bench [--variant dpmoe|pipemoe] [--ranks 1024] [--layers 8]
//             [--iterations 4] [-r 4] [--experts-per-rank 1] [--tokens 4096]
//             [--out FILE] [--short-op-names] [--lean] [--plan-builder B] [--keep]
//             [--no-write]   (load, build and simulate only: for profiling those)
//
// Target (issue 3) on the 2-core CI machine: 1024 ranks x 8 layers x 4
// iterations of DPMoE and of PipeMoE with r = 4 in at most 10 s and 4 GB.
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#include "bench_args.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/timing_plan.h"
#include "moetrace/schema/stopwatch.h"
#include "moetrace/sim/trace_output.h"

namespace {

using moetrace::process_cpu_seconds;
using moetrace::seconds_since;

long peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024;
}

}  // namespace

int main(int argc, char** argv) {
  std::string variant = "pipemoe", out, plan_builder = "auto";
  int ranks = 1024, layers = 8, iterations = 4, r = 4, experts_per_rank = 1;
  std::int64_t tokens = 4096;
  bool keep = false, short_names = false, lean = false, no_write = false;
  for (moetrace::bench::Args args("sim_bench", argc, argv); args.next();) {
    const std::string& a = args.flag();
    if (a == "--variant") variant = args.value();
    else if (a == "--ranks") ranks = std::stoi(args.value());
    else if (a == "--layers") layers = std::stoi(args.value());
    else if (a == "--iterations") iterations = std::stoi(args.value());
    else if (a == "-r") r = std::stoi(args.value());
    else if (a == "--experts-per-rank") experts_per_rank = std::stoi(args.value());
    else if (a == "--tokens") tokens = std::stoll(args.value());
    else if (a == "--out") out = args.value();
    else if (a == "--keep") keep = true;
    else if (a == "--short-op-names") short_names = true;
    else if (a == "--lean") lean = true;
    else if (a == "--no-write") no_write = true;
    else if (a == "--plan-builder") plan_builder = args.value();
    else {
      fmt::print(stderr, "usage: sim_bench [--variant V] [--ranks N] [--layers N] [--iterations N] [-r N] "
                         "[--experts-per-rank N] [--tokens N] [--out FILE] [--short-op-names] [--lean] [--no-write] [--plan-builder auto|full|timing] [--keep]\n");
      return 2;
    }
  }
  if (out.empty())
    out = (std::filesystem::temp_directory_path() / fmt::format("sim_bench_{}_{}.db", variant, ranks)).string();

  try {
    moetrace::sim::RunSpec spec = moetrace::sim::run_preset(variant);
    spec.common.ranks = ranks;
    spec.common.iterations = iterations;
    spec.common.model.num_layers = layers;
    spec.common.model.num_experts = ranks * experts_per_rank;
    spec.routing.tokens_per_source = tokens;
    spec.pipeline_degree = r;
    spec.plan_builder = plan_builder;
    const auto model = spec.resolved_cost_model();

    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    const auto load = moetrace::plan::synthetic_load(spec.load_config());
    const double t_load = seconds_since(t0), c_load = process_cpu_seconds() - c0;
    const auto tb = std::chrono::steady_clock::now();
    const double cb = process_cpu_seconds();
    auto plan = moetrace::sim::uses_timing_plan(spec) ? moetrace::sim::build_timing_plan(spec, load)
                                                      : moetrace::sim::build_plan(spec);
    const double t_build = seconds_since(tb), c_build = process_cpu_seconds() - cb;
    const long rss_build = peak_rss_mib();
    const std::size_t streams = plan.streams.size(), loads = plan.loads.size();

    if (no_write) {
      const auto t1 = std::chrono::steady_clock::now();
      const auto result = moetrace::sim::simulate(plan, model);
      fmt::print("load {:.2f} s, build {:.2f} s, simulate {:.2f} s ({} ops, {} tasks); peak RSS {} MiB\n", t_load,
                 t_build, seconds_since(t1), plan.ops.size(), result.tasks, peak_rss_mib());
      return 0;
    }
    // Simulation and writing overlap (simulate_to_trace): the simulate line
    // is the simulation's own time, write the rest.
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = process_cpu_seconds();
    moetrace::sim::TraceOutputOptions options;
    options.full_op_names = !short_names;
    options.detail = lean ? moetrace::sim::TraceDetail::kLean : moetrace::sim::TraceDetail::kFull;
    const auto t = moetrace::sim::simulate_to_trace(out, std::move(plan), model, {}, options);
    const double t_sim = t.simulate_seconds, t_write = seconds_since(t1) - t_sim;
    const double c_sim_write = process_cpu_seconds() - c1;
    const double total = seconds_since(t0), c_total = process_cpu_seconds() - c0;
    const auto bytes = std::filesystem::file_size(out);

    fmt::print("{} ranks={} layers={} iterations={} r={} experts={} tokens/rank={}\n", variant, ranks, layers,
               iterations, variant == "pipemoe" ? r : 1, spec.common.model.num_experts, tokens);
    fmt::print("  plan:     {} ops, {} buffers, {} streams, {} load entries\n", t.ops, t.buffers, streams, loads);
    fmt::print("              wall s   cpu s\n");
    fmt::print("  load      {:7.2f} {:7.2f}\n", t_load, c_load);
    fmt::print("  build     {:7.2f} {:7.2f}   ({} builder; peak RSS so far {} MiB)\n", t_build, c_build,
               moetrace::sim::uses_timing_plan(spec) ? "timing-only" : "kernels/plan", rss_build);
    fmt::print("  simulate  {:7.2f}           ({} tasks, makespan {:.3f} ms simulated)\n", t_sim, t.result.tasks,
               t.result.makespan_s * 1e3);
    fmt::print("  write     {:7.2f} {:7.2f}   (cpu: simulate and write; {} detail: {} rows, {:.1f} MiB; close {:.2f} s)\n",
               t_write, c_sim_write, lean ? "lean" : "full", t.stats.rows, static_cast<double>(bytes) / (1 << 20),
               t.stats.close_seconds);
    fmt::print("  total     {:7.2f} {:7.2f}   peak RSS {} MiB\n", total, c_total, peak_rss_mib());
    if (!keep) std::filesystem::remove(out);
  } catch (const std::exception& e) {
    fmt::print(stderr, "sim_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
