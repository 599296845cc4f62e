// `moetrace export chrome TRACE -o OUT.json`: Chrome trace-event JSON that
// Perfetto and chrome://tracing open.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "moetrace/export/chrome_trace.h"
#include "moetrace/schema/error.h"

namespace moetrace::cli {

void add_export_command(CLI::App& app) {
  struct Options {
    TraceInput input;
    std::string output;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("export", "Write a trace in another tool's format");
  cmd->require_subcommand(1);
  auto* chrome = cmd->add_subcommand(
      "chrome", "Chrome trace-event JSON for Perfetto (ui.perfetto.dev) and chrome://tracing");
  add_trace_input(chrome, opt->input);
  chrome->add_option("--output,-o", opt->output, "JSON file to write (- for stdout)")->required();
  chrome->callback([opt] {
    const auto trace = load_traces(opt->input);
    exporters::ChromeExportStats stats;
    if (opt->output == "-") {
      stats = exporters::write_chrome_trace(trace, trace.run.path, std::cout);
      std::cout.flush();
    } else {
      write_atomically(opt->output,
                       [&](std::ostream& out) { stats = exporters::write_chrome_trace(trace, trace.run.path, out); });
    }
    std::cerr << fmt::format(
        "wrote {} slices ({} kernels/copies, {} ops, {} API calls, {} NVTX ranges), {} launch flows, "
        "{} memory counter events ({} allocations and frees as instants) to {}\n",
        stats.activity_slices + stats.op_slices + stats.api_slices + stats.nvtx_slices,
        stats.activity_slices, stats.op_slices, stats.api_slices, stats.nvtx_slices, stats.flows,
        stats.counter_events, stats.memory_instants, opt->output);
  });
}

}  // namespace moetrace::cli
