// The Chrome trace exporter: its output parses as JSON and holds one slice
// per kernel, copy, op range, API call and closed NVTX range of the trace,
// with the MoE coordinates, roles, memory counters and launch flows.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include <set>

#include <nlohmann/json.hpp>

#include "../importers/import_test_util.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/export/chrome_trace.h"

namespace moetrace::testing {
namespace {

nlohmann::json export_json(const std::string& trace_path, exporters::ChromeExportStats* stats = nullptr) {
  const auto t = analyzer::load_trace(trace_path);
  std::ostringstream out;
  const auto s = exporters::write_chrome_trace(t, trace_path, out);
  if (stats) *stats = s;
  return nlohmann::json::parse(out.str());  // throws (fails the test) if not JSON
}

std::map<std::string, int> count_by(const nlohmann::json& j, const std::string& ph) {
  std::map<std::string, int> n;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == ph) ++n[e.value("cat", "")];
  return n;
}

const nlohmann::json* find_slice(const nlohmann::json& j, const std::string& name) {
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e["name"] == name) return &e;
  return nullptr;
}

std::string thread_name(const nlohmann::json& j, int pid, int tid) {
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == pid && e["tid"] == tid)
      return e["args"]["name"];
  return "(none)";
}

TEST(ChromeExport, MoeTrace) {
  const auto path = temp_path("export-moe.db");
  write_text_trace(path, R"(
    run world_size=2
    stream id=0 rank=0 role=compute name=s0
    stream id=1 rank=0 role=comm name=s1
    stream id=2 rank=1 role=compute name=s2
    op id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 micro_batch=0 chunk=0 start=1000 end=2000
    op id=2 rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 chunk=1 phase=bwd start=2000 end=3500
    op id=3 rank=1 stream=2 kind=expert_ffn layer=1 iteration=2 start=1500 end=4000
    kernel rank=0 stream=0 start=1000 end=1500 name=gate_gemm corr=7 op=1
    kernel rank=0 stream=0 start=1500 end=2000 name=softmax corr=8 op=1
    kernel rank=0 stream=0 start=1200 end=1800 name=overlapping corr=9
    memcpy rank=1 stream=2 start=1500 end=1600 bytes=4096 copy_kind=1 corr=7
    api rank=0 thread=77 start=900 end=950 name=cudaLaunchKernel corr=7
    api rank=0 thread=77 start=960 end=990 name=cudaLaunchKernel corr=8
    api rank=1 thread=78 start=1400 end=1450 name=cudaMemcpyAsync corr=7
    alloc rank=0 ts=500 address=4096 bytes=1024
    alloc rank=0 ts=600 address=8192 bytes=2048
    free rank=0 ts=5000 address=4096 bytes=1024
  )");
  exporters::ChromeExportStats stats;
  const auto j = export_json(path, &stats);
  EXPECT_EQ(j["displayTimeUnit"], "ns");
  EXPECT_EQ(j["otherData"]["time_origin_ns"], 500);
  auto x = count_by(j, "X");
  EXPECT_EQ(x["kernel"], 3);
  EXPECT_EQ(x["memcpy"], 1);
  EXPECT_EQ(x["op"], 3);
  EXPECT_EQ(x["cuda_api"], 3);
  EXPECT_EQ(stats.activity_slices, 4);
  EXPECT_EQ(stats.op_slices, 3);

  // Op ranges carry their MoE coordinates; absent ones are null.
  const auto* gate = find_slice(j, "gate");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ((*gate)["args"]["layer"], 0);
  EXPECT_EQ((*gate)["args"]["iteration"], 0);
  EXPECT_EQ((*gate)["args"]["micro_batch"], 0);
  EXPECT_EQ((*gate)["args"]["chunk"], 0);
  EXPECT_EQ((*gate)["args"]["phase"], "fwd");
  EXPECT_EQ((*gate)["args"]["kind"], "gate");
  const auto* dispatch = find_slice(j, "dispatch_all_to_all");
  ASSERT_NE(dispatch, nullptr);
  EXPECT_EQ((*dispatch)["args"]["phase"], "bwd");
  EXPECT_TRUE((*dispatch)["args"]["micro_batch"].is_null());
  EXPECT_EQ((*dispatch)["args"]["category"], "all_to_all");
  // Timestamps: us from the origin (500 ns), three decimals.
  EXPECT_DOUBLE_EQ((*dispatch)["ts"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ((*dispatch)["dur"].get<double>(), 1.5);

  // Processes are ranks; stream threads are named with their role; ops sit
  // on their own thread beside the stream.
  const auto* gemm = find_slice(j, "gate_gemm");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ((*gemm)["pid"], 0);
  EXPECT_EQ(thread_name(j, 0, (*gemm)["tid"]), "s0 (compute)");
  EXPECT_EQ(thread_name(j, 0, (*gate)["tid"]), "s0 (compute) ops");
  EXPECT_EQ(thread_name(j, 0, (*dispatch)["tid"]), "s1 (comm) ops");
  EXPECT_EQ((*gemm)["args"]["op"], 1);
  // A kernel overlapping two others without nesting moves to a second lane.
  const auto* overlapping = find_slice(j, "overlapping");
  ASSERT_NE(overlapping, nullptr);
  EXPECT_EQ(thread_name(j, 0, (*overlapping)["tid"]), "s0 (compute) #2");
  EXPECT_EQ(stats.extra_lanes, 1);

  // Memory in use per rank: 1024, 3072, 2048.
  std::vector<std::int64_t> memory;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "C") memory.push_back(e["args"]["bytes"]);
  EXPECT_EQ(memory, (std::vector<std::int64_t>{1024, 3072, 2048}));

  // Launch flows: correlation 7 on rank 0 and on rank 1 are different
  // launches; correlation 9 has no API call. Each flow is an s/f pair.
  EXPECT_EQ(count_by(j, "s")["launch"], 3);
  EXPECT_EQ(count_by(j, "f")["launch"], 3);
  EXPECT_EQ(stats.flows, 3);
  std::map<int, std::pair<int, int>> flow_pids;  // id -> (s pid, f pid)
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "s") flow_pids[e["id"]].first = e["pid"];
    if (e["ph"] == "f") flow_pids[e["id"]].second = e["pid"];
  }
  for (const auto& [id, pids] : flow_pids) EXPECT_EQ(pids.first, pids.second) << "flow " << id;
}

