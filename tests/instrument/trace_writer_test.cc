#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <thread>

#include "moetrace/analyzer/trace.h"
#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/op_links.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/trace_file.h"
#include "text_trace.h"

namespace moetrace {
namespace {

using instrument::TraceWriter;

instrument::RunRecord test_run(int world = 1) {
  instrument::RunRecord r;
  r.backend = "test";
  r.world_size = world;
  return r;
}

instrument::KernelRecord kernel(TraceWriter& w, int rank, std::int64_t start, std::int64_t corr) {
  instrument::KernelRecord k;
  k.rank = RankId(rank);
  k.stream = StreamId(rank);
  k.start_ns = start;
  k.end_ns = start + 10;
  k.name = w.intern("k" + std::to_string(corr % 7));
  k.correlation_id = corr;
  return k;
}

std::int64_t count_rows(const std::string& path, const std::string& table) {
  sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
  return db.query_int("SELECT count(*) FROM " + table).value_or(-1);
}

TEST(TraceWriter, CreatesAVersionedTraceThatReadersAccept) {
  const auto path = testing::temp_path("versioned.db");
  {
    TraceWriter w(path, test_run());
    w.add(kernel(w, 0, 100, 1));
  }
  auto db = schema::open_trace(path);  // throws if not a moetrace trace
  EXPECT_EQ(db.pragma_int("application_id"), schema::kApplicationId);
  EXPECT_EQ(db.pragma_int("user_version"), 2);
  // Closed traces are single files with indexes and the finalized mark.
  EXPECT_EQ(db.query_int("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = "
                         "'kernels_by_correlation'"),
            1);
  auto st = db.prepare("SELECT value FROM meta WHERE key = 'finalized'");
  ASSERT_TRUE(st.step());
  EXPECT_EQ(st.text(0), "1");
  EXPECT_EQ(db.query_int("SELECT count(*) FROM op_kinds"),
            static_cast<std::int64_t>(all_op_kinds().size()));
}

TEST(TraceWriter, RoundTripsEveryRecordType) {
  const auto path = testing::temp_path("roundtrip.db");
  testing::write_text_trace(path, R"(
    run world_size=2 backend=sim variant=pipemoe simulated=1
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    stream id=2 rank=1 role=compute
    op id=10 rank=0 stream=0 kind=expert_ffn layer=3 iteration=2 micro_batch=1 chunk=0 phase=bwd start=100 end=400
    op id=11 rank=0 stream=1 kind=dispatch_all_to_all layer=3 iteration=2 chunk=1 start=0 end=90 bytes=4096 peer=1
    kernel rank=0 stream=0 start=120 end=380 name=gemm corr=5 op=10
    memcpy rank=1 stream=2 start=10 end=20 bytes=64 copy_kind=2 corr=6
    api rank=0 thread=7 start=90 end=95 name=cudaLaunchKernel corr=5
    alloc rank=0 ts=1 address=4096 bytes=1024 buffer=3
    free rank=0 ts=500 address=4096 bytes=1024 buffer=3
    buffer id=3 rank=0 tag=T_DI bytes=1024 layer=3 chunk=1 alloc=1 free=500
    use op=10 buffer=3 access=rw
    load iteration=2 layer=3 src=1 expert=5 tokens=77
    place iteration=2 layer=3 expert=5 rank=1 role=replica
    dep op=10 on=11
  )");
  const auto t = analyzer::load_trace(path);
  EXPECT_EQ(t.run.backend, "sim");
  EXPECT_EQ(t.run.variant, "pipemoe");
  EXPECT_TRUE(t.run.simulated);
  EXPECT_EQ(t.run.world_size, 2);
  EXPECT_EQ(t.run.start_ns, 0);
  EXPECT_EQ(t.run.end_ns, 500);
  ASSERT_EQ(t.streams.size(), 3u);
  ASSERT_EQ(t.ops.size(), 2u);
  const auto& op = t.ops[static_cast<std::size_t>(t.op_index(OpId(10)))];
  EXPECT_EQ(op.kind, OpKind::kExpertFfn);
  EXPECT_EQ(op.layer, 3);
  EXPECT_EQ(op.iteration, 2);
  EXPECT_EQ(op.micro_batch, 1);
  EXPECT_EQ(op.chunk, 0);
  EXPECT_EQ(op.phase, Phase::kBackward);
  EXPECT_EQ(op.start_ns, 100);
  EXPECT_EQ(op.end_ns, 400);
  const auto& a2a = t.ops[static_cast<std::size_t>(t.op_index(OpId(11)))];
  EXPECT_EQ(a2a.bytes, 4096);
  EXPECT_EQ(a2a.peer, RankId(1));
  ASSERT_EQ(t.activities.size(), 2u);
  const analyzer::Activity* k = nullptr;
  for (const auto& a : t.activities)
    if (a.type == analyzer::ActivityType::kKernel) k = &a;
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(t.str(k->name), "gemm");
  EXPECT_EQ(k->op, t.op_index(OpId(10)));
  ASSERT_NE(t.api_call(5), nullptr);
  EXPECT_EQ(t.str(t.api_call(5)->name), "cudaLaunchKernel");
  EXPECT_EQ(t.api_call(5)->thread_id, 7);
  ASSERT_EQ(t.memory_events.size(), 2u);
  EXPECT_TRUE(t.memory_events[0].alloc);
  EXPECT_FALSE(t.memory_events[1].alloc);
  ASSERT_EQ(t.buffers.size(), 1u);
  EXPECT_EQ(t.buffers[0].tag, "T_DI");
  ASSERT_EQ(t.op_buffers.size(), 1u);
  EXPECT_EQ(t.op_buffers[0].access, schema::Access::kReadWrite);
  ASSERT_EQ(t.expert_load.size(), 1u);
  EXPECT_EQ(t.expert_load[0].tokens, 77);
  ASSERT_EQ(t.placements.size(), 1u);
  EXPECT_EQ(t.placements[0].role, "replica");
  ASSERT_EQ(t.op_deps.size(), 1u);
  EXPECT_EQ(t.op_deps[0].dep, OpId(11));
}

instrument::OpRangeRecord op_record(std::int64_t id) {
  instrument::OpRangeRecord r;
  r.id = OpId(id);
  r.rank = RankId(0);
  r.stream = StreamId(0);
  r.kind = OpKind::kGate;
  r.start_ns = id * 10;
  r.end_ns = id * 10 + 5;
  return r;
}

// Schema v2 keeps an op's deps and buffer accesses on its row. Links added
// on their own reach that row whether they come before the op, with it, or
// after a flush wrote it; duplicates merge; links of an op that never comes
// are counted, not lost silently.
TEST(TraceWriter, OpLinksJoinTheirOpsRowWheneverTheyCome) {
  const auto path = testing::temp_path("links.db");
  {
    TraceWriter w(path, test_run());
    using instrument::OpBufferRecord;
    using instrument::OpDepRecord;
    w.add(OpDepRecord{OpId(5), OpId(3)});  // before its op
    w.add(op_record(3));
    w.add(op_record(5));
    w.flush();
    w.add(op_record(6));
    w.flush();
    // After their op's row is on disk; buffer 40 read then written: read-write.
    w.add(OpDepRecord{OpId(6), OpId(5)});
    w.add(OpDepRecord{OpId(6), OpId(3)});
    w.add(OpDepRecord{OpId(6), OpId(5)});
    w.add(OpBufferRecord{OpId(6), BufferId(40), schema::Access::kRead});
    w.add(OpBufferRecord{OpId(6), BufferId(40), schema::Access::kWrite});
    w.add(OpBufferRecord{OpId(6), BufferId(7), schema::Access::kRead});
    // The bulk path, plus a link of the same op on its own.
    const OpId deps[] = {OpId(6), OpId(3), OpId(6)};
    const OpBufferRecord uses[] = {{OpId(8), BufferId(7), schema::Access::kWrite}};
    w.add(op_record(8), deps, uses);
    w.add(OpBufferRecord{OpId(8), BufferId(7), schema::Access::kRead});
    w.add(OpDepRecord{OpId(99), OpId(3)});  // op 99 never comes
    for (int b : {7, 40}) {
      instrument::BufferRecord buffer;
      buffer.id = BufferId(b);
      buffer.rank = RankId(0);
      buffer.tag = "activation";
      w.add(buffer);
    }
    instrument::StreamRecord stream;
    stream.id = StreamId(0);
    stream.rank = RankId(0);
    w.add(stream);
    w.close();
  }
  sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
  auto text = [&](const std::string& sql) {
    auto st = db.prepare(sql);
    return st.step() && !st.is_null(0) ? std::string(st.text(0)) : std::string("NULL");
  };
  EXPECT_EQ(text("SELECT deps FROM op_ranges WHERE id = 3"), "NULL");
  EXPECT_EQ(text("SELECT deps FROM op_ranges WHERE id = 5"), "[3]");
  EXPECT_EQ(text("SELECT deps FROM op_ranges WHERE id = 6"), "[3,5]");
  EXPECT_EQ(text("SELECT buffers FROM op_ranges WHERE id = 6"), "[[7,1],[40,3]]");
  EXPECT_EQ(text("SELECT deps FROM op_ranges WHERE id = 8"), "[3,6]");
  EXPECT_EQ(text("SELECT buffers FROM op_ranges WHERE id = 8"), "[[7,3]]");
  EXPECT_EQ(text("SELECT value FROM run_config WHERE key = 'trace.op_links_without_op'"), "1");
  // The views give version 1's rows.
  EXPECT_EQ(db.query_int("SELECT count(*) FROM op_deps"), 5);
  EXPECT_EQ(db.query_int("SELECT count(*) FROM op_buffers"), 3);
  EXPECT_EQ(db.query_int("SELECT access FROM op_buffers WHERE op_id = 6 AND buffer_id = 40"), 3);
  EXPECT_EQ(db.query_int("SELECT sum(dep_op_id) FROM op_deps WHERE op_id = 6"), 8);
  // And so does the loader.
  const auto t = analyzer::load_trace(path);
  EXPECT_EQ(t.op_deps.size(), 5u);
  EXPECT_EQ(t.op_buffers.size(), 3u);
  EXPECT_EQ(t.run.integrity, "verified");
  EXPECT_EQ(t.run.damage, std::vector<std::string>{});
}

TEST(OpLinks, EncodeSortsMergesAndParsesBack) {
  std::vector<std::int64_t> deps = {9, -1, 4, 9};
  EXPECT_EQ(schema::encode_deps(deps), "[-1,4,9]");
  std::vector<std::int64_t> none;
  EXPECT_EQ(schema::encode_deps(none), "");
  std::vector<schema::BufferLink> links = {{5, 2}, {1, 1}, {5, 1}};
  EXPECT_EQ(schema::encode_buffers(links), "[[1,1],[5,3]]");
  std::vector<std::int64_t> d;
  EXPECT_TRUE(schema::parse_deps(" [ 1, 2 ,3 ] ", d));
  EXPECT_EQ(d, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_TRUE(schema::parse_deps("[]", d));
  std::vector<schema::BufferLink> b;
  EXPECT_TRUE(schema::parse_buffers("[[1,1],[5,3]]", b));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].buffer, 5);
  EXPECT_EQ(b[1].access, 3);
  for (const char* bad : {"", "[", "[1,]", "1", "[1 2]", "[1]x", "[\"1\"]", "[1.5]"})
    EXPECT_FALSE(schema::parse_deps(bad, d)) << bad;
  for (const char* bad : {"[[1]]", "[[1,4]]", "[[1,0]]", "[1,2]", "[[1,2]"})
    EXPECT_FALSE(schema::parse_buffers(bad, b)) << bad;
}

// `threads` threads add `per_thread` kernels each, correlation ids 1, 2, ...
void add_kernels_on_threads(TraceWriter& w, int threads, int per_thread) {
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t)
    running.emplace_back([&w, t, per_thread] {
      for (int i = 0; i < per_thread; ++i) w.add(kernel(w, t, i * 20, t * per_thread + i + 1));
    });
  for (auto& th : running) th.join();
}

