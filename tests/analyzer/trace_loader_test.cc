#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "moetrace/analyzer/trace.h"
#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/sqlite.h"
#include "loaded_trace.h"
#include "shared_data.h"
#include "test_paths.h"

namespace moetrace::analyzer {
namespace {

TEST(TraceLoader, SortsActivitiesAndOpsPerTrack) {
  const auto path = testing::temp_path("tracks.db");
  testing::write_text_trace(path, R"(
    stream id=5 rank=1 role=compute
    stream id=2 rank=0 role=comm
    stream id=1 rank=0 role=compute
    kernel rank=1 stream=5 start=300 end=400
    kernel rank=0 stream=1 start=200 end=250
    kernel rank=0 stream=1 start=100 end=150
    op id=7 rank=0 stream=2 kind=combine_all_to_all start=50 end=60
    op id=3 rank=0 stream=2 kind=dispatch_all_to_all start=10 end=20
  )");
  const auto t = load_trace(path);
  ASSERT_EQ(t.streams.size(), 3u);
  // Streams ordered by (rank, id).
  EXPECT_EQ(t.streams[0].id, StreamId(1));
  EXPECT_EQ(t.streams[1].id, StreamId(2));
  EXPECT_EQ(t.streams[2].id, StreamId(5));
  EXPECT_EQ(t.stream_index(StreamId(5)), 2);
  EXPECT_EQ(t.stream_index(StreamId(9)), -1);
  auto k0 = t.track_activities(0);
  ASSERT_EQ(k0.size(), 2u);
  EXPECT_EQ(k0[0].start_ns, 100);
  EXPECT_EQ(k0[1].start_ns, 200);
  EXPECT_EQ(t.track_activities(1).size(), 0u);
  EXPECT_EQ(t.track_activities(2).size(), 1u);
  auto ops = t.track_ops(1);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].id, OpId(3));
  EXPECT_EQ(ops[1].id, OpId(7));
  EXPECT_EQ(t.event_count(), 5);
}

TEST(TraceLoader, MissingFile) {
  EXPECT_EQ(testing::load_error("/nonexistent/x.db"), "/nonexistent/x.db: no such file");
}

TEST(TraceLoader, NotSqlite) {
  const auto path = testing::temp_path("text.db");
  std::ofstream(path) << "this is not a database, it is a long enough line of text\n";
  EXPECT_EQ(testing::load_error(path), path + ": not JSON, not SQLite, not a trace moetrace reads (moetrace traces, "
                                             "Nsight Systems SQLite exports, PyTorch-profiler JSON, gzipped or not)");
}

TEST(TraceLoader, ForeignSqlite) {
  const auto path = testing::temp_path("foreign.db");
  std::filesystem::remove(path);
  {
    sqlite::Database db(path, sqlite::Database::Mode::kCreate);
    db.exec("CREATE TABLE t (x)");
  }
  EXPECT_EQ(testing::load_error(path), path + ": a SQLite database but not a moetrace trace");
}

// An Nsight Systems export is read through its importer (trace file
// readers that need a moetrace trace, open_trace, name it instead).
TEST(TraceLoader, NsightExportIsReadByItsImporter) {
  const std::string path = testing::shared_data("nsys/nsys-ai-mock.sqlite");
  MOETRACE_NEED_SHARED(path);
  const auto t = load_trace(path);
  EXPECT_EQ(t.run.backend, "nsys");
  EXPECT_EQ(t.run.integrity, "imported in memory");
  EXPECT_EQ(t.run.path, path);
  std::string summary_error = "(no error)";
  try {
    summarize_trace(path);
  } catch (const Error& e) {
    summary_error = e.what();
  }
  EXPECT_EQ(summary_error,
            path + ": an Nsight Systems export, not a moetrace trace; convert it with `moetrace import`");
}

TEST(TraceLoader, NewerSchema) {
  const auto path = testing::temp_path("newer.db");
  testing::write_text_trace(path, "kernel rank=0 stream=0 start=0 end=1\n");
  testing::alter_trace(path, "PRAGMA user_version=3");
  EXPECT_EQ(testing::load_error(path),
            path + ": trace schema version 3 is newer than this moetrace reads (up to 2); upgrade moetrace");
}

