// A run recorded as several trace files (one per rank from NCCL runs, one per
// rank or host from imports) read as one run. Each file is loaded by
// load_trace() (trace.h), in parallel; the files are checked to belong to
// one run, their ranks identified, duplicates and gaps found, and the parts
// merged into one Trace whose ranks' clocks are aligned from the
// collectives (clock_align.h) before any analysis sees them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moetrace/analyzer/clock_align.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// What a run of several files was made of (Trace::files; null for a trace
// read from one file).
struct RunFiles {
  struct File {
    std::string path;
    std::vector<std::int32_t> ranks;  // the ranks it holds
  };
  std::vector<File> files;  // analysed, in rank order
  // Files given but not analysed, with why (one line each): missing or
  // damaged files, and files whose ranks an earlier file already holds.
  std::vector<std::pair<std::string, std::string>> left_out;
  std::vector<std::int32_t> duplicate_ranks;  // held by more than one file
  std::vector<std::int32_t> missing_ranks;    // of 0 .. world_size - 1, in no analysed file
  int world_size = 0;
  bool align_requested = true;  // false: --no-align
  ClockAlignment clocks;        // estimated whether applied or not
  // Analysed one file at a time (run_by_file.h): what needs every rank's
  // events at once is not computed.
  bool by_file = false;
  bool aligned() const { return clocks.applied; }
  // The warnings a command prints on stderr, one line each (without the
  // "moetrace: warning: " prefix).
  std::vector<std::string> warnings() const;
};

struct RunLoadOptions {
  LoadOptions load;    // for each file; its progress callback is not used
  bool align = true;   // apply the clock alignment (it is estimated either way)
  int threads = 0;     // files loaded at once; 0: the machine's cores
  // Files done over files given; called from the calling thread.
  std::function<void(std::string_view stage, double fraction)> progress;
};

// A file name of a trace of another tool that the importers read (Kineto
// .json/.json.gz, Nsight Systems .sqlite): what a folder stands for where no
// moetrace trace is in it.
bool other_tool_trace_name(std::string_view name);

// Renames the files a trace was read from (run.path, the files of a run
// and those left out) by `name_of` (e.g. a temporary trace by the input it
// was imported from).
void rename_trace_files(Trace& trace, const std::function<std::string(const std::string&)>& name_of);

// The trace files named by command-line arguments: a file as it is; a
// directory: its *.db files, else its *.json, *.json.gz and *.sqlite files
// (traces of other tools, which the commands import first; a directory
// without any stays as it is, for the loader to refuse); a glob pattern (quoted, so the shell left it):
// its matches. Files of a directory or pattern come in natural order
// (run.rank2.db before run.rank10.db). Throws moetrace::Error naming an
// argument that matches nothing.
std::vector<std::string> expand_trace_paths(const std::vector<std::string>& args);

// The files split into runs, for commands that take several runs
// (`recommend`): consecutive files of one run (same run id, or backend,
// variant, world size and configuration) are one group. A file that cannot
// be read joins the group before it (load_run names it).
std::vector<std::vector<std::string>> group_runs(const std::vector<std::string>& paths);

// One file: load_trace() exactly (Trace::files stays null). Several: the
// run described above. Throws moetrace::Error with one line: the first
// file's problem where no file could be loaded; "<file>: a rank of another
// run (...)" where the files hold more than one run.
Trace load_run(const std::vector<std::string>& paths, const RunLoadOptions& options = {});

// The union of traces of disjoint ranks, as if one file had held them:
// strings, devices, streams, op and buffer ids renumbered where they clash,
// every table concatenated in its loader order. Consumes `parts`.
Trace merge_traces(std::vector<Trace> parts);

// "0-3, 7, 9-12": ranks (sorted) as ranges.
std::string rank_ranges(const std::vector<std::int32_t>& ranks);

// "a.db ... z.db (N files)": how a report names a run of several files.
std::string describe_paths(const std::vector<std::string>& paths);

}  // namespace moetrace::analyzer