TEST(TraceWriter, ManyThreadsWriteEverythingOnce) {
  const auto path = testing::temp_path("threads.db");
  constexpr int kThreads = 4, kPerThread = 25'000;
  {
    instrument::WriterOptions o;
    o.flush_rows = 10'000;  // force many concurrent flushes
    TraceWriter w(path, test_run(kThreads), o);
    add_kernels_on_threads(w, kThreads, kPerThread);
    w.close();
    EXPECT_GT(w.stats().flushes, 1);
  }
  EXPECT_EQ(count_rows(path, "kernels"), kThreads * kPerThread);
  // Interned once each, whichever thread came first.
  EXPECT_EQ(count_rows(path, "strings"), 7);
  sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
  EXPECT_EQ(db.query_int("SELECT count(DISTINCT correlation_id) FROM kernels"), kThreads * kPerThread);
}

// Producers over max_pending_rows wait for the flusher, and wake it where
// flush_rows alone would not: a flush (at least) per max_pending_rows rows
// while the producers add, none lost, whatever the threads.
TEST(TraceWriter, ProducersWaitForTheFlusherBeyondMaxPendingRows) {
  const auto path = testing::temp_path("bounded.db");
  constexpr int kThreads = 3, kPerThread = 20'000;
  {
    instrument::WriterOptions o;
    o.flush_interval = std::chrono::hours(1);  // no periodic flush
    o.flush_rows = 1u << 30;                   // nor one by flush_rows
    o.max_pending_rows = 1000;
    TraceWriter w(path, test_run(kThreads), o);
    add_kernels_on_threads(w, kThreads, kPerThread);
    w.close();
    // A batch holds at most max_pending_rows + kThreads - 1 rows (each
    // producer adds its row, then waits); without the bound, one flush at
    // close would hold them all.
    EXPECT_GE(w.stats().flushes, kThreads * kPerThread / (1000 + kThreads - 1));
  }
  EXPECT_EQ(count_rows(path, "kernels"), kThreads * kPerThread);
}

