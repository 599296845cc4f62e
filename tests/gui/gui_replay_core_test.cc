// The replayed tracks of the timeline (TimelineModel::with_replay) and the
// replay the GUI asks of the analyzer (compute_replay), without a window.
//
// kLateKernel below is a trace whose replay is derived by hand from the rules
// of analyzer/include/moetrace/analyzer/exec_graph.h: one rank, one CPU
// thread launching five kernels with cudaLaunchKernel, each call 1 us long.
//
//   call [ 0,  1) us   -> gate      compute [ 3,  8)   op 1  L0 it 0
//   call [ 5,  5.5)    -> dispatch  comm    [ 8, 12)   op 6  L0 it 0
//   call [10, 11)      -> expert    compute [13, 18)   op 2  L0 it 0
//   call [20, 21)      -> gate      compute [23, 28)   op 3  L0 it 1
//   call [30, 31)      -> expert    compute [83, 88)   op 4  L0 it 1  (started 50 us late)
//
// Launch latency (median over the launches on an idle stream, without each
// stream's first activity: the compute kernels at 13, 23 and 83 us): from the
// call's start 3 us (3, 3, 53), from its end 2 us (2, 2, 52). Every kernel
// but the late one starts exactly there, so the replay keeps it. The late
// one's edges allow 30 + 3 = 33 us (its stream is free from 28 us); it
// started 50 us later than that, more than ExecGraphOptions::unexplained_ns
// (10 us), it is neither its stream's first activity nor unlaunched, and no
// other stream ended between 33 and 83 us: the replay starts it at 33 us and
// it ends at 38 us.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "moetrace/analyzer/trace.h"
#include "moetrace/gui/draw_list.h"
#include "moetrace/gui/format.h"
#include "moetrace/gui/item_details.h"
#include "moetrace/gui/replay_results.h"
#include "moetrace/gui/timeline_model.h"
#include "text_trace.h"

namespace moetrace::gui {
namespace {

constexpr std::string_view kLateKernel = R"(
  run    world_size=1 backend=test variant=dpmoe
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  op     id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 phase=fwd start=3000 end=8000
  op     id=6 rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd start=8000 end=12000
  op     id=2 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=fwd start=13000 end=18000
  op     id=3 rank=0 stream=0 kind=gate layer=0 iteration=1 phase=fwd start=23000 end=28000
  op     id=4 rank=0 stream=0 kind=expert_ffn layer=0 iteration=1 phase=fwd start=83000 end=88000
  kernel rank=0 stream=0 start=3000 end=8000 name=gate_gemm corr=1 op=1
  kernel rank=0 stream=1 start=8000 end=12000 name=ncclDevKernel_AllToAll corr=6 op=6
  kernel rank=0 stream=0 start=13000 end=18000 name=expert_gemm corr=2 op=2
  kernel rank=0 stream=0 start=23000 end=28000 name=gate_gemm corr=3 op=3
  kernel rank=0 stream=0 start=83000 end=88000 name=expert_gemm_late corr=4 op=4
  api    rank=0 thread=1 start=0 end=1000 name=cudaLaunchKernel corr=1
  api    rank=0 thread=1 start=5000 end=5500 name=cudaLaunchKernel corr=6
  api    rank=0 thread=1 start=10000 end=11000 name=cudaLaunchKernel corr=2
  api    rank=0 thread=1 start=20000 end=21000 name=cudaLaunchKernel corr=3
  api    rank=0 thread=1 start=30000 end=31000 name=cudaLaunchKernel corr=4
)";

std::shared_ptr<const TimelineModel> base_model() {
  const auto path = moetrace::testing::temp_path("late_kernel.db");
  moetrace::testing::write_text_trace(path, kLateKernel);
  return TimelineModel::build(std::make_shared<const analyzer::Trace>(analyzer::load_trace(path)));
}

std::vector<std::string> labels(const TimelineModel& m) {
  std::vector<std::string> out;
  for (const auto& r : m.rows())
    if (!r.label.empty()) out.push_back(r.label);
  return out;
}

// The row labelled `label`, or -1.
int row_of(const TimelineModel& m, std::string_view label) {
  for (std::size_t i = 0; i < m.rows().size(); ++i)
    if (m.rows()[i].label == label) return static_cast<int>(i);
  return -1;
}

// Items of a row as [start, end) pairs relative to 0.
std::vector<std::pair<std::int64_t, std::int64_t>> extents(const TimelineModel& m, int row) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  const auto& r = m.rows()[static_cast<std::size_t>(row)];
  for (std::size_t p = 0; p < r.items.size(); ++p) {
    const ItemRef item = m.row_item(r, p);
    out.emplace_back(m.item_start(item), m.item_end(item));
  }
  return out;
}