// Version-1 traces (op_deps and op_buffers as tables) stay readable: one is
// built by hand, as an old writer left it, from schemas/trace_schema_v2.sql
// and then trace_schema_v1.sql (version 1 as its difference from version 2).
TEST(TraceLoader, ReadsVersion1Traces) {
  const auto path = testing::temp_path("v1.db");
  std::filesystem::remove(path);
  std::string sql;
  for (const char* file : {"/schemas/trace_schema_v2.sql", "/schemas/trace_schema_v1.sql"}) {
    std::ifstream sql_file(std::string(MOETRACE_SOURCE_DIR) + file);
    ASSERT_TRUE(sql_file.good()) << file;
    sql.append(std::istreambuf_iterator<char>(sql_file), std::istreambuf_iterator<char>());
  }
  {
    sqlite::Database db(path, sqlite::Database::Mode::kCreate);
    db.exec(sql);
    db.exec("PRAGMA application_id=1297040724");
    db.exec("PRAGMA user_version=1");
    db.exec(R"(
      INSERT INTO meta VALUES ('format', 'moetrace'), ('finalized', '1');
      INSERT INTO run(id, backend, world_size, moetrace_version, created_unix_s) VALUES (1, 'sim', 1, '0.1.0', 0);
      INSERT INTO streams(id, rank, role) VALUES (0, 0, 'compute');
      INSERT INTO op_ranges(id, rank, stream_id, kind, phase, start_ns, end_ns) VALUES
        (1, 0, 0, 0, 0, 0, 10), (2, 0, 0, 0, 0, 10, 20), (3, 0, 0, 0, 0, 20, 30);
      INSERT INTO op_deps VALUES (2, 1), (3, 1), (3, 2);
      INSERT INTO buffers(id, rank, tag, bytes, alloc_ns, free_ns) VALUES (9, 0, 'T_DI', 64, 0, 30);
      INSERT INTO op_buffers VALUES (1, 9, 2), (3, 9, 1);
    )");
  }
  const auto t = load_trace(path);
  EXPECT_EQ(t.run.schema_version, 1);
  ASSERT_EQ(t.ops.size(), 3u);
  ASSERT_EQ(t.op_deps.size(), 3u);
  EXPECT_EQ(t.op_deps[2].op, OpId(3));
  EXPECT_EQ(t.op_deps[2].dep, OpId(2));
  ASSERT_EQ(t.op_buffers.size(), 2u);
  EXPECT_EQ(t.op_buffers[0].access, schema::Access::kWrite);
  EXPECT_EQ(t.op_buffers[1].op, OpId(3));
  const auto summary = summarize_trace(path);
  for (const auto& [table, rows] : summary.table_rows) {
    if (table == "op_deps") {
      EXPECT_EQ(rows, 3);
    } else if (table == "op_buffers") {
      EXPECT_EQ(rows, 2);
    }
  }
}

// Since version 2 an op's links are JSON arrays on its row; a damaged one is
// named, not misread.
TEST(TraceLoader, DamagedOpLinksAreNamed) {
  const auto path = testing::temp_path("badlinks.db");
  testing::write_text_trace(path, R"(
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=gate start=0 end=10
    op id=2 rank=0 stream=0 kind=gate start=10 end=20
    dep op=2 on=1
  )");
  {
    sqlite::Database db(path, sqlite::Database::Mode::kReadWrite);
    EXPECT_EQ(db.query_int("SELECT count(*) FROM op_deps WHERE op_id = 2 AND dep_op_id = 1"), 1);  // the view
    db.exec("UPDATE op_ranges SET deps = '[1,' WHERE id = 2");
  }
  EXPECT_EQ(testing::load_error(path), path + ": op_ranges.deps of op 2 is not a JSON array of op ids (damaged trace)");
}