// A background flush that fails loses its batch: close() says so (an
// import's writer then leaves no trace, rather than one short of rows).
TEST(TraceWriter, AFailedBackgroundFlushIsReportedByClose) {
  for (const bool durable : {true, false}) {
    const auto path = testing::temp_path(durable ? "failed-durable.db" : "failed.db");
    {
      instrument::WriterOptions o;
      o.durable = durable;
      o.flush_interval = std::chrono::hours(1);
      o.flush_rows = 100;  // the background flusher writes the bad row
      TraceWriter w(path, test_run(), o);
      instrument::ApiCallRecord bad;
      bad.name = w.intern("cudaLaunchKernel");
      bad.api = static_cast<schema::ApiKind>(7);  // fails api_calls' CHECK (api = 1 OR api = 2)
      w.add(bad);
      // Until a later batch is written: the bad one was tried before it.
      for (int i = 0; i < 5000 && w.stats().flushes == 0; ++i) {
        w.add(kernel(w, 0, i * 20, i + 1));
        if (i >= 200) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_GT(w.stats().flushes, 0);
      EXPECT_THROW(w.close(), Error) << (durable ? "durable" : "not durable");
    }
    EXPECT_EQ(std::filesystem::exists(path), durable);
  }
}

TEST(TraceWriter, PeriodicFlushMakesRowsVisibleBeforeClose) {
  const auto path = testing::temp_path("periodic.db");
  instrument::WriterOptions o;
  o.flush_interval = std::chrono::milliseconds(20);
  TraceWriter w(path, test_run(), o);
  for (int i = 0; i < 100; ++i) w.add(kernel(w, 0, i * 20, i + 1));
  std::int64_t seen = 0;
  for (int tries = 0; tries < 200 && seen < 100; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = count_rows(path, "kernels");
  }
  EXPECT_EQ(seen, 100);
  w.close();
}

// A process killed with SIGKILL leaves a valid trace holding everything up to
// its last flush, and nothing after it.
TEST(TraceWriter, SigkillLeavesValidTraceUpToLastFlush) {
  const auto path = testing::temp_path("killed.db");
  constexpr int kFlushed = 5000, kUnflushed = 3000;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    instrument::WriterOptions o;
    o.flush_interval = std::chrono::hours(1);  // only the explicit flush below
    o.flush_rows = 1u << 30;
    TraceWriter w(path, test_run(), o);
    for (int i = 0; i < kFlushed; ++i) w.add(kernel(w, 0, i * 20, i + 1));
    w.flush();
    for (int i = 0; i < kUnflushed; ++i) w.add(kernel(w, 0, 1'000'000 + i * 20, kFlushed + i + 1));
    raise(SIGKILL);
    _exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(WTERMSIG(status), SIGKILL);

  auto db = schema::open_trace(path);
  auto check = db.prepare("PRAGMA integrity_check");
  ASSERT_TRUE(check.step());
  EXPECT_EQ(check.text(0), "ok");
  EXPECT_EQ(db.query_int("SELECT count(*) FROM kernels"), kFlushed);
  EXPECT_EQ(db.query_int("SELECT max(correlation_id) FROM kernels"), kFlushed);
  // The analyzer reads it, and says it was not finalized.
  const auto t = analyzer::load_trace(path);
  EXPECT_FALSE(t.run.finalized);
  EXPECT_EQ(t.activities.size(), static_cast<std::size_t>(kFlushed));
}

// A non-durable writer (import, simulator) publishes its trace only when
// close() succeeds: until then an older trace at the path stays as it was,
// and a writer destroyed without close() leaves no file behind.
TEST(TraceWriter, NonDurableWriterPublishesOnlyACompleteTrace) {
  const auto path = testing::temp_path("nondurable.db");
  {
    TraceWriter old(path, test_run());
    old.add(kernel(old, 0, 0, 1));
  }
  instrument::WriterOptions o;
  o.durable = false;
  const auto partial = path + ".partial-" + std::to_string(getpid());
  {
    TraceWriter w(path, test_run(), o);
    for (int i = 0; i < 10; ++i) w.add(kernel(w, 0, i * 20, i + 1));
    w.set_world_size(3);
    w.flush();
    EXPECT_TRUE(std::filesystem::exists(partial));
    EXPECT_EQ(count_rows(path, "kernels"), 1);  // still the old trace
    w.close();
    EXPECT_FALSE(std::filesystem::exists(partial));
  }
  auto db = schema::open_trace(path);
  EXPECT_EQ(db.query_int("SELECT count(*) FROM kernels"), 10);
  EXPECT_EQ(db.query_int("SELECT world_size FROM run"), 3);
  EXPECT_EQ(db.query_int("SELECT value FROM meta WHERE key = 'finalized'"), 1);
  auto check = db.prepare("PRAGMA integrity_check");
  ASSERT_TRUE(check.step());
  EXPECT_EQ(check.text(0), "ok");
  EXPECT_EQ(db.query_int("SELECT count(*) FROM sqlite_master WHERE name = 'op_ranges_by_moe_coords'"), 1);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));

  const auto abandoned = testing::temp_path("abandoned.db");
  std::filesystem::remove(abandoned);
  {
    TraceWriter w(abandoned, test_run(), o);
    w.add(kernel(w, 0, 0, 1));
    w.flush();
  }  // no close(): an error on the way
  EXPECT_FALSE(std::filesystem::exists(abandoned));
  EXPECT_FALSE(std::filesystem::exists(abandoned + ".partial-" + std::to_string(getpid())));
}

