// Subcommands of the `moetrace` CLI. Each adds itself to the app; its callback
// throws moetrace::Error for bad input, which main() prints as one line.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/run_by_file.h"
#include "moetrace/analyzer/trace.h"
#include "cost_model_arg.h"

namespace moetrace::cli {

void add_info_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_recommend_command(CLI::App& app);

void add_import_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_fit_command(CLI::App& app);
void add_diff_command(CLI::App& app);
void add_replay_command(CLI::App& app);

// Thrown by a command that ran fine but must exit non-zero (diff thresholds).
struct ExitStatus {
  int code;
};

// Progress for long work: a self-overwriting line on stderr when it is a
// terminal, nothing otherwise.
class Progress {
 public:
  explicit Progress(std::string what);
  ~Progress();
  void update(std::string_view stage, double fraction);
  // Whether it prints (stderr is a terminal); a loader given no callback
  // skips the work that only sizes the progress.
  bool shown() const { return tty_; }
  std::function<void(std::string_view, double)> callback() {
    return [this](std::string_view s, double f) { update(s, f); };
  }

 private:
  std::string what_;
  bool tty_;
  int last_percent_ = -1;
};

// Loads a trace with progress on a terminal.
analyzer::Trace load_with_progress(const std::string& path, analyzer::LoadOptions options = {});

// The traces a command reads: several files, directories or (quoted) glob
// patterns, read as one run (run_loader.h), and --no-align. A trace of
// another tool (Nsight Systems export, Kineto JSON) among them is read by its
// importer straight into memory (analyzer::load_trace).
//
// For the readers that need a trace file (`info`'s summary of one file,
// `recommend`'s grouping of runs):
// the paths with each trace of another tool replaced by a moetrace trace
// imported from it into a temporary file, removed when the process exits;
// moetrace traces and unreadable paths as they are (the loader names their
// problem).
std::vector<std::string> foreign_inputs_imported(const std::vector<std::string>& paths);
// The input a temporary trace of foreign_inputs_imported() was imported from;
// any other path as it is.
std::string imported_from(const std::string& path);

struct TraceArgs {
  std::vector<std::string> paths;
  bool no_align = false;
  int threads = 0;  // files loaded and analyses run at once; 0: the machine's cores
};
void add_trace_args(CLI::App* cmd, TraceArgs& args);
// Loads them with progress on a terminal; a run of several files prints its
// warnings (files left out, missing ranks, unaligned clocks) on stderr.
analyzer::Trace load_traces(const std::vector<std::string>& args, analyzer::LoadOptions options, bool align = true,
                            int threads = 0);
inline analyzer::Trace load_traces(const TraceArgs& args, analyzer::LoadOptions options) {
  return load_traces(args.paths, std::move(options), !args.no_align, args.threads);
}
// How `report` reads a run of several files: merged into memory, or one
// file at a time (run_by_file.h); kAuto: one at a time where the merged run
// would take more than half the memory available.
enum class RunReading { kAuto, kMerged, kByFile };
// The traces and their analyses (analyze(), or analyze_run_by_file() where
// `reading` says so, its kernel sequences found with `sequences`), with
// progress and the run's warnings on stderr as load_traces prints them.
analyzer::RunAnalysis analyze_traces(const TraceArgs& args, analyzer::LoadOptions options,
                                     const analyzer::BreakdownOptions& breakdown, RunReading reading,
                                     const analyzer::KernelSequenceOptions& sequences = {});
// The run of several files (already expanded) as `info` shows it:
// overview_run(), with progress and the run's warnings on stderr as
// load_traces prints them.
analyzer::RunOverview overview_traces(const std::vector<std::string>& paths, const TraceArgs& args);
void add_merge_command(CLI::App& app);

// --moe-rules FILE and --no-moe-recognition of the commands that read traces
// (MoE recognition of traces of other tools, moe_recognition.h), and the load
// options they give.
struct MoeArgs {
  std::string rules;
  bool off = false;
};
void add_moe_rules_option(CLI::App* cmd, MoeArgs& args);
analyzer::LoadOptions moe_rules_options(const MoeArgs& args);

// --model FILE and --tokens N of the commands that advise or predict from a
// trace (recommend, replay): the model's shapes and the tokens a rank holds
// where the trace lacks them (recommend.h WorkloadSources).
struct ModelShapeArgs {
  std::string model;
  std::int64_t tokens = -1;
  std::shared_ptr<const analyzer::ModelSpec> spec;  // read by apply_model_shape_args
};
void add_model_shape_options(CLI::App* cmd, ModelShapeArgs& args);
// Reads --model (its errors are the user's: ConfigError) and points
// `options` at it; `args` must outlive `options`' use.
void apply_model_shape_args(ModelShapeArgs& args, analyzer::RecommendOptions& options);

// The run a command reads: its trace files and the MoE rules to read them
// with (add_trace_args, then add_moe_rules_option).
struct TraceInput {
  TraceArgs traces;
  MoeArgs moe;
};
void add_trace_input(CLI::App* cmd, TraceInput& in);
inline analyzer::Trace load_traces(const TraceInput& in) { return load_traces(in.traces, moe_rules_options(in.moe)); }

// What a command that reads one run and writes a document of it takes: the
// run, the document's --format and --output (stdout where empty). Commands
// derive their options from it.
struct DocumentArgs {
  TraceInput input;
  std::string format = "text";
  std::string output;
};
// add_trace_input, add_format_option with `formats`, and --output described
// by `output_help`.
void add_document_args(CLI::App* cmd, DocumentArgs& args, std::initializer_list<std::string> formats,
                       const std::string& output_help);

// Runs every analysis with progress on a terminal.
analyzer::Analyses analyze_with_progress(const analyzer::Trace& trace,
                                         const analyzer::BreakdownOptions& breakdown = {}, int threads = 0);
analyzer::ReportFormat parse_report_format(const std::string& format);

// Writes `text` to `path`, or to stdout where path is empty or "-".
void write_output(const std::string& path, const std::string& text);
// A JSON document as every command prints it: indented by two, bytes that are
// not UTF-8 replaced (names come from the trace as recorded), a final newline.
std::string json_text(const nlohmann::json& j);
// Writes `path` by `write(temp)` into a file beside it that is renamed into
// place at the end, so a failed write leaves neither a half file nor the temp.
void write_atomically(const std::string& path, const std::function<void(const std::string& temp)>& write);
// The same for a stream: `write(out)`, then checks that it reached the disk.
void write_atomically(const std::string& path, const std::function<void(std::ostream& out)>& write);

// Adds the common --format option; `allowed` lists the accepted values.
CLI::Option* add_format_option(CLI::App* cmd, std::string& format,
                               std::initializer_list<std::string> allowed);

}  // namespace moetrace::cli
