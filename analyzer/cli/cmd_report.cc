// `moetrace report TRACE`: every analysis of a trace (breakdown, memory,
// expert load, locality, HTA's analyses, efficiency, fitted models,
// recommendations) as text, JSON, Markdown or HTML.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>

#include "commands.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/schema/error.h"

namespace moetrace::cli {

namespace {

// --critical-path-step: each rank's path over its Nth profiler step
// (critical_path.h, "Window"), in place of the whole trace's.
void critical_path_of_step(const analyzer::Trace& trace, analyzer::Analyses& a, std::int32_t step) {
  if (trace.files && trace.files->by_file)
    throw Error("--critical-path-step needs the rank files read together (--merged): read one at a time, their "
                "events are gone once analysed");
  analyzer::CriticalPathOptions o;
  o.annotation = "ProfilerStep";
  o.instance_first = o.instance_last = step;
  o.threads = 0;
  a.critical_path = analyzer::critical_paths(trace, o);
  a.critical_path_window = fmt::format("profiler step {} (the ProfilerStep range of that rank, counted from 0)", step);
}

// --kernel-sequences-*: HTA's frequent kernel sequences with other options
// than analyze()'s defaults (kernel_sequences.h), in the report's window.
// (Where the files were read one at a time, the rank's file found them.)
void kernel_sequences_of(const analyzer::Trace& trace, analyzer::Analyses& a, analyzer::KernelSequenceOptions o) {
  if (trace.files && trace.files->by_file) return;
  o.window = a.kernel_sequences.options.window;
  a.kernel_sequences = analyzer::frequent_kernel_sequences(trace, o);
}

}  // namespace

analyzer::ReportFormat parse_report_format(const std::string& f) {
  if (f == "json") return analyzer::ReportFormat::kJson;
  if (f == "markdown" || f == "md") return analyzer::ReportFormat::kMarkdown;
  if (f == "html") return analyzer::ReportFormat::kHtml;
  return analyzer::ReportFormat::kText;
}

void add_report_command(CLI::App& app) {
  struct Options : DocumentArgs {
    bool per_rank = false;
    bool per_iteration = false;
    bool no_recommendations = false;
    std::string cost_model;
    std::string window = "span";
    bool by_file = false, merged = false;
    std::optional<std::int32_t> critical_path_step;
    analyzer::KernelSequenceOptions sequences;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "report",
      "Where the time goes per MoE layer, iteration, rank and phase; memory and memory bubbles; expert "
      "load imbalance and locality; fitted performance models; per-layer recommendations");
  add_document_args(cmd, *opt, {"text", "json", "markdown", "html"}, "Write the report to this file instead of stdout");
  cmd->add_flag("--per-rank", opt->per_rank, "Also list every rank x layer x iteration x phase");
  cmd->add_flag("--per-iteration", opt->per_iteration,
                "Also list every rank x iteration, and expert load and locality per iteration");
  cmd->add_flag("--no-recommendations", opt->no_recommendations,
                "Leave out the recommendations (they simulate what-ifs; see `moetrace recommend`)");
  cmd->add_option("--cost-model", opt->cost_model,
                  "Hardware model of the recommendations: a simulator preset, a cost-model JSON file, or "
                  "\"fitted\" (default: see `moetrace recommend --help`)");
  cmd->add_option("--window", opt->window,
                  "Window of the per-rank rows: span (each rank's whole GPU span), steps (the GPU work of the "
                  "profiler steps, i.e. iterations), steps-but-last (without the last step: HTA's default, to "
                  "compare with its temporal breakdown and overlap), hta (HTA's default exactly: steps-but-last on "
                  "ranks with two or more ProfilerSteps, span elsewhere)")
      ->check(CLI::IsMember({"span", "steps", "steps-but-last", "hta"}))
      ->capture_default_str();
  cmd->add_option("--critical-path-step", opt->critical_path_step,
                  "Critical path of one profiler step per rank (the Nth ProfilerStep range, from 0) instead of the "
                  "whole trace, as HTA's critical_path_analysis(annotation=\"ProfilerStep\", instance_id=N)")
      ->check(CLI::NonNegativeNumber);
  const std::vector<CLI::Option*> sequence_options = {
      cmd->add_option("--kernel-sequences-op", opt->sequences.operator_name,
                      "Frequent CUDA kernel sequences (HTA's get_frequent_cuda_kernel_sequences): the CPU ops whose "
                      "names contain this (case-sensitive), at the shallowest depth of the call stacks where any "
                      "does, and the GPU events each launches, by start")
          ->capture_default_str(),
      cmd->add_option("--kernel-sequences-min-len", opt->sequences.min_pattern_len,
                      "Kernel sequences: the fewest GPU events an op must launch to count (HTA's min_pattern_len)")
          ->check(CLI::Range(0, 1 << 30))
          ->capture_default_str(),
      cmd->add_option("--kernel-sequences-top-k", opt->sequences.top_k,
                      "Kernel sequences: the most frequent patterns listed (HTA's top_k); 0 lists every one")
          ->check(CLI::Range(0, 1 << 30))
          ->capture_default_str(),
      cmd->add_option("--kernel-sequences-rank", opt->sequences.rank,
                      "Kernel sequences: the rank whose ops are searched (default: 0 where the trace has it, else "
                      "its lowest rank; HTA's rank)")
          ->check(CLI::Range(0, 1 << 30))};
  auto* by_file = cmd->add_flag(
      "--by-file", opt->by_file,
      "Several rank files: analyse them one at a time, in memory bounded by the files read at once (--threads) "
      "rather than by the run; the critical path across ranks and the recommendations need every rank's events at "
      "once and are left out (default where the files are estimated to take more than 2 GiB read together: "
      "a bound on the files, not on the memory free, so the same files always give the same sections)");
  cmd->add_flag("--merged", opt->merged,
                "Several rank files: read them into memory together, whatever their size (default up to an estimated 2 GiB)")
      ->excludes(by_file);
  cmd->callback([opt, sequence_options] {
    analyzer::BreakdownOptions bo;
    bo.rank_window = *analyzer::parse_rank_window(opt->window);
    const auto reading = opt->by_file ? RunReading::kByFile : opt->merged ? RunReading::kMerged : RunReading::kAuto;
    auto [trace, analyses] =
        analyze_traces(opt->input.traces, moe_rules_options(opt->input.moe), bo, reading, opt->sequences);
    if (opt->critical_path_step) critical_path_of_step(trace, analyses, *opt->critical_path_step);
    if (std::any_of(sequence_options.begin(), sequence_options.end(), [](const CLI::Option* o) { return o->count() > 0; }))
      kernel_sequences_of(trace, analyses, opt->sequences);
    if (!opt->no_recommendations && !(trace.files && trace.files->by_file)) {
      analyzer::RecommendOptions ro;
      apply_cost_model_arg(opt->cost_model, ro);
      Progress progress("recommending " + trace.run.path);
      ro.progress = progress.callback();
      analyzer::add_recommendations(trace, analyses, ro);
    }
    analyzer::ReportOptions ro;
    ro.format = parse_report_format(opt->format);
    ro.per_rank = opt->per_rank;
    ro.per_iteration = opt->per_iteration;
    std::ostringstream out;
    analyzer::write_report(out, trace, analyses, ro);
    write_output(opt->output, out.str());
  });
}

}  // namespace moetrace::cli
