// The Kineto (PyTorch profiler) importer on the HolisticTraceAnalysis traces
// in ../shared/data (facts checked with `zcat FILE | python3 -c 'import json
// ...'`, quoted beside each assertion) and on small hand-made JSON.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "kineto/kineto_importer.h"
#include "kineto/kineto_records.h"
#include "common/trace_builder.h"
#include "import_test_util.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::testing {
namespace {

using importers::import_traces;

const std::string kNccl = "kineto/hta-nccl_data.json.gz";
const std::string kRank0 = "kineto/hta-sampled_rank-0.json.gz";
const std::string kRank1 = "kineto/hta-sampled_rank-1.json.gz";

TEST(KinetoImporter, NcclData) {
  const auto in = shared_data(kNccl);
  MOETRACE_NEED_SHARED(in);
  const auto out = temp_path("nccl.db");
  const auto s = import_traces({in}, out);
  EXPECT_EQ(s.format, importers::Format::kKineto);
  // traceEvents: 2700 kernel, 960 gpu_memcpy (all "Memcpy DtoD"), 114
  // gpu_memset, 8740 cuda_runtime, 14346 cpu_op + 42 user_annotation.
  expect_sql_ints(out, {
      {"SELECT count(*) FROM kernels", 2700},
      {"SELECT count(*) FROM memcpy WHERE copy_kind = 8 AND src_kind = 1 AND dst_kind = 1", 960},
      {"SELECT count(*) FROM memset WHERE value IS NULL", 114},
      {"SELECT count(*) FROM api_calls", 8740},
      {"SELECT count(*) FROM nvtx_ranges n JOIN strings d ON d.id = n.domain_id "
       "WHERE d.value = 'pytorch'", 14388},
      {"SELECT count(*) FROM nvtx_ranges WHERE category = 2", 42},
      // Every GPU event has args.correlation, and each matches one cuda_runtime call.
      {"SELECT count(*) FROM kernels k JOIN api_calls a USING (correlation_id)", 2700},
      // 21 NCCL kernels on stream 40: 15 ncclKernel_AllReduce (Collective name
      // "allreduce") and 6 ncclKernel_Broadcast ("broadcast").
      {"SELECT count(*) FROM kernels k JOIN strings s ON s.id = k.name_id "
       "WHERE s.value LIKE 'ncclKernel%'", 21},
      {"SELECT count(*) FROM collectives WHERE name = 'allreduce'", 15},
      {"SELECT count(*) FROM collectives WHERE name = 'broadcast'", 6},
  });
  // correlation 60047: In/Out msg nelems 6637568, Group size 2, dtype Float.
  EXPECT_EQ(sql_text(out, "SELECT in_nelems || ',' || out_nelems || ',' || group_size || ',' || dtype || ',' || "
                          "group_ranks || ',' || process_group FROM collectives WHERE correlation_id = 60047"),
            "6637568,6637568,2,Float,[0, 1],0 (default_pg)");
  EXPECT_EQ(sql_text(out, "SELECT role FROM streams WHERE native_id = 40"), "comm");
  EXPECT_EQ(sql_text(out, "SELECT role FROM streams WHERE native_id = 7"), "compute");
  // First kernel: ts 4458676983543.183 us + baseTimeNanoseconds 1711964646000000000.
  expect_sql_ints(out, {
      {"SELECT start_ns FROM kernels WHERE correlation_id = 57541", 1716423322983543183LL},
      {"SELECT end_ns - start_ns FROM kernels WHERE correlation_id = 57541", 41407},
      // distributedInfo: rank 0 of world_size 2; device 0 from deviceProperties.
      {"SELECT world_size FROM run", 2},
  });
  EXPECT_EQ(sql_text(out, "SELECT name || ',' || sm_count || ',' || memory_bytes FROM devices"),
            "NVIDIA A100-PG509-200,108,42297524224");
  // Skipped: 1086 fwdbwd flow events, 30 gpu_user_annotation, 1 "Trace" span, 2 instant events.
  EXPECT_EQ(s.skipped.at("flow_fwdbwd"), 1086);
  EXPECT_EQ(s.skipped.at("gpu_user_annotation"), 30);
  EXPECT_EQ(config_value(out, "import.kineto.nccl_version.0"), "2.17.1");
  // The analyzer sees all-reduce time and no all-to-all.
  const auto t = analyzer::load_trace(out);
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.ranks.size(), 1u);
  EXPECT_GT(b.ranks[0].t.at(Category::kAllReduce), 0);
  EXPECT_EQ(b.ranks[0].t.at(Category::kAllToAll), 0);
}

TEST(KinetoImporter, SampledRanksHaveAllToAll) {
  const auto r0 = shared_data(kRank0), r1 = shared_data(kRank1);
  MOETRACE_NEED_SHARED(r0);
  MOETRACE_NEED_SHARED(r1);
  const auto out = temp_path("sampled.db");
  // Given in reverse order: ranks come from distributedInfo, not the order.
  const auto s = import_traces({r1, r0}, out);
  EXPECT_EQ(s.ranks, 2);
  // distributedInfo: world_size 128 (two of its ranks sampled).
  expect_sql_ints(out, {
      {"SELECT world_size FROM run", 128},
      {"SELECT count(*) FROM kernels WHERE rank = 0", 1154},
      {"SELECT count(*) FROM kernels WHERE rank = 1", 1104},
  });
  EXPECT_EQ(config_value(out, "import.rank.0"), "hta-sampled_rank-0.json.gz (distributedInfo rank)");
  // Streams: 7 and 23 compute, 25 only copies, 84 and 203 run ncclKernel_SendRecv.
  for (int rank : {0, 1}) {
    const auto where = " FROM streams WHERE rank = " + std::to_string(rank);
    EXPECT_EQ(sql_text(out, "SELECT group_concat(native_id || ':' || role) FROM (SELECT native_id, role" + where +
                                " ORDER BY native_id)"),
              "7:compute,23:compute,25:copy,84:comm,203:comm");
  }
  // Copies of rank 0: 16 HtoD pageable->device, 8 HtoD pinned->device, 8 DtoH, 8 DtoD.
  expect_sql_ints(out, {
      {"SELECT count(*) FROM memcpy WHERE rank = 0 AND copy_kind = 1 AND src_kind = 4", 16},
      {"SELECT count(*) FROM memcpy WHERE rank = 0 AND copy_kind = 1 AND src_kind = 2", 8},
      {"SELECT count(*) FROM memcpy WHERE rank = 0 AND copy_kind = 2", 8},
      {"SELECT count(*) FROM memcpy WHERE rank = 0 AND copy_kind = 8", 8},
      // First kernel of rank 0: ts 1682725898082228 us (no base time), correlation 6935929.
      {"SELECT start_ns FROM kernels WHERE rank = 0 AND correlation_id = 6935929", 1682725898082228000LL},
  });
  // The breakdown: all-to-all time is the union of the SendRecv kernels,
  // 396199000 ns on rank 0 and 379053000 ns on rank 1 (computed in Python).
  // The importer's own output: without MoE recognition (whose ProfilerStep#N
  // iterations would add op ranges; moe_recognition_test covers those).
  analyzer::LoadOptions plain;
  plain.recognize = false;
  const auto t = analyzer::load_trace(out, plain);
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.ranks.size(), 2u);
  EXPECT_FALSE(b.has_op_ranges);
  EXPECT_EQ(b.ranks[0].t.at(Category::kAllToAll), 396199000);
  EXPECT_EQ(b.ranks[1].t.at(Category::kAllToAll), 379053000);
}

