// Unit tests of moetrace_gui_core's timeline model on traces built in
// memory: overlap, deep nesting, NVTX ranges, random input.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "moetrace/analyzer/trace.h"
#include "moetrace/gui/draw_list.h"
#include "moetrace/gui/format.h"
#include "moetrace/gui/item_details.h"
#include "moetrace/gui/search.h"
#include "moetrace/gui/time_axis.h"
#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {
namespace {
// A Trace as the loader leaves it: activities and ops sorted into per-stream tracks.
std::shared_ptr<const analyzer::Trace> make_trace(int streams, std::vector<analyzer::Activity> acts,
                                                  std::vector<analyzer::OpRange> ops) {
  auto t = std::make_shared<analyzer::Trace>();
  for (int s = 0; s < streams; ++s) {
    analyzer::Stream st;
    st.id = StreamId(s);
    st.rank = RankId(s / 2);
    st.role = s % 2 ? "comm" : "compute";
    t->streams.push_back(st);
  }
  std::sort(acts.begin(), acts.end(), [](const auto& a, const auto& b) {
    return std::pair(a.stream, a.start_ns) < std::pair(b.stream, b.start_ns);
  });
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return std::tuple(a.stream, a.start_ns, -a.end_ns) < std::tuple(b.stream, b.start_ns, -b.end_ns);
  });
  auto begins = [&](const auto& v) {
    std::vector<std::size_t> b(static_cast<std::size_t>(streams) + 1, 0);
    for (const auto& e : v) ++b[static_cast<std::size_t>(e.stream) + 1];
    for (std::size_t i = 1; i < b.size(); ++i) b[i] += b[i - 1];
    return b;
  };
  t->activity_track_begin = begins(acts);
  t->op_track_begin = begins(ops);
  for (auto& a : acts) a.rank = RankId(a.stream / 2);
  for (auto& o : ops) o.rank = RankId(o.stream / 2);
  t->activities = std::move(acts);
  t->ops = std::move(ops);
  return t;
}

analyzer::Activity kernel(int stream, std::int64_t s, std::int64_t e) {
  analyzer::Activity a;
  a.stream = stream;
  a.start_ns = s;
  a.end_ns = e;
  return a;
}

TEST(TimelineModel, OverlappingKernelsArePackedIntoSubRows) {
  auto t = make_trace(1, {kernel(0, 0, 100), kernel(0, 10, 20), kernel(0, 50, 200), kernel(0, 300, 300)}, {});
  auto m = TimelineModel::build(t);
  std::vector<int> rows;
  for (std::size_t i = 0; i < m->rows().size(); ++i)
    if (m->rows()[i].kind == RowKind::kActivities) rows.push_back(static_cast<int>(i));
  ASSERT_EQ(rows.size(), 2u);
  // Greedy: [0,100) row 0; [10,20) row 1; [50,200) row 1 (free after 20); [300,300] row 0.
  EXPECT_EQ(m->rows()[static_cast<std::size_t>(rows[0])].items.size(), 2u);
  EXPECT_EQ(m->rows()[static_cast<std::size_t>(rows[1])].items.size(), 2u);
  EXPECT_EQ(m->item_start(m->row_item(m->rows()[static_cast<std::size_t>(rows[1])], 1)), 50);
  for (int r : rows) EXPECT_TRUE(m->rows()[static_cast<std::size_t>(r)].monotone);
  auto hit = m->hit_test(rows[1], 15, 0);
  ASSERT_TRUE(hit);
  EXPECT_EQ(m->item_start(m->row_item(m->rows()[static_cast<std::size_t>(rows[1])], *hit)), 10);
  // The zero-length kernel is found and drawn one pixel wide.
  hit = m->hit_test(rows[0], 300, 0);
  ASSERT_TRUE(hit);
  const auto layout = RowLayout::compute(*m);
  const auto dl = prepare_draw_list(*m, layout, TimeAxis::fit(0, 400, 400), 0, layout.total_height());
  bool zero_drawn = false;
  for (const auto& r : dl.rects) zero_drawn |= r.row == rows[0] && r.x0 == 300.0f && r.x1 == 301.0f;
  EXPECT_TRUE(zero_drawn);
}