TEST(ChromeExport, ImportedKinetoTrace) {
  const auto in = shared_data("kineto/hta-nccl_data.json.gz");
  MOETRACE_NEED_SHARED(in);
  const auto db = temp_path("export-nccl.db");
  importers::import_traces({in}, db);
  const auto t = analyzer::load_trace(db);
  const auto j = export_json(db);
  auto x = count_by(j, "X");
  // One slice per event of the trace.
  EXPECT_EQ(x["kernel"] + x["memcpy"] + x["memset"], static_cast<int>(t.activities.size()));
  EXPECT_EQ(x["kernel"], 2700);
  EXPECT_EQ(x["cuda_api"], static_cast<int>(t.api_calls.size()));
  EXPECT_EQ(x["nvtx"], static_cast<int>(t.nvtx.size()));
  // Every GPU event has its launch in the trace (3774 = 2700 + 960 + 114).
  EXPECT_EQ(count_by(j, "f")["launch"], 3774);
  // The NCCL args ride on the kernel slices.
  int collectives = 0;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e["args"].contains("collective")) {
      ++collectives;
      EXPECT_EQ(e["args"]["group_size"], 2);
    }
  EXPECT_EQ(collectives, 21);
  // ProfilerStep#N gives MoE recognition iterations: the kernels' op ranges
  // (kind by kernel category) get threads beside their streams.
  std::set<std::string> threads;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 0) threads.insert(e["args"]["name"]);
  EXPECT_TRUE(threads.count("stream 40 (comm)"));
  EXPECT_TRUE(threads.count("stream 40 (comm) ops"));
  // The JSON read straight into memory exports the same, NCCL args included:
  // the exporter reads the model, not the trace file.
  std::ostringstream from_file, from_memory;
  exporters::write_chrome_trace(t, "trace", from_file);
  exporters::write_chrome_trace(analyzer::load_trace(in), "trace", from_memory);
  EXPECT_EQ(from_file.str(), from_memory.str());
}

