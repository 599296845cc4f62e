// Every column the trace writer fills, read back with SQL rather than the
// loader: each value where the record holds one, NULL where the record marks
// it absent. The conventions are records.h's: a negative id, size or time is
// unknown, a correlation id of 0 is none, "" text is none, nullopt is
// unknown, an address of 0 (a buffer's) is none. Every expected row is
// written out from the records below by hand.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/sqlite.h"
#include "text_trace.h"

namespace moetrace {
namespace {

using namespace instrument;

// The rows of `table` as "v1|v2|...", SQLite's quote() of each column in
// the order given ('text', NULL, integers and reals as written).
std::vector<std::string> quoted_rows(const std::string& path, std::string_view table,
                                     const std::vector<std::string>& columns, std::string_view order = "rowid") {
  std::string q = "SELECT ";
  for (std::size_t c = 0; c < columns.size(); ++c) q += (c ? " || '|' || quote(" : "quote(") + columns[c] + ")";
  q += " FROM " + std::string(table) + " ORDER BY " + std::string(order);
  sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
  auto st = db.prepare(q);
  std::vector<std::string> rows;
  while (st.step()) rows.emplace_back(st.text(0));
  return rows;
}

using Rows = std::vector<std::string>;

TEST(TraceWriterColumns, EachValueOrNullWhereTheRecordSaysAbsent) {
  const auto path = testing::temp_path("writer-columns.db");
  RunRecord run;
  run.backend = "test";
  int gemm = 0, range = 0, domain = 0;
  {
    TraceWriter w(path, run);
    gemm = w.intern("gemm").value;
    range = w.intern("forward").value;
    domain = w.intern("moe").value;

    w.add(DeviceRecord{DeviceId(0), "H100", "GPU-1", 9, 0, 132, 80, true});
    w.add(DeviceRecord{DeviceId(1), "sim", "", -1, -1, -1, -1, false});
    w.add(RankRecord{RankId(0), DeviceId(0), 3, "node7", 4242});
    w.add(RankRecord{RankId(1), DeviceId(1), -1, "", -1});
    w.add(StreamRecord{StreamId(0), RankId(0), DeviceId(0), 13, kRoleComm, "nccl", -1});
    w.add(StreamRecord{StreamId(1), RankId(1), DeviceId{}, -1, kRoleCompute, "", 0});
    w.add(LayerRecord{2, "moe", 8, 2, 1024, 4096, 512});
    w.add(LayerRecord{3, "dense", -1, -1, -1, -1, -1});

    w.add(KernelRecord{.rank = RankId(0), .stream = StreamId(0), .start_ns = 100, .end_ns = 150,
                       .name = StringId(gemm), .correlation_id = 7, .grid = {4, 2, 1}, .block = {128, 1, 1},
                       .shared_bytes = 1024, .registers = 32, .op = OpId(9)});
    // No correlation, launch configuration or op.
    w.add(KernelRecord{.rank = RankId(1), .stream = StreamId(1), .start_ns = 200, .end_ns = 210,
                       .name = StringId(gemm)});

    w.add(MemcpyRecord{RankId(0), StreamId(0), 10, 20, 64, schema::CopyKind::kDeviceToHost,
                       schema::MemoryKind::kDevice, schema::MemoryKind::kPinnedHost, 8, OpId(9)});
    w.add(MemcpyRecord{RankId(0), StreamId(0), 30, 40, 64, schema::CopyKind::kUnknown, schema::MemoryKind::kUnknown,
                       schema::MemoryKind::kUnknown, 0, OpId{}});
    w.add(MemsetRecord{RankId(0), StreamId(0), 50, 60, 32, 255, 9, OpId(9)});
    w.add(MemsetRecord{RankId(0), StreamId(0), 70, 80, 32, std::nullopt, 0, OpId{}});
    w.add(MemoryEventRecord{RankId(0), 5, true, 4096, 1024, schema::MemoryKind::kDevice, StreamId(0), 11,
                            BufferId(3)});
    w.add(MemoryEventRecord{RankId(0), 6, false, 4096, 1024, schema::MemoryKind::kManaged, StreamId{}, 0,
                            BufferId{}});
    w.add(SyncRecord{RankId(0), StreamId(0), 300, 310, 2, 12, StreamId(1), 13});
    w.add(SyncRecord{RankId(0), StreamId{}, 320, 330, 3, 0, StreamId{}, 0});
    w.add(OverheadRecord{RankId(0), 77, 1, 2, "cupti_buffer_flush"});
    w.add(OverheadRecord{RankId(0), -1, 3, 4, "driver_compiler"});

    w.add(NvtxRangeRecord{.rank = RankId(0), .thread_id = 77, .start_ns = 90, .end_ns = 400,
                          .domain = StringId(domain), .name = StringId(range), .category = 4, .color = 255,
                          .payload_int = -5, .payload_double = 0.5});
    // Never closed; no domain, category, color or payload.
    w.add(NvtxRangeRecord{.rank = RankId(0), .thread_id = 78, .start_ns = 95, .name = StringId(range)});

    w.add(CollectiveRecord{RankId(0), StreamId(0), 500, 600, 14, "all_to_all", 100, 200, "BFloat16", 2, "[0, 1]",
                           "ep", "[50, 50]", "[100, 100]", -1});
    w.add(CollectiveRecord{RankId(0), StreamId{}, 700, 800, 0, "allreduce", -1, -1, "", -1, "", "", "", "", -1});

    w.add(OpRangeRecord{.id = OpId(9), .rank = RankId(0), .stream = StreamId(0), .kind = OpKind::kExpertFfn,
                        .name = StringId(gemm), .layer = 2, .iteration = 1, .micro_batch = 0, .chunk = 3,
                        .phase = Phase::kBackward, .start_ns = 100, .end_ns = 150, .launch_start_ns = 80,
                        .launch_end_ns = 85, .flops = 2.5e9, .bytes = 4096, .peer = RankId(1), .nvtx_id = 0});
    w.add(OpRangeRecord{.id = OpId(10), .rank = RankId(0), .stream = StreamId(0), .start_ns = 160, .end_ns = 170});

    w.add(BufferRecord{BufferId(3), RankId(0), "T_DI", 1024, schema::MemoryKind::kDevice, 2, 1, 5, 6, 4096});
    w.add(BufferRecord{BufferId(4), RankId(0), "params", 8, schema::MemoryKind::kPinnedHost, -1, -1, -1, -1, 0});
  }

  const auto d = std::to_string(domain), g = std::to_string(gemm), r = std::to_string(range);
  EXPECT_EQ(quoted_rows(path, "devices",
                        {"id", "name", "uuid", "compute_major", "compute_minor", "sm_count", "memory_bytes",
                         "simulated"},
                        "id"),
            (Rows{"0|'H100'|'GPU-1'|9|0|132|80|1", "1|'sim'|NULL|NULL|NULL|NULL|NULL|0"}));
  EXPECT_EQ(quoted_rows(path, "ranks", {"rank", "device_id", "local_rank", "host", "pid"}, "rank"),
            (Rows{"0|0|3|'node7'|4242", "1|1|NULL|NULL|NULL"}));
  EXPECT_EQ(quoted_rows(path, "streams", {"id", "rank", "device_id", "native_id", "role", "name", "priority"}, "id"),
            (Rows{"0|0|0|13|'comm'|'nccl'|-1", "1|1|NULL|NULL|'compute'|NULL|0"}));
  EXPECT_EQ(quoted_rows(path, "layers",
                        {"layer", "kind", "num_experts", "top_k", "model_dim", "hidden_dim", "tokens"}, "layer"),
            (Rows{"2|'moe'|8|2|1024|4096|512", "3|'dense'|NULL|NULL|NULL|NULL|NULL"}));
  // The first launch configuration the writer sees is number 0.
  EXPECT_EQ(quoted_rows(path, "launch_configs",
                        {"id", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "shared_bytes",
                         "registers"},
                        "id"),
            (Rows{"0|4|2|1|128|1|1|1024|32"}));
  EXPECT_EQ(quoted_rows(path, "kernels",
                        {"rank", "stream_id", "start_ns", "end_ns", "name_id", "correlation_id", "launch_id",
                         "op_id"}),
            (Rows{"0|0|100|150|" + g + "|7|0|9", "1|1|200|210|" + g + "|NULL|NULL|NULL"}));
  // copy_kind 2 = DtoH, memory kinds 1 = device, 2 = pinned host (schema.h).
  EXPECT_EQ(quoted_rows(path, "memcpy",
                        {"rank", "stream_id", "start_ns", "end_ns", "bytes", "copy_kind", "src_kind", "dst_kind",
                         "correlation_id", "op_id"}),
            (Rows{"0|0|10|20|64|2|1|2|8|9", "0|0|30|40|64|0|0|0|NULL|NULL"}));
  EXPECT_EQ(quoted_rows(path, "memset",
                        {"rank", "stream_id", "start_ns", "end_ns", "bytes", "value", "correlation_id", "op_id"}),
            (Rows{"0|0|50|60|32|255|9|9", "0|0|70|80|32|NULL|NULL|NULL"}));
  // kind: 1 an allocation, 0 a free; memory kind 3 = managed; ids numbered
  // by the writer from 1, as SQLite numbers rowids.
  EXPECT_EQ(quoted_rows(path, "memory_events",
                        {"rank", "ts_ns", "kind", "address", "bytes", "memory_kind", "stream_id", "correlation_id",
                         "buffer_id", "id"},
                        "id"),
            (Rows{"0|5|1|4096|1024|1|0|11|3|1", "0|6|0|4096|1024|3|NULL|NULL|NULL|2"}));
  EXPECT_EQ(quoted_rows(path, "sync_events",
                        {"rank", "stream_id", "start_ns", "end_ns", "kind", "correlation_id", "wait_stream_id",
                         "event_record_correlation_id"}),
            (Rows{"0|0|300|310|2|12|1|13", "0|NULL|320|330|3|NULL|NULL|NULL"}));
  EXPECT_EQ(quoted_rows(path, "overhead", {"rank", "thread_id", "start_ns", "end_ns", "kind"}),
            (Rows{"0|77|1|2|'cupti_buffer_flush'", "0|NULL|3|4|'driver_compiler'"}));
  EXPECT_EQ(quoted_rows(path, "nvtx_ranges",
                        {"rank", "thread_id", "start_ns", "end_ns", "domain_id", "name_id", "category", "color",
                         "payload_int", "payload_double"}),
            (Rows{"0|77|90|400|" + d + "|" + r + "|4|255|-5|0.5",
                  "0|78|95|NULL|NULL|" + r + "|NULL|NULL|NULL|NULL"}));
  EXPECT_EQ(quoted_rows(path, "collectives",
                        {"rank", "stream_id", "start_ns", "end_ns", "correlation_id", "name", "in_nelems",
                         "out_nelems", "dtype", "group_size", "group_ranks", "process_group", "in_splits",
                         "out_splits"}),
            (Rows{"0|0|500|600|14|'all_to_all'|100|200|'BFloat16'|2|'[0, 1]'|'ep'|'[50, 50]'|'[100, 100]'",
                  "0|NULL|700|800|NULL|'allreduce'|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL"}));
  // kind and phase as their enum values; flops 2.5e9 as SQLite quotes a real.
  const auto ffn = std::to_string(static_cast<int>(OpKind::kExpertFfn));
  const auto other = std::to_string(static_cast<int>(OpKind::kOtherOp));
  const auto bwd = std::to_string(static_cast<int>(Phase::kBackward));
  const auto fwd = std::to_string(static_cast<int>(Phase::kForward));
  EXPECT_EQ(quoted_rows(path, "op_ranges",
                        {"id", "rank", "stream_id", "kind", "name_id", "layer", "iteration", "micro_batch", "chunk",
                         "phase", "start_ns", "end_ns", "launch_start_ns", "launch_end_ns", "flops", "bytes",
                         "peer_rank", "nvtx_id", "deps", "buffers"},
                        "id"),
            (Rows{"9|0|0|" + ffn + "|" + g + "|2|1|0|3|" + bwd + "|100|150|80|85|2500000000.0|4096|1|0|NULL|NULL",
                  "10|0|0|" + other + "|NULL|NULL|NULL|NULL|NULL|" + fwd +
                      "|160|170|NULL|NULL|NULL|NULL|NULL|NULL|NULL|NULL"}));
  EXPECT_EQ(quoted_rows(path, "buffers",
                        {"id", "rank", "tag", "bytes", "memory_kind", "layer", "chunk", "alloc_ns", "free_ns",
                         "address"},
                        "id"),
            (Rows{"3|0|'T_DI'|1024|1|2|1|5|6|4096", "4|0|'params'|8|2|NULL|NULL|NULL|NULL|NULL"}));
}

}  // namespace
}  // namespace moetrace