// --- hand-made JSON -----------------------------------------------------------

// One of everything the importer maps, in the order Kineto does not promise:
// distributedInfo after the events.
const char* kSmallTrace = R"json({
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "Test GPU", "totalGlobalMem": 1000, "computeMajor": 9,
                        "computeMinor": 0, "numSms": 132}],
  "traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 11, "ts": 100.5, "dur": 50,
     "args": {"Input Dims": [[4096, 1024], [1024, 2048]], "Input type": ["c10::BFloat16", "c10::BFloat16"],
              "Input Strides": [[1024, 1], [2048, 1]], "Concrete Inputs": ["", ""]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::_Grouped_MM", "pid": 10, "tid": 11, "ts": 151, "dur": 2,
     "args": {"Input Dims": [[], [[3, 4], [5]], [2.5]], "Input type": ["Scalar", "TensorList", "\"x"]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 10, "tid": 11, "ts": 154, "dur": 2,
     "args": {"Input Dims": [[3, 4], [3, 4]], "Input type": ["float", "float"]}},
    {"ph": "X", "cat": "user_annotation", "name": "## forward ##", "pid": 10, "tid": 11, "ts": 90, "dur": 200},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 110, "dur": 5,
     "args": {"correlation": 7, "cbid": 211}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 120.001, "dur": 10.5,
     "args": {"device": 0, "stream": 7, "correlation": 7, "grid": [4, 2, 1], "block": [128, 1, 1],
              "registers per thread": 64, "shared memory": 1024}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 140, "dur": 5,
     "args": {"correlation": 8}},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllToAll(ncclDevComm*)", "pid": 0, "tid": 9,
     "ts": 150, "dur": 20, "args": {"device": 0, "stream": 9, "correlation": 8, "Collective name": "all_to_all",
     "In msg nelems": 64, "Out msg nelems": 64, "Group size": 2, "dtype": "Float",
     "In split size": "[32, 32]", "Out split size": "[32, 32]", "Process Group Ranks": "[0, 1]",
     "Process Group Name": "3", "Seq": 17}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 10, "tid": 11, "ts": 180, "dur": 2},
    {"ph": "s", "id": 9, "pid": 10, "tid": 11, "ts": 180, "cat": "ac2g", "name": "ac2g"},
    {"ph": "f", "id": 9, "pid": 0, "tid": 5, "ts": 185, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 5, "ts": 185,
     "dur": 0, "args": {"device": 0, "stream": 5, "bytes": 4096}},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 5, "ts": 190, "dur": 1,
     "args": {"device": 0, "stream": 5, "correlation": 11, "bytes": 8}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 10, "tid": 11, "ts": 95,
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": 512, "Total Allocated": 512}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 10, "tid": 11, "ts": 250,
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096, "Bytes": -512, "Total Allocated": 0}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 10, "tid": 11, "ts": 251,
     "args": {"Device Type": 0, "Device Id": -1, "Addr": 8, "Bytes": 64}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "## forward ##", "pid": 0, "tid": 7, "ts": 120, "dur": 10},
    {"ph": "X", "cat": "kernel", "name": "backwards", "pid": 0, "tid": 7, "ts": 300, "dur": -5,
     "args": {"correlation": 12}},
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
     "ts": 0, "dur": 400}
  ],
  "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4},
  "baseTimeNanoseconds": 1000000000
})json";

// The two HTA ranks' clocks: one pair of SendRecv kernels ends in the same
// microsecond on both ranks, which puts the true offset within a microsecond
// of that pair's end difference. The kernels lack Kineto's collective args;
// their "nccl:*" ranges name the collective and its size, which pair them.
TEST(KinetoImporter, SampledRanksClockOffsetAgreesWithTheSendRecvPair) {
  const auto r0 = shared_data(kRank0), r1 = shared_data(kRank1);
  MOETRACE_NEED_SHARED(r0);
  MOETRACE_NEED_SHARED(r1);
  const auto out0 = temp_path("hta-clock-0.db"), out1 = temp_path("hta-clock-1.db");
  import_traces({r0}, out0);
  import_traces({r1}, out1);
  EXPECT_EQ(sql_int(out0, "SELECT count(*) FROM collectives WHERE name = 'all_reduce' AND in_nelems = 19618307"), 1);
  // The pair that ends in the same microsecond, on the clocks as recorded.
  const auto t0 = analyzer::load_trace(out0), t1 = analyzer::load_trace(out1);
  auto ends = [](const analyzer::Trace& t) {
    std::vector<std::int64_t> v;
    for (const auto& a : t.activities)
      if (t.str(a.name).starts_with("ncclKernel_SendRecv")) v.push_back(a.end_ns);
    return v;
  };
  std::vector<std::int64_t> same;
  for (auto e0 : ends(t0))
    for (auto e1 : ends(t1))
      if (e0 / 1000 == e1 / 1000) same.push_back(e1 - e0);
  ASSERT_EQ(same.size(), 1u);
  const auto run = analyzer::load_run({out0, out1});
  ASSERT_TRUE(run.files);
  const auto& clocks = run.files->clocks;
  EXPECT_TRUE(clocks.applied);
  ASSERT_EQ(clocks.ranks.size(), 2u);
  const auto& c = clocks.ranks[1];
  EXPECT_NEAR(c.offset_ns, static_cast<double>(same[0]), 100e3);
  // The offset (+24 us) is smaller than its uncertainty (110.578 us from 4
  // collectives): consistent with no offset, so not applied.
  EXPECT_FALSE(c.usable());
  EXPECT_NE(c.refused.find("smaller than its uncertainty"), std::string::npos) << c.refused;
  EXPECT_LE(c.spread_ns, analyzer::kMaxClockSpreadNs);
  EXPECT_EQ(c.pairing, "order");
}