// import -> export -> import keeps every event: the exported JSON is read back
// by the Kineto importer (baseTimeNanoseconds restores absolute times; the
// `cuda_api` and `nvtx` slices, driver calls, NVTX domains and payloads, launch
// configurations and NCCL args come back as they left; the processes of
// moetrace's export are ranks). Per table: the count, the first start, the
// last end and the summed duration are identical, and per rank the counts.
void expect_round_trip(const std::vector<std::string>& inputs, const std::string& tag) {
  const auto first = temp_path(tag + "-1.db"), json = temp_path(tag + ".json"), second = temp_path(tag + "-2.db");
  importers::import_traces(inputs, first);
  {
    const auto t = analyzer::load_trace(first);
    std::ofstream out(json);
    exporters::write_chrome_trace(t, first, out);
  }
  importers::import_traces({json}, second);
  for (const std::string table : {"kernels", "memcpy", "memset", "api_calls", "nvtx_ranges", "collectives"}) {
    const std::string q =
        table == "collectives"
            ? "SELECT count(*) || ' ' || total(in_nelems) || ' ' || total(group_size) FROM collectives"
            : "SELECT count(*) || ' ' || ifnull(min(start_ns), '') || ' ' || ifnull(max(end_ns), '') || ' ' || "
              "total(end_ns - start_ns) FROM " + table;
    EXPECT_EQ(sql_text(second, q), sql_text(first, q)) << tag << " " << table;
  }
  EXPECT_EQ(sql_int(second, "SELECT count(*) FROM api_calls WHERE api = 2"),
            sql_int(first, "SELECT count(*) FROM api_calls WHERE api = 2")) << "driver calls";
  EXPECT_EQ(sql_int(second, "SELECT count(*) FROM kernels WHERE launch_id IS NOT NULL"),
            sql_int(first, "SELECT count(*) FROM kernels WHERE launch_id IS NOT NULL")) << "launch configurations";
  EXPECT_EQ(sql_text(second, "SELECT group_concat(DISTINCT s.value) FROM nvtx_ranges n JOIN strings s "
                             "ON s.id = n.domain_id"),
            sql_text(first, "SELECT group_concat(DISTINCT s.value) FROM nvtx_ranges n JOIN strings s "
                            "ON s.id = n.domain_id"));
  // Ranks survive: the export's processes are ranks.
  EXPECT_EQ(sql_int(second, "SELECT count(*) FROM ranks"), sql_int(first, "SELECT count(*) FROM ranks"));
  for (const std::string table : {"kernels", "api_calls", "nvtx_ranges"}) {
    const std::string q = "SELECT group_concat(rank || ':' || n) FROM (SELECT rank, count(*) AS n FROM " + table +
                          " GROUP BY rank ORDER BY rank)";
    EXPECT_EQ(sql_text(second, q), sql_text(first, q)) << tag << " " << table << " per rank";
  }
  EXPECT_GT(sql_int(second, "SELECT count(*) FROM kernels"), 0);
}

TEST(ChromeExport, RoundTripKeepsEveryEventOfARealTrace) {
  const auto in = shared_data("kineto/hta-nccl_data.json.gz");
  MOETRACE_NEED_SHARED(in);
  expect_round_trip({in}, "rt-nccl");
  // Two ranks exported into one file come back as two ranks.
  const auto r0 = shared_data("kineto/hta-sampled_rank-0.json.gz"), r1 = shared_data("kineto/hta-sampled_rank-1.json.gz");
  MOETRACE_NEED_SHARED(r0);
  expect_round_trip({r0, r1}, "rt-sampled");
}