// A collective's sequence number (Kineto's "Seq") is kept in collective_seq,
// keyed by the collectives row, and read back onto its collective; a call
// without one reads -1. A changed number is damage the integrity record names.
TEST(TraceLoader, CollectiveSequenceNumbers) {
  const auto path = testing::temp_path("collective_seq.db");
  testing::write_text_trace(path, R"(
    stream id=0 rank=0 role=comm
    stream id=1 rank=1 role=comm
    kernel rank=0 stream=0 start=0 end=10 corr=7 name=ncclDevKernel_AllReduce_Sum
    kernel rank=1 stream=1 start=2 end=11 corr=9 name=ncclDevKernel_AllReduce_Sum
    collective rank=1 start=2 end=11 corr=9 name=allreduce process_group=0(default_pg) seq=41
    collective rank=0 start=0 end=10 corr=7 name=allreduce process_group=0(default_pg) seq=41
    collective rank=0 start=20 end=30 corr=8 name=allreduce process_group=0(default_pg)
  )");
  const Trace t = load_trace(path);
  ASSERT_EQ(t.collectives.size(), 3u);
  std::map<std::pair<int, std::int64_t>, std::int64_t> seq;  // (rank, correlation) -> seq
  for (const auto& c : t.collectives) seq[{c.rank.value, c.correlation_id}] = c.seq;
  EXPECT_EQ(seq[std::make_pair(0, std::int64_t{7})], 41);
  EXPECT_EQ(seq[std::make_pair(1, std::int64_t{9})], 41);
  EXPECT_EQ(seq[std::make_pair(0, std::int64_t{8})], -1);
  {
    sqlite::Database db(path, sqlite::Database::Mode::kReadWrite);
    EXPECT_EQ(db.query_int("SELECT count(*) FROM collective_seq"), 2);
    db.exec("UPDATE collective_seq SET seq = 42 WHERE seq = 41 AND collective_id = (SELECT min(collective_id) FROM "
            "collective_seq)");
  }
  EXPECT_EQ(testing::load_error(path),
            path + ": table collective_seq is damaged: its rows differ from those the writer recorded");
}

TEST(TraceLoader, EmptyTrace) {
  const auto path = testing::temp_path("empty.db");
  testing::write_text_trace(path, "");
  EXPECT_EQ(testing::load_error(path), path +
                                ": the trace holds no events (was the run empty, or killed before "
                                "its first flush?)");
}

TEST(TraceLoader, TruncatedTrace) {
  const auto path = testing::temp_path("truncated.db");
  {
    instrument::RunRecord run;
    run.backend = "test";
    instrument::TraceWriter w(path, run);
    for (int i = 0; i < 20000; ++i) {
      instrument::KernelRecord k;
      k.rank = RankId(0);
      k.stream = StreamId(0);
      k.start_ns = i * 10;
      k.end_ns = i * 10 + 5;
      k.name = w.intern("kernel");
      w.add(k);
    }
  }
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  const auto msg = testing::load_error(path);
  EXPECT_EQ(msg.rfind(path + ": the file is damaged or truncated", 0), 0u) << msg;
}

TEST(TraceLoader, ReversedIntervalIsDamage) {
  const auto path = testing::temp_path("reversed.db");
  testing::write_text_trace(path, "kernel rank=0 stream=0 start=10 end=5\n");
  EXPECT_EQ(testing::load_error(path), path + ": kernels has an event that ends before it starts (10 > 5 ns); damaged trace");
}

TEST(TraceLoader, HugeExpertIndexIsADamagedTraceNotAnAllocation) {
  const auto path = testing::temp_path("huge-expert.db");
  testing::write_text_trace(path, R"(
    stream id=0 rank=0
    op rank=0 stream=0 kind=gate start=0 end=1
    load iteration=0 layer=0 src=0 expert=2000000000 tokens=1
  )");
  EXPECT_EQ(testing::load_error(path), path + ": expert_load has expert 2000000000 (expected 0 .. 1048575); damaged trace");
}

}  // namespace
}  // namespace moetrace::analyzer
