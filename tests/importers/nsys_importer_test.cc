// The Nsight Systems importer on the real exports in ../shared/data (facts
// checked with the sqlite3 CLI against the source files, quoted beside each
// assertion) and on small hand-made exports for the edge cases.
#include <gtest/gtest.h>

#include <stdexcept>

#include "import_test_util.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/trace.h"
#include "nsys/nvtx_payload.h"
#include "test_paths.h"

namespace moetrace::testing {
namespace {

using importers::import_traces;

const std::string kSaxpy = "nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite";
const std::string kMock = "nsys/nsys-ai-mock.sqlite";
const std::string kHealthy = "nsys/nsys-ai-healthy_1pct.sqlite";

TEST(NsysImporter, Saxpy_2_9_1) {
  const auto in = shared_data(kSaxpy);
  MOETRACE_NEED_SHARED(in);
  const auto out = temp_path("saxpy.db");
  const auto s = import_traces({in}, out);
  EXPECT_EQ(s.format, importers::Format::kNsys);
  EXPECT_EQ(s.ranks, 1);
  // sqlite3: SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL -> 5; MEMCPY -> 15
  expect_sql_ints(out, {
      {"SELECT count(*) FROM kernels", 5},
      {"SELECT count(*) FROM memcpy", 15},
      // copyKind: 10 rows of 1 (H2D), 5 of 2 (D2H); srcKind 0 (pageable) -> dstKind 2 (device)
      {"SELECT count(*) FROM memcpy WHERE copy_kind = 1 AND src_kind = 4 AND dst_kind = 1", 10},
      {"SELECT count(*) FROM memcpy WHERE copy_kind = 2 AND src_kind = 1 AND dst_kind = 4", 5},
      {"SELECT sum(bytes) FROM memcpy", 15 * 262144000LL},
      // RUNTIME has 95 rows: 56 of eventClass 0 (runtime), 1 of class 1 (driver:
      // cuModuleGetLoadingMode) and 38 "CUDA backtrace" (class 67) rows repeating
      // a runtime call with the same correlation id.
      {"SELECT count(*) FROM api_calls", 57},
      {"SELECT count(*) FROM api_calls WHERE api = 2", 1},
  });
  EXPECT_EQ(config_value(out, "import.skipped.runtime_backtrace_duplicate"), "38");
  EXPECT_EQ(s.skipped.at("runtime_backtrace_duplicate"), 38);
  // Names lose nsys's ABI suffix: cudaLaunchKernel_v7000 -> cudaLaunchKernel.
  expect_sql_ints(out, {
      {"SELECT count(*) FROM api_calls a JOIN strings s ON s.id = a.name_id "
       "WHERE s.value = 'cudaLaunchKernel'", 5},
      // Every kernel finds its launch by correlation id (140, 156, 172, 188, 204).
      {"SELECT count(*) FROM kernels k JOIN api_calls a USING (correlation_id) "
       "JOIN strings s ON s.id = a.name_id WHERE s.value = 'cudaLaunchKernel'", 5},
  });
  EXPECT_EQ(sql_text(out, "SELECT s.value FROM kernels k JOIN strings s ON s.id = k.name_id LIMIT 1"),
            "saxpy(double *, double *, double *, double, int)");
  // gridX 2, blockX 512, registersPerThread 26; timestamps unchanged for one file.
  expect_sql_ints(out, {
      {"SELECT count(*) FROM kernels k JOIN launch_configs l ON l.id = k.launch_id "
       "WHERE grid_x = 2 AND grid_y = 1 AND block_x = 512 AND registers = 26", 5},
      {"SELECT min(start_ns) FROM kernels", 924922186},
      {"SELECT max(end_ns) FROM kernels", 1965496577},
      // NVTX_EVENTS: 24 rows = 22 push/pop ranges (5 "saxpy" in the default
      // domain, 17 MPI_* in domain 1 "MPI") + a domain name (75) + a thread name (39).
      {"SELECT count(*) FROM nvtx_ranges", 22},
      {"SELECT count(*) FROM nvtx_ranges n JOIN strings s ON s.id = n.name_id "
       "WHERE s.value = 'saxpy' AND n.domain_id IS NULL", 5},
      {"SELECT count(*) FROM nvtx_ranges n JOIN strings d ON d.id = n.domain_id "
       "WHERE d.value = 'MPI'", 17},
      {"SELECT count(*) FROM nvtx_ranges n JOIN strings s ON s.id = n.name_id "
       "WHERE s.value = 'MPI_Send'", 10},
      // The process (pid 1230493) names its thread "MPI Rank 0".
      {"SELECT pid FROM ranks WHERE rank = 0", 1230493},
  });
  EXPECT_EQ(config_value(out, "import.nsys.rank_source"), "MPI rank thread names");
  EXPECT_EQ(sql_text(out, "SELECT name FROM devices"), "NVIDIA A100-SXM4-40GB");
  expect_sql_ints(out, {
      {"SELECT sm_count FROM devices", 108},
      {"SELECT compute_major * 10 + compute_minor FROM devices", 80},
      {"SELECT memory_bytes FROM devices", 42297524224LL},
  });
  EXPECT_EQ(sql_text(out, "SELECT role FROM streams WHERE native_id = 7"), "compute");
  EXPECT_EQ(sql_text(out, "SELECT backend || ',' || simulated FROM run"), "nsys,0");
  EXPECT_EQ(config_value(out, "import.source.0"), in);
  EXPECT_EQ(config_value(out, "import.nsys.schema_version.0"), "2.9.1");
  // The result is a valid moetrace trace.
  const auto t = analyzer::load_trace(out);
  EXPECT_EQ(t.activities.size(), 20u);
}

TEST(NsysImporter, Mock_3_24_14) {
  const auto in = shared_data(kMock);
  MOETRACE_NEED_SHARED(in);
  const auto out = temp_path("mock.db");
  import_traces({in}, out);
  expect_sql_ints(out, {
      {"SELECT count(*) FROM kernels", 2},
      {"SELECT count(*) FROM kernels k JOIN api_calls a USING (correlation_id)", 2},
      // One 4-byte D2H copy, device -> pinned (srcKind 2, dstKind 1).
      {"SELECT count(*) FROM memcpy WHERE copy_kind = 2 AND bytes = 4 AND src_kind = 1 "
       "AND dst_kind = 2", 1},
      {"SELECT count(*) FROM api_calls", 9},
      {"SELECT count(*) FROM sync_events WHERE correlation_id = 172", 1},
      // overheadType 6 x4, 7 x2.
      {"SELECT count(*) FROM overhead WHERE kind = 'runtime_module_loading'", 4},
      {"SELECT count(*) FROM overhead WHERE kind = 'lazy_function_loading'", 2},
  });
  EXPECT_EQ(sql_text(out, "SELECT name FROM devices"), "NVIDIA GeForce RTX 3080");
  expect_sql_ints(out, {
      {"SELECT compute_major * 10 + compute_minor FROM devices", 86},
      {"SELECT pid FROM ranks", 91186},
      {"SELECT count(*) FROM streams", 1},
  });
  EXPECT_EQ(config_value(out, "import.nsys.schema_version.0"), "3.24.14");
  EXPECT_EQ(sql_text(out, "SELECT s.value FROM kernels k JOIN strings s ON s.id = k.name_id "
                          "ORDER BY start_ns LIMIT 1")
                .rfind("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>", 0),
            0u);
}

TEST(NsysImporter, HealthySliceWithoutPids) {
  const auto in = shared_data(kHealthy);
  MOETRACE_NEED_SHARED(in);
  const auto out = temp_path("healthy.db");
  import_traces({in}, out);
  // 400 kernels, half each of two names, and 400 launches; no globalPid column.
  expect_sql_ints(out, {
      {"SELECT count(*) FROM kernels", 400},
      {"SELECT count(*) FROM kernels k JOIN strings s ON s.id = k.name_id "
       "WHERE s.value = 'void cutlass::gemm_nn_128x128<float>(float*, float*)'", 200},
      {"SELECT count(*) FROM kernels k JOIN api_calls a USING (correlation_id)", 400},
      {"SELECT min(start_ns) FROM api_calls", -3000},
  });
  EXPECT_EQ(sql_text(out, "SELECT name FROM devices"), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(sql_int(out, "SELECT count(*) FROM ranks"), 1);
}

TEST(NsysImporter, SeveralExportsAreRanksOnOneClock) {
  const auto saxpy = shared_data(kSaxpy), mock = shared_data(kMock);
  MOETRACE_NEED_SHARED(saxpy);
  MOETRACE_NEED_SHARED(mock);
  const auto out = temp_path("two.db");
  const auto s = import_traces({saxpy, mock}, out);
  EXPECT_EQ(s.ranks, 2);
  // Only saxpy names an MPI rank, so ranks follow the file order.
  EXPECT_EQ(config_value(out, "import.nsys.rank_source"), "file order");
  expect_sql_ints(out, {
      {"SELECT pid FROM ranks WHERE rank = 0", 1230493},
      {"SELECT pid FROM ranks WHERE rank = 1", 91186},
  });
  // utcEpochNs: saxpy 1687813257637297504, mock 1776781226557295056.
  const std::int64_t offset = 1776781226557295056LL - 1687813257637297504LL;
  EXPECT_EQ(config_value(out, "import.nsys.clock_offset_ns.1"), std::to_string(offset));
  expect_sql_ints(out, {
      {"SELECT min(start_ns) FROM kernels WHERE rank = 1", 1517727052 + offset},
      {"SELECT min(start_ns) FROM kernels WHERE rank = 0", 924922186},
      {"SELECT world_size FROM run", 2},
      {"SELECT count(*) FROM devices", 2},
  });
}

TEST(NsysImporter, SameMpiRankTwiceFallsBackToFileOrder) {
  const auto saxpy = shared_data(kSaxpy);
  MOETRACE_NEED_SHARED(saxpy);
  const auto out = temp_path("twice.db");
  import_traces({saxpy, saxpy}, out);
  expect_sql_ints(out, {
      {"SELECT count(*) FROM ranks", 2},
      {"SELECT count(*) FROM kernels", 10},
      // One GPU by UUID, seen by both.
      {"SELECT count(*) FROM devices", 1},
  });
}

// --- hand-made exports --------------------------------------------------------

// The hand-made export (tests/data/nsys/minimal_export.sql) and NCCL's NVTX
// payloads added to it (nccl_payloads.sql); both also seed the fuzzer.
std::string fixture_sql(const std::string& name) {
  const std::string sql = moetrace::testing::read_text(std::string(MOETRACE_SOURCE_DIR) + "/tests/data/nsys/" + name);
  if (sql.empty()) throw std::runtime_error("missing fixture tests/data/nsys/" + name);
  return sql;
}

TEST(NsysImporter, HandMadeExport) {
  const auto in = temp_path("minimal.sqlite"), out = temp_path("minimal.db");
  make_export(in, fixture_sql("minimal_export.sql"));
  const auto s = import_traces({in}, out);
  // The kernel ending before it starts is dropped and counted; the
  // zero-length one is kept.
  EXPECT_EQ(sql_int(out, "SELECT count(*) FROM kernels"), 3);
  EXPECT_EQ(s.skipped.at("negative_duration"), 1);
  expect_sql_ints(out, {
      {"SELECT count(*) FROM kernels WHERE start_ns = end_ns", 1},
      // A mangled name is demangled.
      {"SELECT count(*) FROM strings WHERE value = 'saxpy(double*, double*, double*, double, int)'", 1},
  });
  // Stream 13 ran an NCCL kernel: comm; stream 7 computes.
  EXPECT_EQ(sql_text(out, "SELECT role FROM streams WHERE native_id = 13"), "comm");
  EXPECT_EQ(sql_text(out, "SELECT role FROM streams WHERE native_id = 7"), "compute");
  // Runtime calls of an unknown event class are counted, not imported.
  EXPECT_EQ(sql_int(out, "SELECT count(*) FROM api_calls"), 2);
  EXPECT_EQ(config_value(out, "import.skipped.runtime_event_class_99"), "1");
  expect_sql_ints(out, {
      {"SELECT thread_id FROM api_calls LIMIT 1", 43},
      // NVTX: domain names from eventType 75, payloads, open ranges; marks and
      // unknown event types counted.
      {"SELECT count(*) FROM nvtx_ranges", 2},
      {"SELECT payload_int FROM nvtx_ranges n JOIN strings d ON d.id = n.domain_id "
       "WHERE d.value = 'NCCL'", 4096},
      {"SELECT color FROM nvtx_ranges WHERE payload_int = 4096", 4278190335LL},
      {"SELECT count(*) FROM nvtx_ranges WHERE end_ns IS NULL AND payload_double = 2.5", 1},
  });
  EXPECT_EQ(config_value(out, "import.skipped.nvtx_mark"), "1");
  EXPECT_EQ(config_value(out, "import.skipped.nvtx_event_type_99"), "1");
  // GPU memory usage: one allocation and its free, device memory.
  expect_sql_ints(out, {
      {"SELECT count(*) FROM memory_events WHERE memory_kind = 1", 2},
      {"SELECT kind FROM memory_events WHERE ts_ns = 450", 0},
      {"SELECT pid FROM ranks", 42},
  });
  // The breakdown classifies the NCCL AllToAll kernel as all-to-all.
  const auto t = analyzer::load_trace(out);
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.ranks.size(), 1u);
  EXPECT_EQ(b.ranks[0].t.at(Category::kAllToAll), 100);
}

// NCCL's NVTX payloads (nvtx_payload.h): schemas in NVTX_PAYLOAD_SCHEMAS /
// _ENTRIES, values in binaryData behind a 32-byte header (domain 3, schema id
// at byte 8, payload size, total size). Blobs written by hand, little-endian:
//   schema 100 (collective): comm id uint64 @0 = 0xdeadbeef, size_t @8 = 65536
//   schema 102 (p2p): comm id @0, size_t @8 = 4096, int "Peer rank" @16 = 3
//   schema 101 (init): comm id @0, int "No. of ranks" @8 = 8 -- listed last:
//     the group size still reaches the calls before it.
// A 10-byte blob and one of an unknown schema (999) are counted, not guessed.
TEST(NsysImporter, NcclPayloadsGiveMessageSizesAndGroupSizes) {
  const auto in = temp_path("nccl-payload.sqlite"), out = temp_path("nccl-payload.db");
  make_export(in, fixture_sql("minimal_export.sql") + fixture_sql("nccl_payloads.sql"));
  import_traces({in}, out);
  expect_sql_ints(out, {
      {"SELECT count(*) FROM collectives", 2},
      {"SELECT in_nelems FROM collectives WHERE name = 'ncclAllReduce'", 65536},
  });
  EXPECT_EQ(sql_text(out, "SELECT dtype FROM collectives WHERE name = 'ncclAllReduce'"), "uint8");
  expect_sql_ints(out, {
      {"SELECT start_ns FROM collectives WHERE name = 'ncclAllReduce'", 600},
      {"SELECT group_size FROM collectives WHERE name = 'ncclAllReduce'", 8},
  });
  EXPECT_EQ(sql_text(out, "SELECT process_group FROM collectives WHERE name = 'ncclSend'"),
            "NCCL communicator 0xdeadbeef");
  EXPECT_EQ(sql_int(out, "SELECT in_nelems FROM collectives WHERE name = 'ncclSend'"), 4096);
  EXPECT_EQ(sql_text(out, "SELECT group_ranks FROM collectives WHERE name = 'ncclSend'"), "peer 3");
  // The range keeps its message size as its payload.
  EXPECT_EQ(sql_int(out, "SELECT payload_int FROM nvtx_ranges WHERE start_ns = 600"), 65536);
  EXPECT_EQ(config_value(out, "import.skipped.nvtx_binary_payload"), "2");
}

// An export read straight into memory (`report run.sqlite`) gives the model
// and the report that its trace file, imported, gives: the hand-made export
// with NCCL payloads, and the shared exports where present.
TEST(NsysImporter, ReadIntoMemoryAsFromItsTraceFile) {
  const auto in = temp_path("memory-nccl-payload.sqlite");
  make_export(in, fixture_sql("minimal_export.sql") + fixture_sql("nccl_payloads.sql"));
  expect_in_memory_as_from_file(in);
  for (const auto& rel : {kSaxpy, kMock, kHealthy})
    if (std::filesystem::exists(shared_data(rel))) expect_in_memory_as_from_file(shared_data(rel));
  // An SQLite file that is no export: the loader's line, as before.
  const auto other = temp_path("memory-other.sqlite");
  make_export(other, "CREATE TABLE t(x);");
  EXPECT_NE(error_of([&] { analyzer::load_trace(other); }).find(other), std::string::npos);
}

// An entry offset near INT64_MAX (NVTX_PAYLOAD_SCHEMA_ENTRIES holds any
// integer) is outside the payload: skipped, not added to its width (found by
// nvtx_payload_fuzzer as a signed overflow).
TEST(NsysImporter, PayloadEntryOffsetsNearInt64MaxAreSkipped) {
  importers::nsys::PayloadSchemas schemas;
  schemas[1] = {16, {{"huge", 18, INT64_MAX}, {"near", 22, INT64_MAX - 4}, {"fine", 5, 8}}};
  std::string blob(importers::nsys::kPayloadHeaderBytes + 16, '\0');
  blob[8] = 1;                                   // schema id
  blob[importers::nsys::kPayloadHeaderBytes + 8] = 7;  // "fine" = 7
  const auto d = importers::nsys::decode_payload(blob, schemas);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->integers.size(), 1u);
  EXPECT_EQ(d->integers.at("fine"), 7);
}

TEST(NsysImporter, MissingTablesAreFine) {
  const auto in = temp_path("runtime-only.sqlite"), out = temp_path("runtime-only.db");
  make_export(in, R"(
    CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
    INSERT INTO StringIds VALUES (1, 'cudaMalloc_v3020');
    CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, "end" INTEGER, globalTid INTEGER, nameId INTEGER);
    INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (0, 10, 16777217, 1);
  )");
  import_traces({in}, out);
  EXPECT_EQ(sql_int(out, "SELECT count(*) FROM api_calls"), 1);
  EXPECT_EQ(config_value(out, "import.nsys.schema_version.0"), "unknown");
  // No GPU activity: the rank runs on a placeholder device.
  EXPECT_EQ(sql_text(out, "SELECT d.name FROM ranks r JOIN devices d ON d.id = r.device_id"), "unknown");
}

