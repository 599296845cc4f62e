// `moetrace diff BASE NEW`: two traces compared per metric, layer and op
// kind; --fail-if thresholds make it a CI gate (exit status 4 and one line
// per violated threshold on stderr).
#include <iostream>
#include <memory>
#include <sstream>

#include "commands.h"
#include "moetrace/analyzer/diff.h"
#include "moetrace/schema/error.h"

namespace moetrace::cli {

namespace {

constexpr const char* kMetricsHelp = R"(
Metrics (see docs/cli.md and analyzer/analyses/include/moetrace/analyzer/diff.h):
  iteration_time moe_time moe_share a2a_share allreduce_share
  a2a_share_of_iteration allreduce_share_of_iteration expert_share gating_share
  idle_share hidden_fraction exposed_comm_time peak_memory bubble bubble_fraction
  balance_degree balance_degree_home rb expert_max_over_mean device_max_over_mean
  expert_cv imbalance_time locality_cosine prediction_error
  run_time run_a2a_share run_allreduce_share run_comm_share run_expert_share
  run_idle_share run_hidden_fraction   (whole run; also traces without op ranges)
  layerL.{time,a2a_share,allreduce_share,expert_share,gating_share,idle_share,
          hidden_fraction,balance_degree,expert_max_over_mean,device_max_over_mean,
          imbalance_time,locality_cosine,bubble,activation_memory}
  op.KIND.{time,total,count}   (KIND: an op kind, e.g. dispatch_all_to_all)
Thresholds: METRIC OP VALUE with OP in > >= < <=. A signed VALUE bounds the
change from BASE: +5% relative, +2pp percentage points, +100us / +1GiB / +0.05
absolute. An unsigned VALUE bounds NEW itself: 40%, 70GiB, 2ms, 1.3.
Exit status: 0 within every threshold, 4 if any is violated (or cannot be
evaluated), 1 for a bad trace, 2 for a usage error.)";

}  // namespace

void add_diff_command(CLI::App& app) {
  struct Options {
    MoeArgs moe;
    std::string base, next;
    std::string format = "text";
    std::string output;
    std::vector<std::string> fail_if;
    bool all = false;
    bool no_align = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("diff", "Compare two traces per layer and op kind; gate CI with thresholds");
  cmd->footer(kMetricsHelp);
  cmd->add_option("base", opt->base, "Baseline trace (.db), or a directory or quoted glob of its rank files")
      ->required();
  add_moe_rules_option(cmd, opt->moe);
  cmd->add_option("new", opt->next, "New trace (.db), or a directory or quoted glob of its rank files")->required();
  cmd->add_flag("--no-align", opt->no_align,
                "Rank files: keep each rank's clock as recorded (default: aligned from the collectives)");
  add_format_option(cmd, opt->format, {"text", "json"});
  cmd->add_option("--output,-o", opt->output, "Write the comparison to this file instead of stdout");
  cmd->add_option("--fail-if", opt->fail_if,
                  "Threshold, e.g. \"a2a_share > +5%\"; may be given several times")
      ->check([](const std::string& expr) -> std::string {
        try {
          analyzer::parse_threshold(expr);
          return {};
        } catch (const Error& e) {
          return e.what();
        }
      });
  cmd->add_flag("--all", opt->all, "Also list metrics that did not change (text)");
  cmd->callback([opt] {
    std::vector<analyzer::Threshold> thresholds;
    for (const auto& e : opt->fail_if) thresholds.push_back(analyzer::parse_threshold(e));
    const auto base = load_traces({opt->base}, moe_rules_options(opt->moe), !opt->no_align);
    const auto base_analyses = analyze_with_progress(base);
    const auto next = load_traces({opt->next}, moe_rules_options(opt->moe), !opt->no_align);
    const auto next_analyses = analyze_with_progress(next);
    const auto d = analyzer::diff_traces(base, base_analyses, next, next_analyses, thresholds);
    if (opt->format == "json") {
      write_output(opt->output, json_text(analyzer::diff_json(d)));
    } else {
      std::ostringstream out;
      analyzer::write_diff_text(out, d, opt->all);
      write_output(opt->output, out.str());
    }
    if (d.violations() > 0) {
      for (const auto& t : d.thresholds)
        if (t.violated) std::cerr << "moetrace: threshold violated: " << t.message << "\n";
      throw ExitStatus{4};
    }
  });
}

}  // namespace moetrace::cli