TEST(KinetoImporter, HandMadeTrace) {
  const auto in = temp_path("small.json"), out = temp_path("small.db");
  write_file(in, kSmallTrace);
  const auto s = import_traces({in}, out);
  expect_sql_ints(out, {
      {"SELECT rank FROM ranks", 3},
      {"SELECT world_size FROM run", 4},
      // Times: base 1 s + ts in us, exact to the ns.
      {"SELECT start_ns FROM kernels WHERE correlation_id = 7", 1000120001},
      {"SELECT end_ns FROM kernels WHERE correlation_id = 7", 1000130501},
      {"SELECT start_ns FROM nvtx_ranges n JOIN strings s ON s.id = n.name_id "
       "WHERE s.value = 'aten::mm'", 1000100500},
  });
  // record_shapes: the op's input dims and types as compact JSON text, nested
  // lists and scalars as recorded (a quote in a type name dropped).
  EXPECT_EQ(sql_text(out, "SELECT input_dims || ' ' || input_types FROM input_shapes i JOIN nvtx_ranges n ON "
                          "n.id = i.nvtx_id JOIN strings s ON s.id = n.name_id WHERE s.value = 'aten::mm'"),
            "[[4096,1024],[1024,2048]] [\"c10::BFloat16\",\"c10::BFloat16\"]");
  // The all-to-all's sequence number in its process group, by its collectives row.
  EXPECT_EQ(sql_int(out, "SELECT q.seq FROM collective_seq q JOIN collectives c ON c.id = q.collective_id "
                         "WHERE c.correlation_id = 8"),
            17);
  EXPECT_EQ(analyzer::load_trace(out).collectives.at(0).seq, 17);
  EXPECT_EQ(sql_text(out, "SELECT input_dims || ' ' || input_types FROM input_shapes i JOIN nvtx_ranges n ON "
                          "n.id = i.nvtx_id JOIN strings s ON s.id = n.name_id WHERE s.value = 'aten::_Grouped_MM'"),
            "[[],[[3,4],[5]],[2.5]] [\"Scalar\",\"TensorList\",\"x\"]");
  // Only matrix products keep their shapes.
  expect_sql_ints(out, {
      {"SELECT count(*) FROM input_shapes", 2},
      {"SELECT count(*) FROM kernels k JOIN launch_configs l ON l.id = k.launch_id "
       "WHERE grid_x = 4 AND grid_y = 2 AND block_x = 128 AND registers = 64 AND shared_bytes = 1024", 1},
      // The kernel with a negative duration is dropped and counted.
      {"SELECT count(*) FROM kernels", 2},
  });
  EXPECT_EQ(s.skipped.at("negative_duration"), 1);
  // NCCL args kept in collectives; the kernel makes its stream comm.
  EXPECT_EQ(sql_text(out, "SELECT name || ' ' || in_splits || ' ' || group_size FROM collectives"),
            "all_to_all [32, 32] 2");
  EXPECT_EQ(sql_text(out, "SELECT role FROM streams WHERE native_id = 9"), "comm");
  EXPECT_EQ(sql_text(out, "SELECT role FROM streams WHERE native_id = 5"), "copy");
  // The copy has no args.correlation: the ac2g flow (id 9) gives it, and the
  // cudaMemcpyAsync at the flow's start gets the same id.
  expect_sql_ints(out, {
      {"SELECT correlation_id FROM memcpy", 9},
      {"SELECT correlation_id FROM api_calls a JOIN strings s ON s.id = a.name_id "
       "WHERE s.value = 'cudaMemcpyAsync'", 9},
      // Zero-length copy kept.
      {"SELECT end_ns - start_ns FROM memcpy", 0},
      {"SELECT copy_kind * 100 + src_kind * 10 + dst_kind FROM memcpy", 121},
  });
  // [memory]: a CUDA allocation and its free; the CPU one is counted.
  EXPECT_EQ(sql_text(out, "SELECT group_concat(kind || ':' || bytes) FROM memory_events"), "1:512,0:512");
  EXPECT_EQ(s.skipped.at("cpu_memory_event"), 1);
  EXPECT_EQ(s.skipped.at("gpu_user_annotation"), 1);
  EXPECT_EQ(s.skipped.at("trace"), 1);
  EXPECT_EQ(sql_text(out, "SELECT name || ',' || sm_count FROM devices"), "Test GPU,132");
  // The analyzer reads it and finds the all-to-all kernel.
  const auto t = analyzer::load_trace(out);
  EXPECT_EQ(analyzer::compute_breakdown(t).ranks.at(0).t.at(Category::kAllToAll), 20000);
}

TEST(KinetoImporter, BareEventArrayAndFileOrderRanks) {
  const auto a = temp_path("bare-a.json"), b = temp_path("bare-b.json"), out = temp_path("bare.db");
  const std::string events =
      R"([{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"correlation": 1}}])";
  write_file(a, events);
  write_file(b, events);
  const auto s = import_traces({a, b}, out);
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(config_value(out, "import.rank.1"), "bare-b.json (file order)");
  EXPECT_EQ(sql_int(out, "SELECT count(*) FROM kernels WHERE rank = 1"), 1);
}

TEST(KinetoImporter, Gzipped) {
  const auto in = temp_path("small.json.gz"), out = temp_path("small-gz.db");
  gzFile f = gzopen(in.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, kSmallTrace, static_cast<unsigned>(std::strlen(kSmallTrace)));
  gzclose(f);
  EXPECT_EQ(importers::detect_format(in), importers::Format::kKineto);
  import_traces({in}, out);
  EXPECT_EQ(sql_int(out, "SELECT count(*) FROM kernels"), 2);
}

