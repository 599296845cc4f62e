// `moetrace import FILE... -o OUT`: Nsight Systems SQLite exports or
// PyTorch-profiler (Kineto) JSON traces -> one moetrace trace.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/importers/import.h"
#include "moetrace/schema/error.h"

namespace moetrace::cli {

void add_import_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> inputs;
    std::string output;
    std::string format = "auto";
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "import",
      "Convert Nsight Systems SQLite exports or PyTorch-profiler (Kineto) JSON traces into a "
      "moetrace trace (several files: several ranks of one run)");
  cmd->add_option("inputs", opt->inputs, "Input files: .sqlite (nsys export) or .json/.json.gz (Kineto)")
      ->required();
  cmd->add_option("--output,-o", opt->output, "Trace database to write (replaced if it exists)")
      ->required();
  cmd->add_option("--format,-f", opt->format, "Input format: auto, nsys, kineto")
      ->check(CLI::IsMember({"auto", "nsys", "kineto"}))
      ->capture_default_str();
  cmd->callback([opt] {
    importers::ImportOptions options;
    options.format = *importers::parse_format(opt->format);
    Progress progress("importing");
    options.progress = progress.callback();
    const auto s = importers::import_traces(opt->inputs, opt->output, options);
    std::int64_t events = 0;
    std::string tables;
    for (const auto& [table, n] : s.rows) {
      events += n;
      tables += fmt::format("{}{} {}", tables.empty() ? "" : ", ", n, table);
    }
    std::int64_t skipped = 0;
    for (const auto& [reason, n] : s.skipped) skipped += n;
    std::cerr << fmt::format("imported {} {} file{} into {}: {} rank{}, {} events ({})", opt->inputs.size(),
                             importers::format_name(s.format), opt->inputs.size() == 1 ? "" : "s",
                             s.output, s.ranks, s.ranks == 1 ? "" : "s", events, tables);
    if (skipped > 0)
      std::cerr << fmt::format("; {} source records not imported (see `moetrace info`)", skipped);
    std::cerr << "\n";
    for (const auto& w : analyzer::unread_device_warnings(s.skipped)) std::cerr << "moetrace: warning: " << w << "\n";
  });
}

}  // namespace moetrace::cli
