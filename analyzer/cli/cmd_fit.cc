// `moetrace fit TRACE`: performance models fitted from a trace (alpha/beta of
// computation, collectives and copies; interference factors), written as the
// cost-model JSON the simulator loads (schemas/cost_model.schema.json).
#include <memory>
#include <sstream>

#include "commands.h"
#include "moetrace/analyzer/cost_model.h"
#include "moetrace/analyzer/report.h"

namespace moetrace::cli {

void add_fit_command(CLI::App& app) {
  struct Options {
    std::string path;
    std::string format = "json";
    std::string output;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "fit", "Fit alpha/beta performance models and interference factors from a trace (cost-model JSON)");
  cmd->add_option("trace", opt->path, "Trace database (.db)")->required();
  add_format_option(cmd, opt->format, {"json", "text"});
  cmd->add_option("--output,-o", opt->output, "Write the models to this file instead of stdout");
  cmd->callback([opt] {
    const auto trace = load_with_progress(opt->path);
    analyzer::CostModel model;
    {
      Progress progress("fitting " + opt->path);
      progress.update("", 0.0);
      model = analyzer::fit_cost_model(trace);
    }
    if (opt->format == "json") {
      write_output(opt->output, analyzer::cost_model_json(trace, model).dump(2) + "\n");
      return;
    }
    std::ostringstream out;
    analyzer::write_fitted_models_text(out, model);
    write_output(opt->output, out.str());
  });
}

}  // namespace moetrace::cli