// A Kineto trace of several MB (several of the reading thread's 1 MB
// batches) with every kind of event the importer reads or counts, names
// that first appear late (new strings in later batches), and the metadata
// after the events. `bad_at`: events (by index) written as broken JSON.
// `old_nccl`: every 50th iteration also an NCCL call as older PyTorch
// records it (a kernel without collective args, its "nccl:all_reduce" range).
std::string varied_trace(int iterations, const std::vector<int>& bad_at = {}, bool old_nccl = false) {
  std::string t = "{\"schemaVersion\": 1, \"traceEvents\": [\n";
  int event = 0;
  auto add = [&](const std::string& e) {
    const bool bad = std::find(bad_at.begin(), bad_at.end(), event) != bad_at.end();
    t += (event++ ? ",\n" : "") + (bad ? std::string("{\"ph\": \"X\", \"ts\": 1.2.3}") : e);
  };
  std::int64_t corr = 100;
  for (int i = 0; i < iterations; ++i) {
    const auto ts = std::to_string(1000000 + i * 500);
    const auto us = [&](int off) { return std::to_string(1000000 + i * 500 + off); };
    const auto op = "aten::Op" + std::to_string(i % 41) + (i > iterations / 2 ? "_late" : "");
    add(R"j({"ph": "X", "cat": "cpu_op", "name": ")j" + op + R"j(", "pid": 7, "tid": 11, "ts": )j" + ts +
        R"j(.125, "dur": 40.5, "args": {"Sequence number": )j" + std::to_string(i) +
        R"j(, "Fwd thread id": )j" + std::to_string(i % 2) + "}}");
    add(R"j({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 11, "ts": )j" + us(1) +
        R"j(, "dur": 30, "args": {"Input Dims": [[64, )j" + std::to_string(i % 7 + 1) +
        R"j(], [8, 16]], "Input type": ["c10::BFloat16", "float"]}})j");
    add(R"j({"ph": "X", "cat": "user_annotation", "name": "## forward )j" + std::to_string(i % 13) +
        R"j( ##", "pid": 7, "tid": 11, "ts": )j" + us(2) + R"j(, "dur": 20})j");
    add(R"j({"ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1)", "pid": 7, "tid": 11, "ts": )j" +
        us(3) + R"j(, "dur": 10})j");
    add(R"j({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 11, "ts": )j" + us(4) +
        R"j(, "dur": 5, "args": {"correlation": )j" + std::to_string(corr) + "}}");
    add(R"j({"ph": "X", "cat": "kernel", "name": "gemm_kernel_)j" + std::to_string(i % 17) +
        R"j(", "pid": 0, "tid": 7, "ts": )j" + us(10) + R"j(, "dur": 50, "args": {"correlation": )j" +
        std::to_string(corr++) + R"j(, "device": 0, "stream": 7, "grid": [1, 2, 3], "block": [128, 1, 1], )j"
        R"j("registers per thread": 32, "shared memory": 0}})j");
    add(R"j({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 12, "ts": )j" + us(5) +
        R"j(, "dur": 5, "args": {"correlation": )j" + std::to_string(corr) + "}}");
    add(R"j({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllToAll", "pid": 0, "tid": 9, "ts": )j" + us(70) +
        R"j(, "dur": 90, "args": {"correlation": )j" + std::to_string(corr++) +
        R"j(, "device": 0, "stream": 9, "Collective name": "all_to_all", "In msg nelems": 4096, )j"
        R"j("Out msg nelems": 4096, "Group size": 4, "dtype": "BFloat16", "Process Group Name": "3", )j"
        R"j("Process Group Description": "ep", "Process Group Ranks": "[0, 1, 2, 3]", "Seq": )j" +
        std::to_string(i) + "}}");
    // A kernel without args.correlation, linked by an ac2g flow.
    add(R"j({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemsetAsync", "pid": 7, "tid": 11, "ts": )j" + us(6) +
        R"j(, "dur": 3, "args": {"correlation": )j" + std::to_string(corr) + "}}");
    add(R"j({"ph": "f", "id": )j" + std::to_string(corr) + R"j(, "pid": 0, "tid": 7, "ts": )j" + us(200) +
        R"j(, "cat": "ac2g", "name": "ac2g", "bp": "e"})j");
    add(R"j({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": )j" + us(200) +
        R"j(, "dur": 4, "args": {"device": 0, "stream": 7, "bytes": 1024}})j");
    ++corr;
    add(R"j({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 8, "ts": )j" +
        us(210) + R"j(, "dur": 6, "args": {"device": 0, "stream": 8, "bytes": 65536, "correlation": 0}})j");
    add(R"j({"ph": "i", "s": "t", "name": "[memory]", "pid": 7, "tid": 11, "ts": )j" + us(7) +
        R"j(, "args": {"Device Type": 1, "Device Id": 0, "Bytes": )j" + std::to_string(i % 3 == 2 ? -512 : 512) +
        R"j(, "Addr": )j" + std::to_string(4096 * (i / 3)) + "}}");
    add(R"j({"ph": "X", "cat": "gpu_user_annotation", "name": "## forward ##", "pid": 0, "tid": 7, "ts": )j" + us(10) +
        R"j(, "dur": 100})j");
    add(R"j({"ph": "i", "name": "marker", "pid": 7, "tid": 11, "ts": )j" + us(8) + "}");
    if (i % 100 == 0) add(R"j({"ph": "M", "name": "thread_name", "pid": 7, "tid": 11, "args": {"name": "main"}})j");
    if (old_nccl && i % 50 == 0) {
      add(R"j({"ph": "X", "cat": "cpu_op", "name": "nccl:all_reduce", "pid": 7, "tid": 13, "ts": )j" + us(1) +
          R"j(, "dur": 30, "args": {"Input Dims": [[2048, 4]], "Input type": ["c10::BFloat16"]}})j");
      add(R"j({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 13, "ts": )j" +
          us(2) + R"j(, "dur": 5, "args": {"correlation": )j" + std::to_string(corr) + "}}");
      add(R"j({"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_bfloat16", "pid": 0, )j"
          R"j("tid": 21, "ts": )j" + us(100) + R"j(, "dur": 60, "args": {"correlation": )j" +
          std::to_string(corr++) + R"j(, "device": 0, "stream": 21}})j");
    }
  }
  t += "\n], \"deviceProperties\": [{\"id\": 0, \"name\": \"NVIDIA H100\", \"totalGlobalMem\": 85000000000, "
       "\"computeMajor\": 9, \"computeMinor\": 0, \"numSms\": 132}], "
       "\"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 2, \"world_size\": 4}, "
       "\"baseTimeNanoseconds\": 1700000000000000000}";
  return t;
}

