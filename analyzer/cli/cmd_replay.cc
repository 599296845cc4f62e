// `moetrace replay TRACE`: the trace replayed from its execution graph with
// the measured durations (exec_graph.h, replay.h), per rank and iteration and
// per MoE layer, measured against replayed.
#include <memory>
#include <sstream>

#include "commands.h"
#include "moetrace/analyzer/replay.h"

namespace moetrace::cli {

void add_replay_command(CLI::App& app) {
  struct Options {
    MoeArgs moe;
    TraceArgs traces;
    std::string format = "text";
    std::string output;
    bool no_collectives = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "replay",
      "Replay a trace from its execution graph (CPU ops per thread, launches, stream order, cross-stream waits, host "
      "synchronisation, collectives across ranks) with the measured durations, and compare with the measured "
      "iterations and MoE layers");
  add_trace_args(cmd, opt->traces);
  add_moe_rules_option(cmd, opt->moe);
  add_format_option(cmd, opt->format, {"text", "json"});
  cmd->add_option("--output,-o", opt->output, "Write to this file instead of stdout");
  cmd->add_flag("--no-collectives", opt->no_collectives,
                "Do not join collectives across ranks: each keeps its measured duration");
  cmd->callback([opt] {
    const auto trace = load_traces(opt->traces, moe_rules_options(opt->moe));
    analyzer::ExecGraphOptions go;
    go.collectives = !opt->no_collectives;
    analyzer::ReplaySummary s;
    {
      Progress progress("replaying " + trace.run.path);
      progress.update("", 0.0);
      s = analyzer::replay(trace, go);
    }
    if (opt->format == "json") {
      write_output(opt->output,
                   analyzer::replay_json(trace, s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } else {
      std::ostringstream out;
      analyzer::write_replay_text(out, trace, s);
      write_output(opt->output, out.str());
    }
  });
}

}  // namespace moetrace::cli