TEST(TraceWriter, RefusesToOverwriteWhenAsked) {
  const auto path = testing::temp_path("keep.db");
  { TraceWriter w(path, test_run()); }
  instrument::WriterOptions o;
  o.overwrite = false;
  EXPECT_THROW(TraceWriter(path, test_run(), o), Error);
}

TEST(TraceWriter, RecordsDroppedRecords) {
  const auto path = testing::temp_path("dropped.db");
  {
    TraceWriter w(path, test_run());
    w.add(kernel(w, 0, 0, 1));
    w.add_dropped_records(12);
    w.add_dropped_records(30);
  }
  EXPECT_EQ(analyzer::load_trace(path).run.dropped_records, 42);
}

// A run's JSON configuration becomes dotted keys; text that is not JSON is
// kept whole rather than lost.
TEST(TraceWriter, ConfigJsonIsFlattenedToDottedKeys) {
  const auto path = testing::temp_path("config_json.db");
  {
    TraceWriter w(path, test_run());
    w.add(kernel(w, 0, 0, 1));
    w.set_config_json(R"({"variant": "pipemoe", "iterations": 3, "model": {"num_layers": 2, "attention": true},
                          "pipemoe": {"pipeline_degree": 4}})");
  }
  const analyzer::Trace t = analyzer::load_trace(path);
  EXPECT_EQ(t.config_value("variant"), "pipemoe");
  EXPECT_EQ(t.config_int("iterations"), 3);
  EXPECT_EQ(t.config_int("model.num_layers"), 2);
  EXPECT_EQ(t.config_value("model.attention"), "true");
  EXPECT_EQ(t.config_int("pipemoe.pipeline_degree"), 4);

  const auto bad = testing::temp_path("config_text.db");
  {
    TraceWriter w(bad, test_run());
    w.add(kernel(w, 0, 0, 1));
    w.set_config_json("variant=pipemoe");
  }
  EXPECT_EQ(analyzer::load_trace(bad).config_value("config_json"), "variant=pipemoe");
}

}  // namespace
}  // namespace moetrace
