// `moetrace info`'s summary of a trace: its run, row counts per table
// (checked against the writer's integrity record) and sizes, without loading
// the events.
#include <fmt/format.h>

#include <string_view>

#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/trace_file.h"
#include "trace_loader_internal.h"

namespace moetrace::analyzer {
TraceSummary summarize_trace(const std::string& path) {
  auto db = schema::open_trace(path);
  TraceSummary s;
  s.run.path = path;
  load_run_record(db, s.run);
  for (const char* t : {"kernels", "memcpy", "memset", "memory_events", "api_calls", "sync_events",
                        "overhead", "nvtx_ranges", "op_ranges", "op_deps", "buffers", "op_buffers",
                        "expert_load", "expert_placement", "collectives", "strings"}) {
    const std::string_view table(t);
    if (s.run.schema_version >= 2 && (table == "op_deps" || table == "op_buffers")) {
      // Views over op_ranges' JSON columns since version 2: count the arrays.
      const std::string column = table == "op_deps" ? "deps" : "buffers";
      s.table_rows.emplace_back(
          t, db.query_int("SELECT coalesce(sum(json_array_length(" + column + ")), 0) FROM op_ranges").value_or(0));
    } else if (db.has_table(t)) {  // collectives came later within version 1; older traces lack it
      s.table_rows.emplace_back(t, db.query_int(std::string("SELECT count(*) FROM ") + t).value_or(0));
    }
  }
  // Row counts against the writer's record (the loader checks every row).
  s.run.integrity = "not recorded";
  auto rec = db.prepare("SELECT value FROM meta WHERE key = 'integrity'");
  if (rec.step()) {
    const auto record = schema::parse_integrity(rec.text(0));
    if (!record) throw Error(path + ": the integrity record in meta is damaged; damaged trace");
    for (const auto& [table, rows] : s.table_rows) {
      const auto it = record->find(table);
      if (it != record->end() && it->second.rows != rows)
        throw Error(fmt::format("{}: table {} is damaged: {} rows, the writer recorded {}", path, table, rows,
                                it->second.rows));
    }
    s.run.integrity = "row counts match";
  }
  s.ranks = static_cast<int>(db.query_int("SELECT count(DISTINCT rank) FROM (SELECT rank FROM ranks "
                                          "UNION SELECT rank FROM streams)")
                                 .value_or(0));
  s.streams = static_cast<int>(db.query_int("SELECT count(*) FROM streams").value_or(0));
  s.layers = static_cast<int>(
      db.query_int("SELECT count(DISTINCT layer) FROM op_ranges WHERE layer IS NOT NULL").value_or(0));
  s.iterations = static_cast<int>(
      db.query_int("SELECT count(DISTINCT iteration) FROM op_ranges WHERE iteration IS NOT NULL")
          .value_or(0));
  std::int64_t events = 0;
  for (const auto& [table, rows] : s.table_rows)
    if (table != "strings" && table != "op_deps" && table != "op_buffers" && table != "collectives")
      events += rows;
  if (events == 0)
    throw_empty_trace(path);
  return s;
}

}  // namespace moetrace::analyzer