// Overlapped schedules: the forward of layer 0 and the backward of layer 1
// (another micro-batch) run at the same time. Each layer instance is a span
// of its own in the layers lane, on a sub-row of its own where they
// overlap, labelled with its layer, phase and micro-batch.
TEST(TimelineModel, OverlappedLayerInstancesGetRowsOfTheirOwn) {
  auto op = [](int id, std::int64_t s, std::int64_t e, int layer, Phase phase, int mb) {
    analyzer::OpRange o;
    o.id = OpId(id);
    o.stream = 0;
    o.start_ns = s;
    o.end_ns = e;
    o.kind = OpKind::kExpertFfn;
    o.layer = layer;
    o.iteration = 0;
    o.phase = phase;
    o.micro_batch = mb;
    return o;
  };
  auto t = make_trace(1, {}, {op(1, 0, 100, 0, Phase::kForward, 1), op(2, 20, 120, 1, Phase::kBackward, 0),
                              op(3, 130, 200, 1, Phase::kForward, 1)});
  auto m = TimelineModel::build(t);
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < m->rows().size(); ++i)
    if (m->rows()[i].kind == RowKind::kLayers) rows.push_back(i);
  ASSERT_EQ(rows.size(), 2u);
  std::vector<std::string> first, second;
  for (std::size_t k = 0; k < m->rows()[rows[0]].items.size(); ++k)
    first.push_back(m->item_label(m->row_item(m->rows()[rows[0]], k)));
  for (std::size_t k = 0; k < m->rows()[rows[1]].items.size(); ++k)
    second.push_back(m->item_label(m->row_item(m->rows()[rows[1]], k)));
  EXPECT_EQ(first, (std::vector<std::string>{"L0 fwd mb1", "L1 fwd mb1"}));
  EXPECT_EQ(second, (std::vector<std::string>{"L1 bwd mb0"}));
}

TEST(TimelineModel, DeepNestingSharesTheLastSubRow) {
  std::vector<analyzer::OpRange> ops;
  for (int i = 0; i < 40; ++i) {
    analyzer::OpRange o;
    o.id = OpId(i);
    o.stream = 0;
    o.start_ns = i;
    o.end_ns = 1000 - i;
    ops.push_back(o);
  }
  auto t = make_trace(1, {}, ops);
  BuildOptions opt;
  opt.max_sub_rows = 16;
  auto m = TimelineModel::build(t, opt);
  int op_rows = 0, overflow = -1;
  for (std::size_t i = 0; i < m->rows().size(); ++i)
    if (m->rows()[i].kind == RowKind::kOps) {
      ++op_rows;
      if (!m->rows()[i].monotone) overflow = static_cast<int>(i);
    }
  EXPECT_EQ(op_rows, 16);
  ASSERT_GE(overflow, 0);
  // In the overflow row the innermost op under the cursor wins.
  const auto hit = m->hit_test(overflow, 500, 0);
  ASSERT_TRUE(hit);
  EXPECT_EQ(m->item_start(m->row_item(m->rows()[static_cast<std::size_t>(overflow)], *hit)), 39);
  for (std::uint32_t i = 0; i < 40; ++i) EXPECT_TRUE(m->place_of({ItemSource::kOp, i}));
  const auto layout = RowLayout::compute(*m);
  EXPECT_FALSE(prepare_draw_list(*m, layout, TimeAxis::fit(0, 1000, 50), 0, layout.total_height()).rects.empty());
}

// Random input: no crash, and what is drawn stays on the canvas.
TEST(TimelineModel, RandomTracesDrawWithinTheCanvas) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 20; ++round) {
    const int streams = 1 + static_cast<int>(rng() % 6);
    std::vector<analyzer::Activity> acts;
    std::vector<analyzer::OpRange> ops;
    const std::int64_t scale = std::int64_t{1} << (rng() % 50);
    for (int i = 0; i < 3000; ++i) {
      // In double: rng() % 1000000 * scale overflows int64 once scale passes 2^43.
      const auto s = static_cast<std::int64_t>(static_cast<double>(rng() % 1000000) * static_cast<double>(scale) / 1000.0);
      const std::int64_t len =
          rng() % 7 == 0 ? 0
                         : static_cast<std::int64_t>(static_cast<double>(rng() % 5000) * static_cast<double>(scale) / 100000.0);
      acts.push_back(kernel(static_cast<int>(rng() % static_cast<std::uint64_t>(streams)), s, s + len));
      if (i % 3 == 0) {
        analyzer::OpRange o;
        o.id = OpId(i);
        o.stream = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(streams));
        o.start_ns = s;
        o.end_ns = s + len * 3;
        o.kind = static_cast<OpKind>(rng() % all_op_kinds().size());
        o.layer = static_cast<std::int32_t>(rng() % 4) - 1;
        o.iteration = static_cast<std::int32_t>(rng() % 3) - 1;
        o.chunk = static_cast<std::int32_t>(rng() % 3) - 1;
        ops.push_back(o);
      }
    }
    auto m = TimelineModel::build(make_trace(streams, acts, ops));
    const auto layout = RowLayout::compute(*m);
    for (int k = 0; k < 20; ++k) {
      const double t0 = static_cast<double>(m->start_ns()) +
                        (static_cast<double>(rng() % 2000) / 1000.0 - 0.5) * static_cast<double>(m->end_ns() - m->start_ns());
      const double nspp = std::pow(10.0, static_cast<double>(rng() % 16) - 2);
      const TimeAxis axis{t0, nspp, 800};
      const auto dl = prepare_draw_list(*m, layout, axis, 0, layout.total_height());
      for (const auto& r : dl.rects) {
        ASSERT_GE(r.x0, -2.0f);
        ASSERT_LE(r.x1, 803.0f);
        ASSERT_GE(r.x1 - r.x0, 1.0f - 1e-3f);
      }
      const int row = layout.size() ? static_cast<int>(rng() % layout.size()) : 0;
      const double t = axis.t(static_cast<double>(rng() % 800));
      if (auto hit = m->hit_test(row, t, 3 * nspp)) {
        const auto& r = m->rows()[static_cast<std::size_t>(row)];
        const ItemRef item = m->row_item(r, *hit);
        EXPECT_LE(static_cast<double>(m->item_start(item)), t + 3 * nspp + 1);
        EXPECT_GE(static_cast<double>(m->item_end(item)), t - 3 * nspp - 1);
      }
      const auto a = static_cast<std::int64_t>(axis.t0_ns), b = static_cast<std::int64_t>(axis.t1_ns());
      const auto s = analyzer::breakdown_in_window(m->trace(), a, b);
      for (const auto& rs : s.ranks) {
        EXPECT_LE(rs.t.busy_ns, b - a);
        EXPECT_GE(rs.t.idle_ns, 0);
      }
    }
    EXPECT_FALSE(search_items(*m, "kernel").hits.empty());
  }
}

