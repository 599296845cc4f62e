// The event waits a PyTorch profiler records with
// experimental_config=_ExperimentalConfig(enable_cuda_sync_events=True):
// Kineto's "cuda_sync" record "Stream Wait Event" names the stream that
// recorded the event (wait_on_stream) and the correlation id of that
// cudaEventRecord call (wait_on_cuda_event_record_corr_id); the replay joins
// the work before the record to the work after the wait, exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "moetrace/analyzer/exec_graph.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/importers/import.h"
#include "stream_wait_fixture.h"
#include "text_trace.h"

namespace moetrace::analyzer {
namespace {

constexpr std::int64_t kUs = 1000;

std::string write_trace(const std::string& name, bool with_record) {
  const auto path = testing::temp_path(name);
  std::ofstream(path) << R"({"schemaVersion": 1, "traceEvents": [)" << testing::stream_wait_events(with_record) << "]}";
  return path;
}

std::size_t starting_at(const Trace& t, std::int64_t start_us) {
  for (std::size_t i = 0; i < t.activities.size(); ++i)
    if (t.activities[i].start_ns == start_us * kUs) return i;
  ADD_FAILURE() << "no activity starts at " << start_us << " us";
  return 0;
}

// C's replayed start with activity `longer` (its start in us) made
// `by_us` longer.
std::int64_t consumer_start(const Trace& t, ExecGraph g, std::int64_t longer, std::int64_t by_us) {
  const auto a = starting_at(t, longer);
  for (auto& e : g.edges)
    if (e.kind == ExecEdgeKind::kDuration && e.from == g.activity_start[a]) e.latency_ns += by_us * kUs;
  return evaluate_exec_graph(g)[g.activity_start[starting_at(t, 318)]];
}

void expect_the_recorded_wait(const Trace& t) {
  ASSERT_EQ(t.sync_events.size(), 1u);
  const auto& y = t.sync_events[0];
  EXPECT_EQ(y.kind, SyncEvent::kStreamWaitEvent);
  EXPECT_EQ(y.correlation_id, 14);
  EXPECT_EQ(y.event_record_correlation_id, 12);
  ASSERT_GE(t.stream_index(y.wait_stream), 0);
  EXPECT_EQ(t.streams[static_cast<std::size_t>(t.stream_index(y.wait_stream))].native_id, 7);
  const auto g = build_exec_graph(t);
  EXPECT_EQ(g.recorded_waits, 1);
  EXPECT_EQ(g.edge_counts[static_cast<std::size_t>(ExecEdgeKind::kCrossStream)], 1);
  EXPECT_EQ(g.edge_counts[static_cast<std::size_t>(ExecEdgeKind::kInferredCrossStream)], 0);
  EXPECT_EQ(g.unexplained, 0);
  for (const auto& e : g.edges)
    if (e.kind == ExecEdgeKind::kCrossStream) {
      EXPECT_EQ(e.from, g.activity_end[starting_at(t, 15)]);
      EXPECT_EQ(e.to, g.activity_start[starting_at(t, 318)]);
    }
  for (const auto& m : g.missing) EXPECT_EQ(m.find("cross-stream waits"), std::string::npos) << m;
  // P 100 us longer: C starts 100 us later. E 100 us longer: C does not
  // move. (The trace has no launch to sample, so every launch latency is 0
  // and the whole chain replays 5 us early: only the moves are asserted.)
  const auto base = consumer_start(t, g, 15, 0);
  EXPECT_EQ(consumer_start(t, g, 15, 100), base + 100 * kUs);
  EXPECT_EQ(consumer_start(t, g, 45, 100), base);
}

TEST(RecordedEventWaits, JoinTheWorkBeforeTheRecordToTheWorkAfterTheWait) {
  // Read in memory, and imported into a trace file and loaded from it (the
  // writer's and the loader's columns).
  const auto json = write_trace("waits.json", true);
  expect_the_recorded_wait(load_trace(json));
  const auto db = testing::temp_path("waits.db");
  importers::import_traces({json}, db);
  expect_the_recorded_wait(load_trace(db));
}

TEST(RecordedEventWaits, WithoutTheRecordTheWaitIsInferredFromTheTimeline) {
  const auto t = load_trace(write_trace("nowaits.json", false));
  EXPECT_TRUE(t.sync_events.empty());
  const auto g = build_exec_graph(t);
  EXPECT_EQ(g.edge_counts[static_cast<std::size_t>(ExecEdgeKind::kCrossStream)], 0);
  EXPECT_EQ(g.edge_counts[static_cast<std::size_t>(ExecEdgeKind::kInferredCrossStream)], 1);
  // The inference picks E, which ended last before C: E 100 us longer moves
  // C, P 100 us longer does not.
  const auto base = consumer_start(t, g, 15, 0);
  EXPECT_EQ(consumer_start(t, g, 45, 100), base + 100 * kUs);
  EXPECT_EQ(consumer_start(t, g, 15, 100), base);
  bool says = false;
  for (const auto& m : g.missing)
    says = says || m.find("enable_cuda_sync_events=True") != std::string::npos;
  EXPECT_TRUE(says);
}

}  // namespace
}  // namespace moetrace::analyzer
