// `moetrace recommend TRACE [MORE...]`: per-MoE-layer advice (pipeline
// degree, memory-reuse strategy, expert placement, PPMoE layout) with its
// evidence and predicted gain (analyzer/recommend.h). Further traces of the
// same model at other granularities feed mpipemoe's range search.
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <sstream>

#include "commands.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/schema/error.h"

namespace moetrace::cli {

namespace {

std::vector<int> parse_int_list(const std::string& s, const char* what) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      std::size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 1) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("{} \"{}\" is not a list of positive integers (e.g. 1,2,4,8)", what, s));
    }
  }
  return out;
}

}  // namespace

void add_recommend_command(CLI::App& app) {
  struct Options {
    MoeArgs moe;
    std::vector<std::string> paths;
    std::string format = "text";
    std::string output, cost_model, r_candidates;
    ModelShapeArgs shape;
    std::int64_t memory_budget = -1;
    int r_max = 64, tensor_parallel = -1, max_sim_ranks = 256;
    double alpha = 0.25;
    bool no_simulate = false;
    bool no_align = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "recommend",
      "Advise per MoE layer: pipeline degree, memory-reuse strategy, expert placement, PPMoE layout");
  cmd->add_option("trace", opt->paths,
                  "Trace database (several rank files, a directory or a quoted glob of one run are that run); "
                  "further traces of the same model at other pipeline degrees or token counts feed mpipemoe's "
                  "range search")
      ->required();
  cmd->add_flag("--no-align", opt->no_align,
                "Several rank files: keep each rank's clock as recorded (default: aligned from the collectives)");
  add_format_option(cmd, opt->format, {"text", "json", "markdown"});
  add_moe_rules_option(cmd, opt->moe);
  cmd->add_option("--output,-o", opt->output, "Write to this file instead of stdout");
  cmd->add_option("--cost-model", opt->cost_model,
                  "Hardware model: a simulator preset name, a cost-model JSON file (e.g. from `moetrace fit`), or "
                  "\"fitted\" (fit it from the trace); default: the model a simulated trace ran with, else the "
                  "fit, else a preset");
  add_model_shape_options(cmd, opt->shape);
  cmd->add_option("--memory-budget", opt->memory_budget,
                  "Device memory budget in bytes (default: run_config memory_budget_bytes, else device memory)");
  cmd->add_option("--r-max", opt->r_max, "Largest pipeline degree considered")->capture_default_str();
  cmd->add_option("--r-candidates", opt->r_candidates, "Only these pipeline degrees, e.g. 1,2,4,8 (pipemoe's set)");
  cmd->add_option("--tensor-parallel", opt->tensor_parallel,
                  "Tensor-parallel size T of the PPMoE layout considered (default: GPUs per node, <= 8)");
  cmd->add_option("--alpha", opt->alpha, "pro-prophet's balance coefficient alpha (Eq. 7)")->capture_default_str();
  cmd->add_flag("--no-simulate", opt->no_simulate, "Closed forms only: no simulator what-ifs");
  cmd->add_option("--max-simulated-ranks", opt->max_sim_ranks, "No what-ifs above this many ranks")
      ->capture_default_str();
  cmd->callback([opt] {
    if (opt->r_max < 1) throw ConfigError(fmt::format("--r-max ({}) must be at least 1", opt->r_max));
    if (!(opt->alpha > 0)) throw ConfigError(fmt::format("--alpha ({}) must be positive", opt->alpha));
    analyzer::RecommendOptions ro;
    apply_cost_model_arg(opt->cost_model, ro);
    apply_model_shape_args(opt->shape, ro);
    ro.memory_budget_bytes = opt->memory_budget;
    ro.r_max = opt->r_max;
    if (!opt->r_candidates.empty()) ro.r_candidates = parse_int_list(opt->r_candidates, "--r-candidates");
    ro.tensor_parallel = opt->tensor_parallel;
    ro.simulate = !opt->no_simulate;
    ro.max_simulated_ranks = opt->max_sim_ranks;
    ro.pro_prophet_alpha = opt->alpha;
    std::vector<analyzer::Trace> traces;
    const auto runs = analyzer::group_runs(foreign_inputs_imported(analyzer::expand_trace_paths(opt->paths)));
    traces.reserve(runs.size());
    for (const auto& run : runs) traces.push_back(load_traces(run, moe_rules_options(opt->moe), !opt->no_align));
    for (std::size_t i = 1; i < traces.size(); ++i) ro.other_runs.push_back(&traces[i]);
    Progress progress("recommend " + traces.front().run.path);
    ro.progress = progress.callback();
    const auto analyses = analyzer::analyze(traces.front(), progress.callback());
    const auto rec = analyzer::recommend(traces.front(), analyses, ro);
    std::ostringstream out;
    if (opt->format == "json") out << json_text(analyzer::recommendations_to_json(rec));
    else if (opt->format == "markdown") analyzer::write_recommendations_markdown(out, rec);
    else analyzer::write_recommendations_text(out, rec);
    write_output(opt->output, out.str());
  });
}

}  // namespace moetrace::cli
