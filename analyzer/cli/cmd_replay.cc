// `moetrace replay TRACE`: the trace replayed from its execution graph with
// the measured durations (exec_graph.h, replay.h), per rank and iteration and
// per MoE layer, measured against replayed.
#include <memory>
#include <sstream>

#include "commands.h"
#include "moetrace/analyzer/graph_whatif.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/replay.h"

namespace moetrace::cli {

void add_replay_command(CLI::App& app) {
  struct Options : DocumentArgs {
    bool no_collectives = false;
    std::vector<std::string> what_ifs;
    std::string cost_model;
    ModelShapeArgs shape;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "replay",
      "Replay a trace from its execution graph (CPU ops per thread, launches, stream order, cross-stream waits, host "
      "synchronisation, collectives across ranks) with the measured durations, and compare with the measured "
      "iterations and MoE layers");
  add_document_args(cmd, *opt, {"text", "json"}, "Write to this file instead of stdout");
  cmd->add_flag("--no-collectives", opt->no_collectives,
                "Do not join collectives across ranks: each keeps its measured duration");
  cmd->add_option("--what-if", opt->what_ifs,
                  "Change the graph and predict (repeatable): pipeline_degree=R (split each MoE layer's dispatch, "
                  "experts and combine into R pipelined chunks, as PipeMoE does), reuse=S1|S2|S3|S4 (add MPipeMoE's "
                  "offload, prefetch, re-communicate and recompute work), placement=pro-prophet (Pro-Prophet's "
                  "planner on the measured load), overlap=off (run layer instances that ran "
                  "side by side one after the other)")
      ->type_name("KEY=VALUE");
  cmd->add_option("--cost-model", opt->cost_model,
                  "Where a what-if's new durations come from where the trace cannot fit them: a cost-model JSON "
                  "file (moetrace fit of a calibration run), a simulator preset, or 'fitted' (default: the trace's "
                  "own fit where it has the op at several sizes, else the h100-nvlink-ib preset)");
  add_model_shape_options(cmd, opt->shape);
  cmd->callback([opt] {
    analyzer::GraphWhatIfs w;
    for (const auto& kv : opt->what_ifs) analyzer::parse_graph_what_if(kv, w);
    analyzer::RecommendOptions ro;
    apply_cost_model_arg(opt->cost_model, ro);
    apply_model_shape_args(opt->shape, ro);
    const auto trace = load_traces(opt->input);
    analyzer::ExecGraphOptions go;
    go.collectives = !opt->no_collectives;
    analyzer::ReplayWithWhatIfs r;
    {
      Progress progress("replaying " + trace.run.path);
      progress.update("", 0.0);
      r = analyzer::replay_with_what_ifs(trace, w, ro, go);
    }
    std::vector<std::string> lines = r.what_ifs.applied;
    for (const auto& n : r.what_ifs.notes) lines.push_back(n);
    if (opt->format == "json") {
      auto j = analyzer::replay_json(trace, r.summary, r.what_ifs.applied);
      j["what_if_notes"] = r.what_ifs.notes;
      write_output(opt->output, json_text(j));
    } else {
      std::ostringstream out;
      analyzer::write_replay_text(out, trace, r.summary, lines);
      write_output(opt->output, out.str());
    }
  });
}

}  // namespace moetrace::cli
