// Helpers of the importer tests: shared third-party traces (shared_data.h),
// SQL probes of an imported trace, the one-line error of a call, and a trace
// read into memory against its imported file.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/importers/import.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/sqlite.h"
#include "shared_data.h"
#include "text_trace.h"
#include "test_paths.h"

namespace moetrace::testing {

inline std::int64_t sql_int(const std::string& db_path, const std::string& query) {
  sqlite::Database db(db_path, sqlite::Database::Mode::kReadOnly);
  return db.query_int(query).value_or(-1);
}

// A probe of an imported trace: a query and the integer it must give.
struct SqlInt {
  std::string query;
  std::int64_t expected;
};

// Each probe of the trace at `db_path`, in order; a failure names its query.
inline void expect_sql_ints(const std::string& db_path, std::initializer_list<SqlInt> probes) {
  for (const auto& p : probes) EXPECT_EQ(sql_int(db_path, p.query), p.expected) << p.query;
}

inline std::string sql_text(const std::string& db_path, const std::string& query) {
  sqlite::Database db(db_path, sqlite::Database::Mode::kReadOnly);
  auto st = db.prepare(query);
  return st.step() ? std::string(st.text(0)) : std::string("(no row)");
}

inline std::string config_value(const std::string& db_path, const std::string& key) {
  return sql_text(db_path, "SELECT value FROM run_config WHERE key = '" + key + "'");
}

// The moetrace::Error message of `f`, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::string import_error(const std::vector<std::string>& inputs,
                                importers::Format format = importers::Format::kAuto) {
  importers::ImportOptions options;
  options.format = format;
  return error_of([&] { importers::import_traces(inputs, temp_path("error-out.db"), options); });
}

// The tables of a Nsight Systems export (schema 3.24.14) that the hand-made
// exports fill: the schema version, then strings, kernels and runtime calls,
// empty.
inline constexpr std::string_view kNsysExportTables = R"(
  CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
  INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.24.14');
  CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
  CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, deviceId INTEGER, streamId INTEGER,
    correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER,
    blockX INTEGER, blockY INTEGER, blockZ INTEGER);
  CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, "end" INTEGER, eventClass INTEGER, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER, returnValue INTEGER);
)";

// A SQLite file made from SQL (a hand-built Nsight Systems export).
inline void make_export(const std::string& path, const std::string& sql) {
  std::filesystem::remove(path);
  sqlite::Database db(path, sqlite::Database::Mode::kCreate);
  db.exec(sql);
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}