TEST(TimelineModel, NvtxRangesNestPerThreadAndUnclosedOnesRunToTheEnd) {
  auto base = make_trace(1, {kernel(0, 0, 1000)}, {});
  auto t = std::make_shared<analyzer::Trace>(*base);
  t->strings = {"step", "forward", "never closed"};
  auto range = [](std::int64_t thread, std::int64_t s, std::int64_t e, int name) {
    analyzer::NvtxRange n;
    n.rank = RankId(0);
    n.thread_id = thread;
    n.start_ns = s;
    n.end_ns = e;
    n.name = StringId(name);
    return n;
  };
  // Sorted by (rank, thread, start), as the loader leaves them.
  t->nvtx = {range(7, 0, 900, 0), range(7, 100, 400, 1), range(9, 500, -1, 2)};
  // "forward" launched the kernel [0, 1000) by a call at 150 on its thread.
  t->activities[0].correlation_id = 5;
  analyzer::ApiCall call;
  call.rank = RankId(0);
  call.thread_id = 7;
  call.start_ns = 150;
  call.end_ns = 160;
  call.correlation_id = 5;
  t->api_calls = {call};
  auto m = TimelineModel::build(t);
  std::vector<const Row*> rows;
  for (const auto& r : m->rows())
    if (r.kind == RowKind::kNvtx) rows.push_back(&r);
  ASSERT_EQ(rows.size(), 3u);  // thread 7: two levels; thread 9: one
  EXPECT_EQ(rows[0]->thread, 7);
  EXPECT_EQ(rows[0]->label, "thread 7 \xC2\xB7 NVTX");
  EXPECT_EQ(rows[1]->thread, 7);
  EXPECT_EQ(m->item_name(m->row_item(*rows[1], 0)), "forward");
  std::map<std::string, std::string> fwd;
  for (const auto& f : describe_item(*m, m->row_item(*rows[1], 0))) fwd[f.key] = f.value;
  EXPECT_EQ(fwd["GPU projection"], "1 activity from 1 API call");
  EXPECT_EQ(fwd["GPU busy"], format_duration(1000.0));
  EXPECT_EQ(rows[2]->thread, 9);
  EXPECT_EQ(m->item_end(m->row_item(*rows[2], 0)), m->end_ns());
  bool never = false;
  for (const auto& f : describe_item(*m, m->row_item(*rows[2], 0))) never |= f.value.find("never closed") == 0;
  EXPECT_TRUE(never);
  EXPECT_EQ(search_items(*m, "forward").hits.size(), 1u);
  for (std::uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(m->place_of({ItemSource::kNvtx, i}));
}

TEST(TimelineModel, EmptyTraceBuildsNoRows) {
  auto t = std::make_shared<const analyzer::Trace>();
  auto m = TimelineModel::build(t);
  EXPECT_TRUE(m->rows().empty());
  EXPECT_GT(m->end_ns(), m->start_ns());
  const auto layout = RowLayout::compute(*m);
  EXPECT_EQ(layout.row_at(5), -1);
  EXPECT_TRUE(prepare_draw_list(*m, layout, TimeAxis::fit(0, 1, 100), 0, 100).rects.empty());
  EXPECT_TRUE(search_items(*m, "x").hits.empty());
  EXPECT_TRUE(analyzer::breakdown_in_window(m->trace(), 0, 10).ranks.empty());
}

}  // namespace
}  // namespace moetrace::gui