TEST(NsysImporter, RefusesWhatItCannotRead) {
  const auto foreign = temp_path("foreign.sqlite");
  make_export(foreign, "CREATE TABLE t (x);");
  EXPECT_EQ(import_error({foreign}),
            foreign + ": a SQLite database but not an Nsight Systems export (no StringIds, CUPTI or NVTX tables)");

  const auto future = temp_path("future.sqlite");
  make_export(future, R"(CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
    INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '4.0.1');
    CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);)");
  EXPECT_EQ(import_error({future}), future + ": Nsight Systems export schema 4.0.1 is not one this importer "
                                             "reads (2.x and 3.x); export with a supported nsys");

  const auto no_stream = temp_path("no-stream.sqlite");
  make_export(no_stream, R"(CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, demangledName INTEGER);
    INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (0, 1, 1);)");
  EXPECT_EQ(import_error({no_stream}), no_stream + ": table CUPTI_ACTIVITY_KIND_KERNEL lacks column streamId; "
                                                   "incompatible Nsight Systems export (schema unknown)");

  const auto no_strings = temp_path("no-strings.sqlite");
  make_export(no_strings, R"(CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER,
    streamId INTEGER, demangledName INTEGER);)");
  EXPECT_EQ(import_error({no_strings}),
            no_strings + ": no StringIds table, so kernel and API names cannot be read; incompatible "
                         "Nsight Systems export (schema unknown)");

  const auto empty = temp_path("empty-export.sqlite");
  make_export(empty, R"(CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
    INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.24.14');
    CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);)");
  EXPECT_EQ(import_error({empty}), empty + ": no events to import (no kernels, copies, API calls or ranges)");

  // Forced onto a file that is not SQLite.
  const auto text = temp_path("not-sqlite.txt");
  write_file(text, "hello, this is not a database at all\n");
  EXPECT_EQ(import_error({text}, importers::Format::kNsys),
            text + ": not a SQLite database, so not an Nsight Systems export");
}

TEST(NsysImporter, TwoExportsWithoutSessionStartCannotShareAClock) {
  const auto a = temp_path("a.sqlite"), b = temp_path("b.sqlite");
  make_export(a, fixture_sql("minimal_export.sql"));
  make_export(b, fixture_sql("minimal_export.sql"));
  EXPECT_EQ(import_error({a, b}), a + ": no TARGET_INFO_SESSION_START_TIME, so it cannot be put on one clock "
                                      "with the other exports; import it alone");
}

TEST(NsysImporter, FailedImportLeavesNoOutput) {
  const auto in = temp_path("empty2.sqlite"), out = temp_path("error-out.db");
  make_export(in, "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);");
  std::filesystem::remove(out);
  EXPECT_NE(import_error({in}), "(no error)");
  EXPECT_FALSE(std::filesystem::exists(out));
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(out).parent_path()))
    EXPECT_EQ(e.path().string().find(".partial-"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace moetrace::testing