using Extents = std::vector<std::pair<std::int64_t, std::int64_t>>;

TEST(ReplayTracks, SitUnderTheRanksStreamTracksAndBeforeItsHostThreads) {
  const auto base = base_model();
  const auto r = compute_replay(base, {});
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_TRUE(r.model);
  const auto& m = *r.model;
  const std::string dot = " \xC2\xB7 ";
  const std::vector<std::string> expected = {
      "Rank 0",
      "iterations",
      "layers",
      "compute" + dot + "op ranges",
      "compute" + dot + "kernels",
      "compute" + dot + "queue length",
      "comm" + dot + "op ranges",
      "comm" + dot + "kernels",
      "comm" + dot + "queue length",
      "replayed" + dot + "iterations",
      "replayed" + dot + "layers",
      "replayed" + dot + "compute" + dot + "op ranges",
      "replayed" + dot + "compute" + dot + "kernels",
      "replayed" + dot + "comm" + dot + "op ranges",
      "replayed" + dot + "comm" + dot + "kernels",
      "thread 1" + dot + "API calls",
  };
  EXPECT_EQ(labels(m), expected);
  // The measured rows are base's, in base's order.
  std::vector<std::string> measured;
  for (const auto& row : m.rows())
    if (!row.replayed() && !row.label.empty()) measured.push_back(row.label);
  EXPECT_EQ(measured, labels(*base));
  // One group, spanning every row; the replayed rows read the replayed trace.
  ASSERT_EQ(m.groups().size(), 1u);
  EXPECT_EQ(m.groups()[0].first_row, 0);
  EXPECT_EQ(m.groups()[0].end_row, static_cast<int>(m.rows().size()));
  for (const auto& row : m.rows()) {
    EXPECT_EQ(row.group, 0);
    if (row.replayed()) {
      EXPECT_TRUE(is_replayed(row.items.source())) << row.label;
      EXPECT_FALSE(row.items.empty()) << row.label;
    } else {
      EXPECT_FALSE(is_replayed(row.items.source())) << row.label;
    }
  }
  EXPECT_EQ(m.replay_label(), "replayed");
  EXPECT_FALSE(r.predicted);
  EXPECT_EQ(r.label(), "replayed");
}

TEST(ReplayTracks, TheLateKernelStartsWhereItsLaunchAllowed) {
  const auto r = compute_replay(base_model(), {});
  ASSERT_TRUE(r.model) << r.error;
  const auto& m = *r.model;
  const std::string dot = " \xC2\xB7 ";
  const int measured = row_of(m, "compute" + dot + "kernels");
  const int replayed = row_of(m, "replayed" + dot + "compute" + dot + "kernels");
  ASSERT_GE(measured, 0);
  ASSERT_GE(replayed, 0);
  EXPECT_EQ(extents(m, measured), (Extents{{3000, 8000}, {13000, 18000}, {23000, 28000}, {83000, 88000}}));
  EXPECT_EQ(extents(m, replayed), (Extents{{3000, 8000}, {13000, 18000}, {23000, 28000}, {33000, 38000}}));
  EXPECT_EQ(extents(m, row_of(m, "replayed" + dot + "comm" + dot + "kernels")),
            (Extents{{8000, 12000}}));
  // The op ranges and the iteration spans follow their kernels.
  EXPECT_EQ(extents(m, row_of(m, "replayed" + dot + "compute" + dot + "op ranges")),
            (Extents{{3000, 8000}, {13000, 18000}, {23000, 28000}, {33000, 38000}}));
  EXPECT_EQ(extents(m, row_of(m, "iterations")), (Extents{{3000, 18000}, {23000, 88000}}));
  EXPECT_EQ(extents(m, row_of(m, "replayed" + dot + "iterations")), (Extents{{3000, 18000}, {23000, 38000}}));

  // Hit testing and names work on the replayed row as on any other.
  const auto hit = m.hit_test(replayed, 35000, 10);
  ASSERT_TRUE(hit);
  const ItemRef late = m.row_item(m.rows()[static_cast<std::size_t>(replayed)], *hit);
  EXPECT_EQ(late.source, ItemSource::kReplayedActivity);
  EXPECT_EQ(m.item_name(late), "expert_gemm_late");
  EXPECT_EQ(m.item_colour(late), ColourClass::kExpertCompute);
  EXPECT_FALSE(m.hit_test(measured, 35000, 10));
  const auto place = m.place_of(late);
  ASSERT_TRUE(place);
  EXPECT_EQ(place->row, replayed);

  // Its details: the replayed time, and the measured one beside it.
  std::map<std::string, std::string> d;
  for (const auto& f : describe_item(m, late)) d[f.key] = f.value;
  EXPECT_EQ(d["Start"], "33.000 \xC2\xB5s");
  EXPECT_EQ(d["Measured start"], "83.000 \xC2\xB5s");
  EXPECT_EQ(d["Measured duration"], "5.00 \xC2\xB5s");
  EXPECT_EQ(d["Timeline"], "replayed: the trace's execution graph with the measured durations");
  EXPECT_EQ(d["Op"], "expert_ffn L0");
}

