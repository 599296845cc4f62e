// `moetrace report TRACE`: the MoE breakdown of a trace.
#include <memory>
#include <sstream>

#include "commands.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/report.h"

namespace moetrace::cli {

void add_report_command(CLI::App& app) {
  struct Options {
    std::string path;
    std::string format = "text";
    std::string output;
    bool per_rank = false;
    bool per_iteration = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "report", "Break down where the time goes per MoE layer, iteration, rank and phase");
  cmd->add_option("trace", opt->path, "Trace database (.db)")->required();
  add_format_option(cmd, opt->format, {"text", "json"});
  cmd->add_option("--output,-o", opt->output, "Write the report to this file instead of stdout");
  cmd->add_flag("--per-rank", opt->per_rank, "Also list every rank x layer x iteration x phase");
  cmd->add_flag("--per-iteration", opt->per_iteration, "Also list every rank x iteration");
  cmd->callback([opt] {
    const auto trace = load_with_progress(opt->path);
    const auto breakdown = analyzer::compute_breakdown(trace);
    analyzer::ReportOptions ro;
    ro.per_rank = opt->per_rank;
    ro.per_iteration = opt->per_iteration;
    if (opt->format == "json") {
      write_output(opt->output, analyzer::report_json(trace, breakdown, ro).dump(2) + "\n");
    } else {
      std::ostringstream out;
      analyzer::write_text_report(out, trace, breakdown, ro);
      write_output(opt->output, out.str());
    }
  });
}

}  // namespace moetrace::cli