// A moetrace trace (two ranks, device allocations and frees): kernels,
// copies, API calls and memory events come back, on their ranks, at their ns
// times; op ranges too (the export's op slices carry their coordinates as
// args, read back as op ranges), and the import says nothing was lost.
TEST(ChromeExport, RoundTripOfAMoetraceTraceKeepsMemoryEvents) {
  const auto first = temp_path("rt-moe.db"), json = temp_path("rt-moe.json"), second = temp_path("rt-moe-2.db");
  write_text_trace(first, R"(
    run world_size=2
    stream id=0 rank=0 role=compute
    stream id=2 rank=1 role=compute
    op id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 start=1000 end=2000
    kernel rank=0 stream=0 start=1000 end=1500 name=gate_gemm corr=7 op=1
    kernel rank=1 stream=2 start=1200 end=1800 name=expert corr=9
    api rank=0 thread=77 start=900 end=950 name=cudaLaunchKernel corr=7
    api rank=1 thread=78 start=1100 end=1150 name=cudaLaunchKernel corr=9
    alloc rank=0 ts=500 address=4096 bytes=1024
    alloc rank=1 ts=600 address=8192 bytes=2048
    free rank=0 ts=5000 address=4096 bytes=1024
  )");
  {
    const auto t = analyzer::load_trace(first);
    std::ofstream out(json);
    const auto stats = exporters::write_chrome_trace(t, first, out);
    EXPECT_EQ(stats.memory_instants, 3);
  }
  importers::import_traces({json}, second);
  for (const std::string q :
       {"SELECT group_concat(rank || '/' || start_ns || '/' || end_ns) FROM (SELECT * FROM kernels ORDER BY start_ns)",
        "SELECT group_concat(rank || '/' || start_ns || '/' || correlation_id) FROM (SELECT * FROM api_calls ORDER BY "
        "start_ns)",
        "SELECT group_concat(rank || '/' || ts_ns || '/' || kind || '/' || bytes || '/' || address) FROM (SELECT * "
        "FROM memory_events ORDER BY ts_ns)"})
    EXPECT_EQ(sql_text(second, q), sql_text(first, q)) << q;
  EXPECT_EQ(sql_int(second, "SELECT count(*) FROM memory_events"), 3);
  // The op range comes back with its coordinates and its kernel, over the
  // span of its GPU work as the analyzer shows (and exports) an op of a
  // trace with GPU activities: its kernel's [1000, 1500].
  const std::string op_q =
      "SELECT group_concat(o.rank || '/' || k.name || '/' || o.layer || '/' || o.iteration || '/' || o.phase || '/' || "
      "o.start_ns || '/' || o.end_ns) FROM op_ranges o JOIN op_kinds k ON k.id = o.kind";
  EXPECT_EQ(sql_text(second, op_q), "0/gate/0/0/0/1000/1500");
  EXPECT_EQ(sql_int(second, "SELECT count(*) FROM kernels WHERE op_id IS NOT NULL"), 1);
  EXPECT_EQ(config_value(second, "import.skipped.op"), "(no row)");
}

TEST(ChromeExport, RoundTripOfAnNsysExport) {
  const auto in = shared_data("nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite");
  MOETRACE_NEED_SHARED(in);
  expect_round_trip({in}, "rt-saxpy");
}

TEST(ChromeExport, NeverClosedNvtxRangeIsAnInstant) {
  const auto in = temp_path("open-range.sqlite"), db = temp_path("open-range.db");
  {
    sqlite::Database src(in, sqlite::Database::Mode::kCreate);
    src.exec(R"(CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
      CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, eventType INTEGER, globalTid INTEGER, text TEXT);
      INSERT INTO NVTX_EVENTS VALUES (10, 20, 59, 16777218, 'closed'), (15, NULL, 60, 16777218, 'open "quoted"');)");
  }
  importers::import_traces({in}, db);
  exporters::ChromeExportStats stats;
  const auto j = export_json(db, &stats);
  EXPECT_EQ(stats.nvtx_slices, 1);
  EXPECT_EQ(stats.nvtx_instants, 1);
  bool found = false;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "i") {
      found = true;
      EXPECT_EQ(e["name"], "open \"quoted\"");
      EXPECT_EQ(e["args"]["never_closed"], true);
    }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace moetrace::testing
