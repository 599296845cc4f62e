// `moetrace merge RANK_FILES... -o RUN.db`: the rank files of one run (files,
// a directory or a quoted glob) into one trace, on one clock (aligned from
// the collectives unless --no-align), which every command then reads as an
// ordinary trace.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/schema/error.h"
#include "trace_files.h"

namespace moetrace::cli {

void add_merge_command(CLI::App& app) {
  struct Options {
    TraceArgs traces;
    std::string output;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "merge", "Write the rank files of one run (files, a directory or a quoted glob) as one trace");
  add_trace_args(cmd, opt->traces);
  cmd->add_option("--output,-o", opt->output, "Trace database to write (replaced if it exists)")->required();
  cmd->callback([opt] {
    const auto paths = analyzer::expand_trace_paths(opt->traces.paths);
    for (const auto& p : paths) {
      std::error_code ec;
      if (std::filesystem::equivalent(p, opt->output, ec))
        throw Error(opt->output + ": the output would overwrite an input");
    }
    // As recorded: no MoE recognition, no projection (a reader does both).
    analyzer::LoadOptions lo;
    lo.recognize = false;
    lo.project = false;
    const auto trace = load_traces(paths, lo, !opt->traces.no_align);
    ConfigEntries extra{{"merge.files", std::to_string(trace.files ? trace.files->files.size() : 1)}};
    if (trace.files) extra.emplace_back("merge.clocks_aligned", trace.files->aligned() ? "1" : "0");
    write_atomically(opt->output, [&](const std::string& temp) { TraceFiles(trace).write(temp, {}, extra); });
    std::cerr << fmt::format("merged {} file{} ({} ranks, {} events) into {}\n", paths.size(),
                             paths.size() == 1 ? "" : "s", trace.rank_ids().size(), trace.event_count(), opt->output);
  });
}

}  // namespace moetrace::cli
