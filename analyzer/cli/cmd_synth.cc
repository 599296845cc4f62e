// `moetrace synth OUT`: writes a synthetic trace (benchmarks, demos).
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "moetrace/synthetic/synthetic_trace.h"

namespace moetrace::cli {

void add_synth_command(CLI::App& app) {
  struct Options {
    std::string path;
    synthetic::SyntheticConfig config;
    std::int64_t events = 0;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "synth", "Write a synthetic expert-parallel trace (invented timings; for demos and benchmarks)");
  cmd->add_option("output", opt->path, "Trace database to write (replaced if it exists)")->required();
  auto& c = opt->config;
  cmd->add_option("--ranks", c.ranks, "Ranks")->capture_default_str();
  cmd->add_option("--layers", c.layers, "MoE layers")->capture_default_str();
  cmd->add_option("--iterations", c.iterations, "Iterations")->capture_default_str();
  cmd->add_option("--chunks", c.chunks, "Pipeline degree r of the MoE layers")->capture_default_str();
  cmd->add_option("--kernels-per-op", c.kernels_per_op, "GPU kernels per op")->capture_default_str();
  cmd->add_option("--seed", c.seed, "Random seed of the jitter")->capture_default_str();
  cmd->add_option("--events", opt->events,
                  "Choose the iteration count to reach about this many events");
  cmd->callback([opt] {
    auto config = opt->config;
    if (opt->events > 0) config.iterations = synthetic::iterations_for_events(config, opt->events);
    Progress progress("writing " + opt->path);
    const auto r = synthetic::write_synthetic_trace(
        opt->path, config, [&](double f) { progress.update("", f); });
    std::cerr << fmt::format("wrote {} events to {} in {:.2f} s\n", r.events, opt->path, r.seconds);
  });
}

}  // namespace moetrace::cli