// Every table, row by row in storage order (the run row without its creation
// time, meta without the integrity record, which holds the run row's digest).
std::string table_dump(const std::string& path) {
  sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
  std::vector<std::string> tables;
  {
    auto st = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
    while (st.step()) tables.emplace_back(st.text(0));
  }
  std::string out;
  for (const auto& table : tables) {
    const std::string query =
        table == "run"    ? "SELECT name, backend, world_size, start_ns, end_ns, config_json FROM run"
        : table == "meta" ? "SELECT * FROM meta WHERE key <> 'integrity' ORDER BY key"
                          : "SELECT * FROM " + table;  // a table scan: rowid (or key) order
    if (table.starts_with("sqlite_")) continue;
    auto st = db.prepare(query);
    out += "== " + table + "\n";
    while (st.step()) {
      for (int c = 0; c < sqlite3_column_count(st.handle()); ++c)
        out += (st.is_null(c) ? std::string("NULL") : std::string(st.text(c))) + "|";
      out += "\n";
    }
  }
  return out;
}

// The events parsed on several threads (a batch each at a time, appended in
// input order) give the tables of a parse on one thread, row for row.
TEST(KinetoImporter, ParsedOnSeveralThreadsAsOnOne) {
  const auto in = temp_path("varied.json");
  write_file(in, varied_trace(9000));
  ASSERT_GT(std::filesystem::file_size(in), std::size_t{5} << 20);  // several batches
  importers::ImportOptions one, many;
  one.threads = 1;
  many.threads = 4;
  const auto a = temp_path("varied-1.db"), b = temp_path("varied-4.db");
  const auto sa = import_traces({in}, a, one);
  const auto sb = import_traces({in}, b, many);
  EXPECT_EQ(sa.rows, sb.rows);
  EXPECT_EQ(sa.skipped, sb.skipped);
  expect_sql_ints(a, {
      {"SELECT count(*) FROM kernels", 9000 * 2},
      {"SELECT count(*) FROM kernels WHERE correlation_id IS NULL", 0},
      {"SELECT count(*) FROM collectives", 9000},
      {"SELECT count(DISTINCT seq) FROM collective_seq", 9000},
      {"SELECT count(*) FROM memset m JOIN api_calls c USING (correlation_id)", 9000},
      {"SELECT min(rank) FROM kernels", 2},
  });
  const auto dump = table_dump(a);
  EXPECT_EQ(dump, table_dump(b));
  EXPECT_NE(dump.find("aten::Op40_late"), std::string::npos);
}

// Every table's rows with string ids resolved, sorted: the same for two
// imports that wrote the same records in another order.
std::string sorted_rows(const std::string& path) {
  sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
  const std::vector<std::string> queries = {
      "SELECT k.rank, k.stream_id, k.start_ns, k.end_ns, s.value, k.correlation_id, k.launch_id FROM kernels k "
      "JOIN strings s ON s.id = k.name_id",
      "SELECT * FROM launch_configs",
      "SELECT a.rank, a.thread_id, a.start_ns, a.end_ns, a.api, s.value, a.correlation_id FROM api_calls a "
      "JOIN strings s ON s.id = a.name_id",
      "SELECT n.rank, n.thread_id, n.start_ns, n.end_ns, d.value, s.value, n.category, n.payload_int "
      "FROM nvtx_ranges n JOIN strings s ON s.id = n.name_id LEFT JOIN strings d ON d.id = n.domain_id",
      "SELECT rank, stream_id, start_ns, end_ns, correlation_id, name, in_nelems, out_nelems, dtype, group_size, "
      "process_group FROM collectives",
      "SELECT rank, stream_id, start_ns, end_ns, bytes, copy_kind, correlation_id FROM memcpy",
      "SELECT rank, stream_id, start_ns, end_ns, bytes, correlation_id FROM memset",
      "SELECT rank, ts_ns, kind, bytes, address FROM memory_events",
      "SELECT * FROM streams", "SELECT * FROM ranks", "SELECT * FROM devices",
      "SELECT key, value FROM run_config WHERE key NOT LIKE 'import.source%' AND key NOT LIKE 'import.rank%'"};
  std::string out;
  for (const auto& q : queries) {
    auto st = db.prepare(q);
    std::vector<std::string> rows;
    while (st.step()) {
      std::string row;
      for (int c = 0; c < sqlite3_column_count(st.handle()); ++c)
        row += (st.is_null(c) ? std::string("NULL") : std::string(st.text(c))) + "|";
      rows.push_back(row);
    }
    std::sort(rows.begin(), rows.end());
    out += "== " + q + "\n";
    for (const auto& r : rows) out += r + "\n";
  }
  return out;
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb1");
  ASSERT_NE(f, nullptr);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
}