TEST(ReplayTracks, TheSummaryComparesEachIterationsWindow) {
  // Iteration windows (breakdown.h): iteration 0 runs from its first start
  // to where iteration 1 begins, [3, 23) us in both; iteration 1 from 23 us
  // to its last end, 88 us measured, 38 us replayed.
  const auto r = compute_replay(base_model(), {});
  ASSERT_TRUE(r.error.empty()) << r.error;
  const auto* it0 = r.iteration(RankId(0), 0);
  const auto* it1 = r.iteration(RankId(0), 1);
  ASSERT_TRUE(it0 && it1);
  EXPECT_EQ(it0->measured_ns, 20000);
  EXPECT_EQ(it0->replayed_ns, 20000);
  EXPECT_EQ(it1->measured_ns, 65000);
  EXPECT_EQ(it1->replayed_ns, 15000);
  EXPECT_EQ(it1->predicted_ns, -1);
  // As `moetrace replay` prints them: 15 / 65 - 1 = -76.92 %.
  EXPECT_EQ(replay_numbers_text(it1->measured_ns, it1->replayed_ns), "measured 65.0 \xC2\xB5s, replayed 15.0 \xC2\xB5s (-76.92 %)");
  EXPECT_EQ(replay_numbers_text(20000, 20000, 30000), "measured 20.0 \xC2\xB5s, replayed 20.0 \xC2\xB5s (+0.00 %), predicted 30.0 \xC2\xB5s (+50.00 %)");
  // The tooltip of either iteration span (measured or replayed) on rank 0.
  const auto& m = *r.model;
  int shown = 0;
  for (const auto& spans : {m.spans(), m.replayed_spans()}) {
    for (const auto& s : spans) {
      if (s.level != SpanLevel::kIteration || s.iteration != 1) continue;
      EXPECT_EQ(r.span_text(s), "iteration 1 on rank 0: measured 65.0 \xC2\xB5s, replayed 15.0 \xC2\xB5s (-76.92 %)");
      ++shown;
    }
  }
  EXPECT_EQ(shown, 2);
  Span chunk;
  chunk.level = SpanLevel::kChunk;
  EXPECT_EQ(r.span_text(chunk), "");
  EXPECT_EQ(r.iteration(RankId(1), 0), nullptr);
  EXPECT_EQ(r.iteration(RankId(0), 2), nullptr);
  ASSERT_NE(r.layer(0), nullptr);
  EXPECT_EQ(r.layer(1), nullptr);
}

// A replayed trace made by hand: every activity and op 1 ms later.
std::shared_ptr<const analyzer::Trace> shifted(const analyzer::Trace& t, std::int64_t by) {
  auto r = std::make_shared<analyzer::Trace>(t);
  for (auto& a : r->activities) a.start_ns += by, a.end_ns += by;
  for (auto& o : r->ops) o.start_ns += by, o.end_ns += by;
  return r;
}

