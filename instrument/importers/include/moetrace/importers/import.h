// Importers: traces recorded by other tools, converted into one moetrace trace
// (schemas/trace_schema_v2.sql) so that every analysis, report and the GUI
// work on them. Each format is a folder (nsys/, kineto/) that parses its files
// and hands records to one shared TraceBuilder (common/), which owns ranks,
// devices, streams and their roles, and writes through instrument::TraceWriter.
//
// What each importer maps and drops is documented in README.md ("Importing
// traces from other tools") and in the run_config keys it writes
// (schemas/README.md, "import.*").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moetrace::importers {

enum class Format { kAuto, kNsys, kKineto };

std::string_view format_name(Format f);  // "auto", "nsys", "kineto"
std::optional<Format> parse_format(std::string_view name);

// The format of one input file, from its first bytes: an Nsight Systems SQLite
// export, or Chrome-trace JSON from the PyTorch profiler (Kineto), plain or
// gzipped. Throws moetrace::Error("<path>: <problem>") for a missing file, a
// moetrace trace, an .nsys-rep report, or anything else.
Format detect_format(const std::string& path);

struct ImportOptions {
  Format format = Format::kAuto;  // kAuto: detect_format() on each file
  // Threads that parse a Kineto file (besides the one reading it); 0: the
  // machine's cores, at most 4. The records are the same for any number.
  int threads = 0;
  // Stage name and fraction done in [0, 1]; called from one thread at a time
  // (not always the same one).
  std::function<void(std::string_view stage, double fraction)> progress;
};

struct ImportSummary {
  std::string output;
  Format format = Format::kAuto;
  int ranks = 0;
  int world_size = 0;
  std::map<std::string, std::int64_t> rows;     // rows written per trace table
  std::map<std::string, std::int64_t> skipped;  // source records dropped, by reason (import.skipped.*)
};

// Imports `inputs` (all of one format; several files are several ranks of one
// run, put on one clock) into a new trace at `output`, replacing it. The trace
// appears only when the import succeeded. Throws moetrace::Error with one line
// naming the file and the problem on bad input.
ImportSummary import_traces(const std::vector<std::string>& inputs, const std::string& output,
                            const ImportOptions& options = {});

// Traces of other tools given where moetrace traces are read (`report
// trace.json.gz`, moetrace.open("prof/")): each is imported into a
// temporary trace, removed when this object goes.
class TemporaryTraces {
 public:
  TemporaryTraces() = default;
  ~TemporaryTraces();
  TemporaryTraces(const TemporaryTraces&) = delete;
  TemporaryTraces& operator=(const TemporaryTraces&) = delete;

  // `paths` with each Nsight Systems export and Kineto JSON file replaced by
  // a trace imported from it (options.format is detected per file);
  // moetrace traces and paths that are neither (missing files, other SQLite
  // files) as they are, for the loader to name their problem. Throws
  // moetrace::Error like import_traces().
  std::vector<std::string> import_foreign(const std::vector<std::string>& paths, ImportOptions options = {});
  // The input a temporary trace was imported from; other paths as they are.
  std::string input_of(const std::string& path) const;
  bool empty() const { return input_of_.empty(); }

 private:
  std::map<std::string, std::string> input_of_;  // temporary trace -> input
};

}  // namespace moetrace::importers