// A file is written while it is parsed, with the time base and rank its
// last bytes hold (read ahead, after inflating a gzip file); that gives the
// records of a parse of the whole file first, those that need the whole file
// included (kernels linked by flows, NCCL kernels described by their call's
// range).
TEST(KinetoImporter, WrittenWhileParsedAsWhenParsedWhole) {
  const std::string text = varied_trace(3000, {}, /*old_nccl=*/true);
  const auto plain = temp_path("stream.json"), packed = temp_path("stream.json.gz");
  write_file(plain, text);
  write_gzip(packed, text);
  for (const auto& in : {plain, packed}) {
    const auto tail = importers::kineto::read_tail(in);
    ASSERT_TRUE(tail.has_value()) << in;
    EXPECT_EQ(tail->base_time_ns, 1700000000000000000);
    EXPECT_EQ(tail->rank, 2);
  }
  const auto a = temp_path("stream-plain.db"), b = temp_path("stream-whole.db"), c = temp_path("stream-gz.db");
  import_traces({plain}, a);
  {
    importers::TraceBuilder builder(b, importers::Format::kKineto, {plain}, {});
    importers::kineto::import_files({plain}, builder, 0, /*read_tails=*/false);
    builder.finish();
  }
  import_traces({packed}, c);
  EXPECT_EQ(sorted_rows(a), sorted_rows(c));
  const auto rows = sorted_rows(a), whole = sorted_rows(b);
  const auto diff = std::mismatch(rows.begin(), rows.end(), whole.begin(), whole.end());
  EXPECT_TRUE(rows == whole) << "first difference at byte " << (diff.first - rows.begin()) << ": "
                             << std::string(diff.first, diff.first + std::min<std::ptrdiff_t>(200, rows.end() - diff.first));
  // Counted from varied_trace: 2 kernels an iteration, and every 50th an
  // older NCCL kernel, described from its range as 2048 x 4 elements.
  expect_sql_ints(a, {
      {"SELECT count(*) FROM kernels", 3000 * 2 + 60},
      {"SELECT count(*) FROM collectives WHERE name = 'all_reduce' AND in_nelems = 8192", 60},
      {"SELECT count(*) FROM memset m JOIN api_calls c USING (correlation_id)", 3000},
      // ts 1000000 us + base 1.7e18 ns.
      {"SELECT min(start_ns) FROM nvtx_ranges", 1700000000000000000 + 1000000000 + 125},
      {"SELECT min(rank) FROM kernels", 2},
  });
}

// A Kineto file read straight into memory (`report TRACE.json.gz`) gives the
// model and the report that its trace file, imported, gives: every kind of
// event the importer reads, plain and gzipped; a real PyTorch MoE layer
// (recognised as MoE); HTA's traces where present.
TEST(KinetoImporter, ReadIntoMemoryAsFromItsTraceFile) {
  const std::string text = varied_trace(3000, {}, /*old_nccl=*/true);
  const auto plain = temp_path("memory.json"), packed = temp_path("memory.json.gz");
  write_file(plain, text);
  write_gzip(packed, text);
  expect_in_memory_as_from_file(plain);
  expect_in_memory_as_from_file(packed);
  const auto peer = MOETRACE_SOURCE_DIR + "/tests/data/gpu/torch_moe_peer.json.gz";
  expect_in_memory_as_from_file(peer);
  EXPECT_TRUE(analyzer::load_trace(peer).recognition.moe);
  for (const auto& rel : {kNccl, kRank0, kRank1})
    if (std::filesystem::exists(shared_data(rel))) expect_in_memory_as_from_file(shared_data(rel));
  // Bad input: the importer's one line, as `moetrace import` gives it.
  const auto bad = temp_path("memory-bad.json");
  write_file(bad, "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1.2.3}]}");
  const auto e = error_of([&] { analyzer::load_trace(bad); });
  EXPECT_NE(e.find(bad), std::string::npos) << e;
  EXPECT_EQ(e, import_error({bad}));
}

std::string one_line(const std::string& msg) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  return msg;
}

// gzip as gzread reads it: members one after another (`cat a.gz b.gz`) are
// one stream; a CRC that does not match the data is one line.
TEST(KinetoImporter, GzipMembersAndADamagedChecksum) {
  const std::string text = varied_trace(400);
  const auto plain = temp_path("members.json"), packed = temp_path("members.json.gz");
  write_file(plain, text);
  for (const auto& part : {text.substr(0, text.size() / 3), text.substr(text.size() / 3)}) {
    gzFile f = gzopen(packed.c_str(), "ab");
    ASSERT_NE(f, nullptr);
    gzwrite(f, part.data(), static_cast<unsigned>(part.size()));
    gzclose(f);
  }
  const auto a = temp_path("members-plain.db"), b = temp_path("members-gz.db");
  import_traces({plain}, a);
  import_traces({packed}, b);
  EXPECT_EQ(sql_int(b, "SELECT count(*) FROM kernels"), 400 * 2);
  EXPECT_EQ(sorted_rows(a), sorted_rows(b));

  // The last member's CRC-32 (the trailer's first four bytes) flipped.
  std::string bytes;
  {
    std::ifstream in(packed, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 8] = static_cast<char>(bytes[bytes.size() - 8] ^ 0x5a);
  write_file(packed, bytes);
  EXPECT_EQ(one_line(import_error({packed})), packed + ": damaged gzip data (incorrect data check)");
}

// distributedInfo after the events with the process groups of a large run
// (pg_config: here 64 groups of 1024 ranks, 330 KB): its rank and the time
// base after it are still read from the file's end.
TEST(KinetoImporter, TheTailHoldsALargeDistributedInfo) {
  std::string groups;
  for (int g = 0; g < 64; ++g) {
    groups += std::string(g ? ", " : "") + "{\"pg_name\": \"" + std::to_string(g) + "\", \"ranks\": [";
    for (int r = 0; r < 1024; ++r) groups += (r ? ", " : "") + std::to_string(r);
    groups += "]}";
  }
  const auto in = temp_path("large-info.json");
  write_file(in, R"({"traceEvents": [
{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 3, "args": {"correlation": 1, "device": 0, "stream": 7}}
], "distributedInfo": {"backend": "nccl", "rank": 777, "world_size": 1024, "pg_config": [)" + groups +
                     R"(]}, "baseTimeNanoseconds": 1700000000000000000})");
  ASSERT_GT(std::filesystem::file_size(in), std::size_t{300} << 10);
  const auto tail = importers::kineto::read_tail(in);
  ASSERT_TRUE(tail.has_value());
  EXPECT_EQ(tail->rank, 777);
  EXPECT_EQ(tail->base_time_ns, 1700000000000000000);
}

// The tail's keys: the last of several is taken, an absent one is left
// unset, and a key at the very start of the text is found.
TEST(KinetoImporter, TheTailTakesTheLastOfEachKey) {
  const auto in = temp_path("tail-keys.json");
  write_file(in, R"({"baseTimeNanoseconds": 1, "traceEvents": [
{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 3, "args": {"correlation": 1, "device": 0, "stream": 7}}
], "baseTimeNanoseconds": 22})");
  auto tail = importers::kineto::read_tail(in);
  ASSERT_TRUE(tail.has_value());
  EXPECT_EQ(tail->base_time_ns, 22);
  EXPECT_FALSE(tail->rank.has_value());
  write_file(in, R"({"baseTimeNanoseconds": 333, "traceEvents": []})");
  tail = importers::kineto::read_tail(in);
  ASSERT_TRUE(tail.has_value());
  EXPECT_EQ(tail->base_time_ns, 333);
}

