// `moetrace info TRACE`: what a trace holds, without analysing it.
#include <fmt/format.h>

#include <ctime>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moetrace/analyzer/report.h"

namespace moetrace::cli {

void add_info_command(CLI::App& app) {
  struct Options {
    std::string path;
    std::string format = "text";
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("info", "Show what a trace holds: run, ranks, tables, dropped records");
  cmd->add_option("trace", opt->path, "Trace database (.db)")->required();
  add_format_option(cmd, opt->format, {"text", "json"});
  cmd->callback([opt] {
    const auto s = analyzer::summarize_trace(opt->path);
    if (opt->format == "json") {
      nlohmann::json tables = nlohmann::json::object();
      for (const auto& [t, n] : s.table_rows) tables[t] = n;
      nlohmann::json j = {{"run", analyzer::run_json(s.run)},
                          {"ranks", s.ranks},
                          {"streams", s.streams},
                          {"layers", s.layers},
                          {"iterations", s.iterations},
                          {"tables", tables}};
      write_output("", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
      return;
    }
    const auto& r = s.run;
    std::string out;
    out += fmt::format("trace:      {}\n", r.path);
    out += fmt::format("run:        {}\n", r.name.empty() ? "(unnamed)" : r.name);
    out += fmt::format("backend:    {}{}\n", r.backend, r.simulated ? " (simulated)" : "");
    out += fmt::format("variant:    {}\n", r.variant.empty() ? "-" : r.variant);
    out += fmt::format("world size: {} ({} ranks, {} streams in the trace)\n", r.world_size,
                       s.ranks, s.streams);
    out += fmt::format("layers:     {}   iterations: {}\n", s.layers, s.iterations);
    out += fmt::format("duration:   {}\n", analyzer::format_duration(r.end_ns - r.start_ns));
    out += fmt::format("schema:     version {}, written by moetrace {}{}\n", r.schema_version,
                       r.moetrace_version,
                       r.finalized ? "" : "; NOT finalized (writer killed?): no indexes");
    out += fmt::format("dropped:    {} activity records{}\n", r.dropped_records,
                       r.dropped_records > 0 ? " (the trace is incomplete)" : "");
    out += fmt::format("integrity:  {}\n", r.integrity == "not recorded"
                                              ? "no record of the writer's (checked by references and ranges)"
                                              : "row counts match the writer's record");
    out += "tables:\n";
    for (const auto& [t, n] : s.table_rows)
      if (n > 0) out += fmt::format("  {:<18} {:>12}\n", t, n);
    if (!r.config.empty()) {
      out += "config:\n";
      for (const auto& [k, v] : r.config) out += fmt::format("  {} = {}\n", k, v);
    }
    write_output("", out);
  });
}

}  // namespace moetrace::cli
