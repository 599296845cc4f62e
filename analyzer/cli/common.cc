#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/importers/import.h"
#include "moetrace/schema/error.h"

namespace moetrace::cli {

Progress::Progress(std::string what) : what_(std::move(what)), tty_(isatty(STDERR_FILENO) != 0) {}

Progress::~Progress() {
  if (tty_ && last_percent_ >= 0) std::fprintf(stderr, "\r\033[K");
}

void Progress::update(std::string_view stage, double fraction) {
  if (!tty_) return;
  const int percent = static_cast<int>(fraction * 100.0);
  if (percent == last_percent_) return;
  last_percent_ = percent;
  std::fprintf(stderr, "\r\033[K%s: %.*s %d%%", what_.c_str(), static_cast<int>(stage.size()),
               stage.data(), percent);
  std::fflush(stderr);
}

analyzer::Trace load_with_progress(const std::string& path, analyzer::LoadOptions options) {
  analyzer::Trace trace;
  {
    Progress progress("loading " + path);
    if (progress.shown()) options.progress = progress.callback();
    trace = analyzer::load_trace(path, options);
  }
  if (const auto w = analyzer::integrity_warning(trace.run); !w.empty())
    std::cerr << "moetrace: warning: " << path << ": " << w << "\n";
  return trace;
}

void add_trace_args(CLI::App* cmd, TraceArgs& args) {
  cmd->add_option("traces", args.paths,
                  "Trace database(s) (.db): several files, a directory or a quoted glob (\"run.rank*.db\") are the "
                  "ranks of one run; a PyTorch-profiler JSON or Nsight Systems SQLite file is read by its importer "
                  "(`moetrace import` keeps it as a trace file)")
      ->required();
  cmd->add_flag("--no-align", args.no_align,
                "Several rank files: keep each rank's clock as recorded (default: aligned from the collectives)");
  cmd->add_option("--threads", args.threads,
                  "Threads for reading rank files and running the analyses (default 0: the machine's cores; 1: "
                  "one after the other, least memory)")
      ->check(CLI::Range(0, 4096));
}

namespace {

// The traces of other tools this process imported; removed at exit.
importers::TemporaryTraces& temporary_traces() {
  static importers::TemporaryTraces traces;
  return traces;
}
std::string input_name(const std::string& path) { return temporary_traces().input_of(path); }

}  // namespace

std::string imported_from(const std::string& path) { return input_name(path); }

std::vector<std::string> foreign_inputs_imported(const std::vector<std::string>& paths) {
  importers::ImportOptions options;
  Progress progress("importing");
  if (progress.shown()) options.progress = progress.callback();
  return temporary_traces().import_foreign(paths, options);
}

namespace {

void print_run_warnings(analyzer::Trace& trace) {
  if (!temporary_traces().empty()) analyzer::rename_trace_files(trace, input_name);
  if (!trace.files) return;
  // Each file's own warnings, named (one file: load_with_progress says them).
  for (const auto& w : analyzer::run_warnings(trace.run)) std::cerr << "moetrace: warning: " << w << "\n";
  for (const auto& w : trace.files->warnings()) std::cerr << "moetrace: warning: " << w << "\n";
}

// Files already expanded and imported (load_traces' second half).
analyzer::Trace load_paths(const std::vector<std::string>& paths, analyzer::LoadOptions options, bool align,
                           int threads) {
  analyzer::Trace trace;
  if (paths.size() == 1) {
    trace = load_with_progress(paths.front(), std::move(options));
  } else {
    analyzer::RunLoadOptions ro;
    ro.load = std::move(options);
    ro.align = align;
    ro.threads = threads;
    Progress progress(fmt::format("loading {} files", paths.size()));
    ro.progress = progress.callback();
    trace = analyzer::load_run(paths, ro);
  }
  print_run_warnings(trace);
  return trace;
}

}  // namespace

analyzer::Analyses analyze_with_progress(const analyzer::Trace& trace, const analyzer::BreakdownOptions& breakdown,
                                         int threads) {
  Progress progress("analyzing " + trace.run.path);
  return analyzer::analyze(trace, progress.callback(), breakdown, threads);
}

analyzer::RunAnalysis analyze_traces(const TraceArgs& args, analyzer::LoadOptions options,
                                     const analyzer::BreakdownOptions& breakdown, RunReading reading,
                                     const analyzer::KernelSequenceOptions& sequences) {
  // Traces of other tools are read by their importers straight into memory
  // (load_trace), one at a time too: each pass over the files parses them
  // again, which takes less time than writing and reading temporary trace
  // files, and no disk.
  const auto paths = analyzer::expand_trace_paths(args.paths);
  // The choice follows the files alone (never the memory free at the
  // moment), so the same files always give a report with the same sections.
  if (paths.size() > 1 && reading == RunReading::kAuto) {
    const auto need = analyzer::estimated_merged_bytes(paths);
    if (need > analyzer::kMergedMemoryBudgetBytes) {
      reading = RunReading::kByFile;
      std::cerr << fmt::format(
          "moetrace: {} files would take about {} in memory together, more than the {} a report reads together: "
          "analysing them one at a time (--merged reads them together)\n",
          paths.size(), analyzer::format_bytes(need), analyzer::format_bytes(analyzer::kMergedMemoryBudgetBytes));
    }
  }
  if (paths.size() < 2 || reading != RunReading::kByFile) {
    analyzer::RunAnalysis out;
    out.trace = load_paths(paths, std::move(options), !args.no_align, args.threads);
    out.analyses = analyze_with_progress(out.trace, breakdown, args.threads);
    return out;
  }
  analyzer::RunLoadOptions ro;
  ro.load = std::move(options);
  ro.align = !args.no_align;
  ro.threads = args.threads;
  analyzer::RunAnalysis out;
  {
    Progress progress(fmt::format("analysing {} files one at a time", paths.size()));
    ro.progress = progress.callback();
    out = analyzer::analyze_run_by_file(paths, ro, breakdown, analyzer::kMaxCostSamples, sequences);
  }
  print_run_warnings(out.trace);
  if (!out.analyses.fits_not_computed_reason.empty())
    std::cerr << "moetrace: warning: the fitted models are not computed: " << out.analyses.fits_not_computed_reason
              << "\n";
  return out;
}

analyzer::RunOverview overview_traces(const std::vector<std::string>& paths, const TraceArgs& args) {
  // Traces of other tools among them are read into memory, file by file.
  analyzer::RunLoadOptions ro;
  ro.align = !args.no_align;
  ro.threads = args.threads;
  analyzer::RunOverview out;
  {
    Progress progress(fmt::format("reading {} files", paths.size()));
    ro.progress = progress.callback();
    out = analyzer::overview_run(paths, ro);
  }
  print_run_warnings(out.trace);
  return out;
}

analyzer::Trace load_traces(const std::vector<std::string>& args, analyzer::LoadOptions options, bool align,
                            int threads) {
  return load_paths(analyzer::expand_trace_paths(args), std::move(options), align, threads);
}

void add_moe_rules_option(CLI::App* cmd, MoeArgs& args) {
  auto* rules = cmd->add_option("--moe-rules", args.rules,
                                "MoE recognition rules (JSON, schemas/moe_rules.schema.json) for traces of other "
                                "tools, tried before the built-in framework presets; see docs/annotations.md");
  cmd->add_flag("--no-moe-recognition", args.off,
                "Read a trace of another tool as it is: no op ranges derived from annotations, framework ranges "
                "or kernel names")
      ->excludes(rules);
}

void add_trace_input(CLI::App* cmd, TraceInput& in) {
  add_trace_args(cmd, in.traces);
  add_moe_rules_option(cmd, in.moe);
}

void add_document_args(CLI::App* cmd, DocumentArgs& args, std::initializer_list<std::string> formats,
                       const std::string& output_help) {
  add_trace_input(cmd, args.input);
  add_format_option(cmd, args.format, formats);
  cmd->add_option("--output,-o", args.output, output_help);
}

analyzer::LoadOptions moe_rules_options(const MoeArgs& args) {
  analyzer::LoadOptions o;
  o.moe_rules = args.rules;
  o.recognize = !args.off;
  return o;
}

void write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    std::cout.flush();
    return;
  }
  write_atomically(path, [&](std::ostream& out) { out << text; });
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void write_atomically(const std::string& path, const std::function<void(const std::string& temp)>& write) {
  const std::string temp = path + ".partial";
  try {
    write(temp);
  } catch (...) {
    std::remove(temp.c_str());
    throw;
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    throw Error(path + ": cannot write the file");
  }
}

void write_atomically(const std::string& path, const std::function<void(std::ostream& out)>& write) {
  write_atomically(path, [&](const std::string& temp) {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path + ": cannot open for writing");
    write(out);
    out.close();
    if (!out) throw Error(path + ": write failed (disk full?)");
  });
}

CLI::Option* add_format_option(CLI::App* cmd, std::string& format,
                               std::initializer_list<std::string> allowed) {
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  return cmd->add_option("--format,-f", format, "Output format: " + list)
      ->check(CLI::IsMember(std::vector<std::string>(allowed)))
      ->capture_default_str();
}

}  // namespace moetrace::cli