// Every event of a trace model, field by field in model order, and the run's
// metadata but its path, integrity and creation time (what tells a trace read
// from its file from one read straight into memory).
inline std::string model_dump(const analyzer::Trace& t) {
  std::ostringstream o;
  const auto& r = t.run;
  o << r.name << '|' << r.backend << '|' << r.variant << '|' << r.world_size << '|' << r.host << '|'
    << r.moetrace_version << '|' << r.schema_version << '|' << r.finalized << '|' << r.start_ns << '|' << r.end_ns
    << '|' << r.config_json << '|' << r.dropped_records << "\n";
  for (const auto& [k, v] : r.config) o << "config " << k << '=' << v << "\n";
  for (const auto& d : r.damage) o << "damage " << d << "\n";
  for (const auto& s : t.strings) o << "string " << s << "\n";
  for (const auto& d : t.devices)
    o << "device " << d.id.value << '|' << d.name << '|' << d.uuid << '|' << d.compute_major << '|'
      << d.compute_minor << '|' << d.sm_count << '|' << d.memory_bytes << "\n";
  for (const auto& k : t.ranks)
    o << "rank " << k.rank.value << '|' << k.device.value << '|' << k.local_rank << '|' << k.host << '|' << k.pid << "\n";
  for (const auto& s : t.streams)
    o << "stream " << s.id.value << '|' << s.rank.value << '|' << s.device.value << '|' << s.native_id << '|'
      << s.role << '|' << s.name << "\n";
  for (const auto& c : t.launch_configs)
    o << "launch " << c.grid[0] << ',' << c.grid[1] << ',' << c.grid[2] << '|' << c.block[0] << ',' << c.block[1]
      << ',' << c.block[2] << '|' << c.shared_bytes << '|' << c.registers << "\n";
  for (const auto& a : t.activities)
    o << "activity " << static_cast<int>(a.type) << '|' << a.start_ns << '|' << a.end_ns << '|' << a.correlation_id
      << '|' << a.bytes << '|' << a.name.value << '|' << a.op << '|' << a.stream << '|' << a.rank.value << '|'
      << a.launch << '|' << a.launched_by << '|' << int{a.copy_kind} << int{a.src_kind} << int{a.dst_kind} << "\n";
  for (std::size_t i = 0; i < t.kernel_category.size(); ++i) o << "category " << int{t.kernel_category[i]} << "\n";
  for (const auto& p : t.ops)
    o << "op " << p.id.value << '|' << p.start_ns << '|' << p.end_ns << '|' << p.launch_start_ns << '|'
      << p.launch_end_ns << '|' << p.flops << '|' << p.bytes << '|' << p.recv_bytes << '|' << p.stream << '|'
      << p.rank.value << '|' << p.peer.value << '|' << p.layer << '|' << p.iteration << '|' << p.micro_batch << '|'
      << p.chunk << '|' << p.name.value << '|' << static_cast<int>(p.kind) << '|' << static_cast<int>(p.phase) << '|'
      << p.nvtx_id << "\n";
  for (const auto& c : t.api_calls)
    o << "api " << c.start_ns << '|' << c.end_ns << '|' << c.correlation_id << '|' << c.thread_id << '|'
      << c.rank.value << '|' << c.name.value << '|' << static_cast<int>(c.api) << '|' << c.return_code << "\n";
  for (const auto& n : t.nvtx)
    o << "nvtx " << n.id << '|' << n.start_ns << '|' << n.end_ns << '|' << n.thread_id << '|' << n.rank.value << '|'
      << n.domain.value << '|' << n.name.value << '|' << n.payload_int << n.has_payload_int << '|' << n.autograd_seq
      << n.autograd_backward << '|' << n.input_shape << "\n";
  for (const auto& s : t.input_shapes) o << "shape " << s.dims << '|' << s.types << "\n";
  for (const auto& e : t.memory_events)
    o << "memory " << e.ts_ns << '|' << e.address << '|' << e.bytes << '|' << e.buffer.value << '|' << e.rank.value
      << '|' << e.alloc << '|' << static_cast<int>(e.memory_kind) << "\n";
  for (const auto& c : t.collectives) {
    o << "collective " << c.rank.value << '|' << c.start_ns << '|' << c.end_ns << '|' << c.correlation_id << '|'
      << c.name << '|' << c.in_nelems << '|' << c.out_nelems << '|' << c.group_size << '|' << c.dtype << '|'
      << c.group_ranks << '|' << c.process_group << '|' << c.seq << '|';
    for (auto v : c.in_splits) o << v << ',';
    o << '|';
    for (auto v : c.out_splits) o << v << ',';
    o << "\n";
  }
  o << "recognition " << t.recognition.moe << '|' << t.recognition.activities_placed << '|'
    << t.projection.projected << '|' << t.expert_load.size() << '|' << t.expert_load_origin << "\n";
  return o.str();
}

// The JSON report of a trace, without run.integrity.
inline std::string report_json(const analyzer::Trace& t) {
  std::ostringstream out;
  analyzer::ReportOptions options;
  options.format = analyzer::ReportFormat::kJson;
  options.per_rank = options.per_iteration = true;
  analyzer::write_report(out, t, analyzer::analyze(t), options);
  auto j = nlohmann::json::parse(out.str());
  j["run"].erase("integrity");
  return j.dump(1);
}

// Where two long texts first differ, and 200 bytes of each from there.
inline std::string first_difference(const std::string& a, const std::string& b) {
  const auto [x, y] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return " at byte " + std::to_string(x - a.begin()) + ":\n file:   " +
         std::string(x, x + std::min<std::ptrdiff_t>(200, a.end() - x)) + "\n memory: " +
         std::string(y, y + std::min<std::ptrdiff_t>(200, b.end() - y));
}

// `input` (a trace of another tool) read straight into memory gives the model
// and the report of its trace file imported by `moetrace import`.
inline void expect_in_memory_as_from_file(const std::string& input) {
  SCOPED_TRACE(input);
  const auto file = temp_path("in-memory-reference.db");
  importers::import_traces({input}, file);
  auto from_file = analyzer::load_trace(file);
  from_file.run.path = input;  // as `report TRACE.json` names the trace it imported into a temporary file
  const auto in_memory = analyzer::load_trace(input);
  EXPECT_EQ(from_file.run.integrity, "verified");
  EXPECT_EQ(in_memory.run.integrity, "imported in memory");
  EXPECT_EQ(in_memory.run.path, input);
  EXPECT_GT(in_memory.event_count(), 0);
  const auto a = model_dump(from_file), b = model_dump(in_memory);
  EXPECT_TRUE(a == b) << "models differ" << first_difference(a, b);
  const auto ra = report_json(from_file), rb = report_json(in_memory);
  EXPECT_TRUE(ra == rb) << "reports differ" << first_difference(ra, rb);
}

}  // namespace moetrace::testing