TEST(ReplayTracks, APredictionPastTheTraceEndWidensTheTimeline) {
  const auto base = base_model();
  ReplayRowOptions o;
  o.prefix = "predicted";
  const auto m = TimelineModel::with_replay(*base, shifted(base->trace(), 1'000'000), o);
  EXPECT_EQ(m->start_ns(), base->start_ns());
  EXPECT_EQ(m->end_ns(), 88000 + 1'000'000);
  const std::string dot = " \xC2\xB7 ";
  const int row = row_of(*m, "predicted" + dot + "compute" + dot + "kernels");
  ASSERT_GE(row, 0);
  EXPECT_EQ(extents(*m, row).front(), (std::pair<std::int64_t, std::int64_t>{1'003'000, 1'008'000}));
  // Drawn where it lies: the first kernel at 1.003 ms on a 1.1 ms axis.
  RowLayout layout = RowLayout::compute(*m);
  const auto axis = TimeAxis::fit(0, 1'100'000, 1100);
  const auto list = prepare_draw_list(*m, layout, axis, 0, layout.total_height());
  std::vector<float> x0;
  for (const auto& rect : list.rects)
    if (rect.row == row) x0.push_back(rect.x0);
  ASSERT_EQ(x0.size(), 4u);
  EXPECT_FLOAT_EQ(x0[0], 1003.0f);
  // A collapsed rank hides its replayed rows with the rest.
  layout = RowLayout::compute(*m, {true});
  EXPECT_FALSE(layout.visible(row));
  EXPECT_EQ(layout.total_height(), RowLayout::kHeaderHeight);
}

TEST(ReplayTracks, ASecondReplayReplacesTheFirstsTracks) {
  const auto base = base_model();
  const auto once = TimelineModel::with_replay(*base, shifted(base->trace(), 0));
  ReplayRowOptions o;
  o.prefix = "predicted";
  const auto twice = TimelineModel::with_replay(*once, shifted(base->trace(), 5000), o);
  EXPECT_EQ(twice->rows().size(), once->rows().size());
  for (const auto& row : twice->rows()) EXPECT_EQ(row.label.rfind("replayed", 0), std::string::npos) << row.label;
  EXPECT_EQ(twice->replay_label(), "predicted");
}

TEST(ReplayTracks, AReplayedTraceOfOtherStreamsIsRefused) {
  const auto base = base_model();
  auto other = std::make_shared<analyzer::Trace>(base->trace());
  other->streams.pop_back();
  EXPECT_THROW(TimelineModel::with_replay(*base, other), std::invalid_argument);
  EXPECT_THROW(TimelineModel::with_replay(*base, nullptr), std::invalid_argument);
  // Items of the replayed sources are nowhere on a model without a replay.
  EXPECT_FALSE(base->place_of({ItemSource::kReplayedActivity, 0}));
  EXPECT_TRUE(describe_item(*base, {ItemSource::kReplayedActivity, 0}).empty());
}

TEST(ReplayTracks, AWhatIfThatChangesNothingPredictsTheReplay) {
  // pipeline_degree splits a layer instance made of its dispatch, its
  // experts and its combine (graph_whatif.h); this trace's layer has no
  // combine (iteration 0) and no all-to-all at all (iteration 1), so both
  // instances stay as they were, the result says why for each, and the
  // predicted tracks are the replayed ones.
  ReplayRequest q;
  q.what_ifs.pipeline_degree = 4;
  const auto r = compute_replay(base_model(), q);
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_TRUE(r.model);
  EXPECT_TRUE(r.predicted);
  EXPECT_EQ(r.applied.instances_changed, 0);
  auto noted = [&](const std::string& note) {
    return std::find(r.applied.notes.begin(), r.applied.notes.end(), note) != r.applied.notes.end();
  };
  EXPECT_TRUE(noted("pipeline_degree: 1 layer instance left as measured: no all-to-all and experts to split"));
  EXPECT_TRUE(noted("pipeline_degree: 1 layer instance left as measured: no all-to-all on one side of its experts"));
  EXPECT_EQ(r.label(), "predicted (pipeline_degree=4)");
  EXPECT_EQ(r.model->replay_label(), "predicted");
  const std::string dot = " \xC2\xB7 ";
  EXPECT_EQ(extents(*r.model, row_of(*r.model, "predicted" + dot + "compute" + dot + "kernels")),
            (Extents{{3000, 8000}, {13000, 18000}, {23000, 28000}, {33000, 38000}}));
  const auto* it1 = r.iteration(RankId(0), 1);
  ASSERT_TRUE(it1);
  EXPECT_EQ(it1->predicted_ns, 15000);

  EXPECT_EQ(what_if_text(q.what_ifs), "pipeline_degree=4");
  analyzer::GraphWhatIfs w;
  w.overlap = false;
  EXPECT_EQ(what_if_text(w), "overlap=off");
  w.pipeline_degree = 2;
  EXPECT_EQ(what_if_text(w), "pipeline_degree=2, overlap=off");
}

}  // namespace
}  // namespace moetrace::gui
