// `moetrace fit TRACE`: performance models fitted from a trace (alpha/beta of
// computation, collectives and copies; interference factors). By default it
// writes the simulator's cost model (schemas/cost_model.schema.json: `moetrace
// run --backend sim --cost-model FILE` reads it); --format fits writes the
// fits with their goodness of fit (schemas/fitted_models.schema.json).
#include <memory>
#include <sstream>

#include "commands.h"
#include "moetrace/analyzer/cost_model.h"
#include "moetrace/analyzer/report.h"

namespace moetrace::cli {

void add_fit_command(CLI::App& app) {
  struct Options : DocumentArgs {
    std::string base;
  };
  auto opt = std::make_shared<Options>();
  opt->format = "sim";
  auto* cmd = app.add_subcommand(
      "fit", "Fit alpha/beta performance models and interference factors from a trace (simulator cost model)");
  add_trace_input(cmd, opt->input);
  cmd->add_option("--format,-f", opt->format,
                  "sim: the simulator's cost-model JSON; fits: every fit with R^2, residual RMS, points, "
                  "x range (JSON); text: the same for people")
      ->check(CLI::IsMember({"sim", "fits", "text"}))
      ->capture_default_str();
  cmd->add_option("--base", opt->base,
                  "Simulator preset the cost model starts from for what the trace did not measure "
                  "(default: the simulator's default preset)");
  cmd->add_option("--output,-o", opt->output, "Write the models to this file instead of stdout");
  cmd->callback([opt] {
    const auto trace = load_traces(opt->input);
    analyzer::CostModel model;
    {
      Progress progress("fitting " + trace.run.path);
      progress.update("", 0.0);
      model = analyzer::fit_cost_model(trace);
    }
    if (opt->format == "sim") {
      write_output(opt->output, json_text(analyzer::sim_cost_model_json(trace, model, opt->base)));
    } else if (opt->format == "fits") {
      write_output(opt->output, json_text(analyzer::fitted_models_json(trace, model)));
    } else {
      std::ostringstream out;
      analyzer::write_fitted_models_text(out, model);
      write_output(opt->output, out.str());
    }
  });
}

}  // namespace moetrace::cli