// Keys named like the members after traceEvents, in the last event's args:
// the guess from the last bytes is wrong, and the import notices and does
// the file again, whole.
TEST(KinetoImporter, AWrongGuessFromTheLastBytesIsUndone) {
  const auto in = temp_path("misleading-tail.json"), out = temp_path("misleading-tail.db");
  write_file(in, R"({"traceEvents": [
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 11, "ts": 5, "dur": 2, "args": {"correlation": 1}},
{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 3, "args": {"correlation": 1, "device": 0, "stream": 7}},
{"ph": "i", "name": "note", "pid": 7, "tid": 11, "ts": 20, "args": {"distributedInfo": {"rank": 5}, "baseTimeNanoseconds": 4000}}
]})");
  const auto tail = importers::kineto::read_tail(in);
  ASSERT_TRUE(tail.has_value());
  EXPECT_EQ(tail->base_time_ns, 4000);  // the guess
  EXPECT_EQ(tail->rank, 5);
  import_traces({in}, out);
  EXPECT_EQ(sql_int(out, "SELECT start_ns FROM kernels"), 10000);  // no base: ts 10 us
  EXPECT_EQ(sql_int(out, "SELECT rank FROM kernels"), 0);           // file order
  EXPECT_EQ(sql_int(out, "SELECT count(*) FROM api_calls"), 1);

  // The guessed rank taken by the file before: no error, the file's own
  // rank (its place, 1) once it is parsed.
  const auto first = temp_path("rank5.json"), both = temp_path("misleading-two.db");
  write_file(first, R"({"distributedInfo": {"rank": 5}, "traceEvents": [
{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 3, "args": {"correlation": 1, "device": 0, "stream": 7}}
]})");
  import_traces({first, in}, both);
  EXPECT_EQ(sql_text(both, "SELECT group_concat(rank) FROM (SELECT DISTINCT rank FROM kernels ORDER BY rank)"),
            "1,5");
}

// Broken events in two batches: the first in the file is reported, whichever
// thread meets its batch first.
TEST(KinetoImporter, FirstBadEventInTheFileIsReportedOnAnyThreads) {
  const auto in = temp_path("varied-bad.json");
  write_file(in, varied_trace(9000, {40000, 120000}));
  const auto serial = error_of([&] {
    importers::ImportOptions o;
    o.threads = 1;
    import_traces({in}, temp_path("varied-bad-1.db"), o);
  });
  EXPECT_EQ(serial.rfind(in + ": invalid JSON at byte ", 0), 0u) << serial;
  const std::string text = varied_trace(9000, {40000, 120000});
  const auto first = text.find("1.2.3");
  ASSERT_NE(first, std::string::npos);
  // simdjson stops at the bad number's start, 1-based: the byte of "1.2.3".
  EXPECT_NE(serial.find("byte " + std::to_string(first + 1) + ":"), std::string::npos) << serial;
  for (int threads : {2, 4}) {
    importers::ImportOptions o;
    o.threads = threads;
    EXPECT_EQ(error_of([&] { import_traces({in}, temp_path("varied-bad-n.db"), o); }), serial) << threads;
    EXPECT_FALSE(std::filesystem::exists(temp_path("varied-bad-n.db")));
  }
}

TEST(KinetoImporter, BadInputGetsOneLine) {
  const auto truncated = temp_path("truncated.json");
  write_file(truncated, std::string(kSmallTrace).substr(0, 700));
  const auto msg = one_line(import_error({truncated}));
  EXPECT_EQ(msg.rfind(truncated + ": invalid JSON at byte 70", 0), 0u) << msg;
  EXPECT_NE(msg.find("(truncated file?)"), std::string::npos) << msg;

  const auto garbage = temp_path("garbage.json");
  write_file(garbage, "{\"traceEvents\": [1, 2,, 3]}");
  EXPECT_EQ(one_line(import_error({garbage})).rfind(garbage + ": invalid JSON at byte 23: ", 0), 0u);

  // Errors inside an event (simdjson's) point at the byte where it stopped.
  const auto bad_atom = temp_path("bad-atom.json");
  write_file(bad_atom, R"({"traceEvents": [{"ph": "X", "ts": tru}]})");
  EXPECT_EQ(one_line(import_error({bad_atom})),
            bad_atom + ": invalid JSON at byte 36: Problem while parsing an atom starting with the letter 't'");
  const auto bad_comma = temp_path("bad-comma.json");
  write_file(bad_comma, R"({"traceEvents": [{"ph": "X", "ts": 1,}]})");
  EXPECT_EQ(one_line(import_error({bad_comma})).rfind(bad_comma + ": invalid JSON at byte 38: ", 0), 0u);
  const auto bad_utf8 = temp_path("bad-utf8.json");
  write_file(bad_utf8, "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"\xff\"}]}");
  EXPECT_EQ(one_line(import_error({bad_utf8})),
            bad_utf8 + ": invalid JSON at byte 18: The input is not valid UTF-8 (in the value starting there)");
  const auto after = temp_path("after.json");
  write_file(after, R"({"traceEvents": []} x)");
  EXPECT_EQ(one_line(import_error({after})), after + ": invalid JSON at byte 21: unexpected 'x' after the top-level value");

  const auto not_trace = temp_path("config.json");
  write_file(not_trace, R"({"lr": 0.1, "layers": [1, 2]})");
  EXPECT_EQ(import_error({not_trace}), not_trace + ": JSON without traceEvents, not a Chrome/Kineto trace");

  const auto empty_events = temp_path("no-events.json");
  write_file(empty_events, R"({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]})");
  EXPECT_EQ(import_error({empty_events}),
            empty_events + ": no events to import (no kernels, copies, API calls or ranges)");

  // A gzip stream cut in half.
  const auto gz = temp_path("cut.json.gz");
  {
    std::string big = "{\"traceEvents\": [";
    for (int i = 0; i < 20000; ++i)
      big += "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k" + std::to_string(i) +
             "\", \"pid\": 0, \"tid\": 7, \"ts\": " + std::to_string(i * 10) + ", \"dur\": 5},";
    big += "{}]}";
    gzFile f = gzopen(gz.c_str(), "wb");
    gzwrite(f, big.data(), static_cast<unsigned>(big.size()));
    gzclose(f);
    std::filesystem::resize_file(gz, std::filesystem::file_size(gz) / 2);
  }
  EXPECT_EQ(import_error({gz}), gz + ": the gzip data is truncated (unexpected end of file)");

  const auto dup_a = temp_path("dup-a.json"), dup_b = temp_path("dup-b.json");
  write_file(dup_a, kSmallTrace);
  write_file(dup_b, kSmallTrace);
  EXPECT_EQ(import_error({dup_a, dup_b}),
            "dup-b.json (distributedInfo rank): rank 3 is also dup-a.json (distributedInfo rank); each input "
            "must be a different rank");
}

