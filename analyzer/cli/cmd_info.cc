// `moetrace info TRACE`: what a trace holds, without analysing it.
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/run_by_file.h"
#include "moetrace/analyzer/run_loader.h"

namespace moetrace::cli {
namespace {

// `info` of a run of several rank files: the run, its files and ranks, and
// each rank's clock against the reference rank.
std::string run_info(const analyzer::RunOverview& o, std::int64_t together_bytes, bool json) {
  const auto& t = o.trace;
  const auto& f = *t.files;
  if (json) {
    nlohmann::json j = {{"run", analyzer::run_json(t.run)},
                        {"ranks", t.rank_ids().size()},
                        {"streams", t.streams.size()},
                        {"events", o.events},
                        {"estimated_bytes_together", together_bytes},
                        {"rank_files", analyzer::rank_files_json(f)}};
    return json_text(j);
  }
  const auto& r = t.run;
  std::string out;
  out += fmt::format("run:        {}\n", r.name.empty() ? "(unnamed)" : r.name);
  out += fmt::format("backend:    {}{}\n", r.backend, r.simulated ? " (simulated)" : "");
  out += fmt::format("variant:    {}\n", r.variant.empty() ? "-" : r.variant);
  out += fmt::format("world size: {} ({} ranks in {} files, {} streams)\n", f.world_size, t.rank_ids().size(),
                     f.files.size(), t.streams.size());
  out += fmt::format("events:     {}\n", o.events);
  out += fmt::format("memory:     about {} read together ({}: up to {})\n", analyzer::format_bytes(together_bytes),
                     together_bytes > analyzer::kMergedMemoryBudgetBytes ? "report reads them one at a time"
                                                                          : "report reads them together",
                     analyzer::format_bytes(analyzer::kMergedMemoryBudgetBytes));
  if (!f.missing_ranks.empty())
    out += fmt::format("missing:    rank{} {}\n", f.missing_ranks.size() == 1 ? "" : "s",
                       analyzer::rank_ranges(f.missing_ranks));
  for (const auto& [path, why] : f.left_out) out += fmt::format("left out:   {}\n", why);
  out += fmt::format("integrity:  {}\n", r.integrity == "mixed" ? "differs between the files (see the warnings)" : r.integrity);
  for (const auto& w : analyzer::run_warnings(r)) out += "warning:    " + w + "\n";
  const auto& c = f.clocks;
  out += fmt::format("clocks:     {} against rank {} (from the collectives; offset at the first one{})\n",
                     c.applied ? "aligned" : "NOT aligned (--no-align)", c.reference_rank,
                     std::all_of(c.ranks.begin(), c.ranks.end(), [](const auto& k) { return k.usable() || !k.estimated; })
                         ? ""
                         : "; ?: not applied, see below");
  out += fmt::format("  {:>6}  {:>14}  {:>10}  {:>13}  {:>13}  {:>11}  {:<11}  {}\n", "rank", "offset", "drift ppm",
                     "uncertainty", "spread", "collectives", "paired by", "file");
  std::map<std::int32_t, std::string> file_of;
  for (const auto& file : f.files)
    for (auto x : file.ranks) file_of[x] = file.path;
  auto us = [](const auto& k, double v) {
    return !k.estimated ? std::string("-") : v < 0 ? std::string("unknown") : fmt::format("{:.3f} us", v / 1e3);
  };
  for (const auto& k : c.ranks)
    out += fmt::format("  {:>6}  {:>14}  {:>10}  {:>13}  {:>13}  {:>11}  {:<11}  {}\n", k.rank,
                       k.estimated ? fmt::format("{:+.3f} us{}", k.offset_ns / 1e3, k.usable() ? "" : "?") : "-",
                       k.estimated ? fmt::format("{:+.3f}", k.drift_ppm) : "-", us(k, k.uncertainty_ns),
                       us(k, k.spread_ns), k.collectives, k.pairing.empty() ? "-" : k.pairing, file_of[k.rank]);
  for (const auto& k : c.ranks)
    if (!k.refused.empty() && k.rank != c.reference_rank)
      out += fmt::format("  rank {} not aligned: {}\n", k.rank, k.refused);
  return out;
}

}  // namespace

void add_info_command(CLI::App& app) {
  struct Options {
    TraceArgs traces;
    std::string format = "text";
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("info", "Show what a trace holds: run, ranks, tables, dropped records; for several rank files, each rank's clock");
  add_trace_args(cmd, opt->traces);
  add_format_option(cmd, opt->format, {"text", "json"});
  cmd->callback([opt] {
    const auto paths = analyzer::expand_trace_paths(opt->traces.paths);
    if (paths.size() > 1) {
      write_output("", run_info(overview_traces(paths, opt->traces), analyzer::estimated_merged_bytes(paths),
                                opt->format == "json"));
      return;
    }
    // A trace of another tool: what its import holds.
    const auto path = foreign_inputs_imported(paths).front();
    auto s = analyzer::summarize_trace(path);
    s.run.path = imported_from(path);
    if (opt->format == "json") {
      nlohmann::json tables = nlohmann::json::object();
      for (const auto& [t, n] : s.table_rows) tables[t] = n;
      nlohmann::json j = {{"run", analyzer::run_json(s.run)},
                          {"ranks", s.ranks},
                          {"streams", s.streams},
                          {"layers", s.layers},
                          {"iterations", s.iterations},
                          {"tables", tables}};
      write_output("", json_text(j));
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
    for (const auto& w : analyzer::unread_device_warnings(r)) out += "warning:    " + w + "\n";
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