// Names and string values are read where they stand unless they hold an
// escape; escaped ones (short, and past the 16 bytes read without memchr)
// must read as their plain twins, with spaces around the tokens allowed.
TEST(KinetoImporter, EscapedNamesAndValuesReadAsTheirPlainTwins) {
  const auto plain = temp_path("plain-names.json"), escaped = temp_path("escaped-names.json");
  const auto plain_db = temp_path("plain-names.db"), escaped_db = temp_path("escaped-names.db");
  write_file(plain, R"({"traceEvents": [
    {"ph": "X", "cat": "Kernel", "name": "void at::native::vectorized_elementwise_kernel<4>", "pid": 0,
     "tid": 7, "ts": 1, "dur": 2, "args": {"correlation": 3, "stream": 7, "device": 0}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 0.5,
     "dur": 0.25, "args": {"correlation": 3}},
    {"ph": "X", "cat": "cpu_op", "name": "say \"hi\"\\now", "pid": 10, "tid": 11, "ts": 0, "dur": 3}]})");
  write_file(escaped, R"({"traceEvents": [
    { "p\u0068" : "X" , "c\u0061t":"Ker\u006eel", "name" : "void at::native::vectorized_elementwise_kern\u0065l<4>",
     "pid":0, "t\u0069d": 7, "ts": 1, "dur": 2, "args": {"correl\u0061tion": 3, "str\u0065am": 7, "device": 0} },
    {"ph": "X", "cat": "cuda_r\u0075ntime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 0.5,
     "dur": 0.25, "args": {"correlation": 3}},
    {"ph": "X", "cat": "cpu_op", "name": "say \u0022hi\"\\now", "pid": 10, "tid": 11, "ts": 0, "dur": 3}]})");
  import_traces({plain}, plain_db);
  import_traces({escaped}, escaped_db);
  const std::string rows =
      "SELECT (SELECT group_concat(s.value || ':' || k.start_ns || ':' || k.correlation_id, '|') FROM kernels k "
      "JOIN strings s ON s.id = k.name_id) || ' ' || (SELECT group_concat(s.value || ':' || a.end_ns, '|') FROM "
      "api_calls a JOIN strings s ON s.id = a.name_id) || ' ' || (SELECT group_concat(s.value, '|') FROM "
      "nvtx_ranges n JOIN strings s ON s.id = n.name_id)";
  EXPECT_EQ(sql_text(plain_db, rows),
            "void at::native::vectorized_elementwise_kernel<4>:1000:3 cudaLaunchKernel:750 say \"hi\"\\now");
  EXPECT_EQ(sql_text(escaped_db, rows), sql_text(plain_db, rows));

  // A bad escape in a name is bad JSON, as simdjson has it.
  const auto bad = temp_path("bad-escape.json");
  write_file(bad, R"({"traceEvents": [{"ph": "X", "n\ame": "k"}]})");
  EXPECT_EQ(one_line(import_error({bad})).rfind(bad + ": invalid JSON at byte ", 0), 0u);
}

TEST(KinetoImporter, MicrosToNs) {
  using importers::kineto::micros_to_ns;
  EXPECT_EQ(micros_to_ns("1682725898236567"), 1682725898236567000LL);
  EXPECT_EQ(micros_to_ns("4458676522690.655"), 4458676522690655LL);
  EXPECT_EQ(micros_to_ns("0.0005"), 1);     // rounds half up
  EXPECT_EQ(micros_to_ns("0.0004"), 0);
  EXPECT_EQ(micros_to_ns("1.5e3"), 1500000);
  EXPECT_EQ(micros_to_ns("2E-3"), 2);
  EXPECT_EQ(micros_to_ns("-1.25"), -1250);
  EXPECT_EQ(micros_to_ns("9223372036854775.807"), INT64_MAX);
  EXPECT_EQ(micros_to_ns("9223372036854775.808"), std::nullopt);
  EXPECT_EQ(micros_to_ns("1e400"), std::nullopt);
  // More than 18 integer digits with a fraction: no overflow on the way to
  // "does not fit" (the fast path stops at its 16th digit; fuzz finding).
  EXPECT_EQ(micros_to_ns("16827258982362725890.5"), std::nullopt);
  EXPECT_EQ(micros_to_ns("-99999999999999999999999.25"), std::nullopt);
  EXPECT_EQ(micros_to_ns("123456789012345.5"), 123456789012345500LL);  // 15 digits: the fast path
  EXPECT_EQ(micros_to_ns("12x"), std::nullopt);
  EXPECT_EQ(micros_to_ns(""), std::nullopt);
  EXPECT_EQ(micros_to_ns("1."), 1000);  // not JSON, but the general path takes it
  EXPECT_EQ(micros_to_ns("-"), std::nullopt);
  // The fast path for [-]d{1,15}[.d+] agrees with the general one (which an
  // exponent forces) on random timestamps.
  std::mt19937_64 rng(99);
  for (int i = 0; i < 20000; ++i) {
    std::string t = (rng() % 4 == 0 ? "-" : "") + std::to_string(rng() % 1000000000000000ULL);
    if (const auto decimals = rng() % 9; decimals > 0) {
      t += '.';
      for (std::uint64_t d = 0; d < decimals; ++d) t += static_cast<char>('0' + rng() % 10);
    }
    ASSERT_EQ(micros_to_ns(t), micros_to_ns(t + "e0")) << t;
  }
}

}  // namespace
}  // namespace moetrace::testing
