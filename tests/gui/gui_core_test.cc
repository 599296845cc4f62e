// Unit tests of moetrace_gui_core: geometry, formatting, level of detail and
// the timeline model of the hand-described fixture trace (fixture_trace.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "fixture_trace.h"
#include "moetrace/analyzer/locality.h"
#include "moetrace/analyzer/memory.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/gui/analysis_results.h"
#include "moetrace/gui/draw_list.h"
#include "moetrace/gui/expert_load_matrix.h"
#include "moetrace/gui/format.h"
#include "moetrace/gui/item_details.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/gui/search.h"
#include "moetrace/gui/time_axis.h"
#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {
namespace {

using testing::us;
constexpr const char* kMu = "\xC2\xB5";

// --- geometry ---------------------------------------------------------------

TEST(TimeAxis, MapsTimeToPixelsAndBack) {
  const auto a = TimeAxis::fit(1000, 2000, 500);
  EXPECT_DOUBLE_EQ(a.ns_per_px, 2.0);
  EXPECT_DOUBLE_EQ(a.x(1000), 0);
  EXPECT_DOUBLE_EQ(a.x(2000), 500);
  EXPECT_DOUBLE_EQ(a.t(250), 1500);
  EXPECT_DOUBLE_EQ(a.t1_ns(), 2000);
}

TEST(TimeAxis, ZoomKeepsTheAnchorStill) {
  const AxisLimits lim{0, 1e9};
  const auto a = TimeAxis::fit(1e8, 2e8, 1000);
  for (double anchor : {0.0, 123.0, 999.0}) {
    const auto z = zoom_axis(a, 1.25, anchor, lim);
    EXPECT_NEAR(z.t(anchor), a.t(anchor), 1e-6);
    EXPECT_NEAR(z.ns_per_px, a.ns_per_px / 1.25, 1e-9);
    const auto back = zoom_axis(z, 1 / 1.25, anchor, lim);
    EXPECT_NEAR(back.t0_ns, a.t0_ns, 1e-3);
  }
}

TEST(TimeAxis, ClampsDepthWidthAndEdges) {
  const AxisLimits lim{0, 1000};
  auto deep = zoom_axis(TimeAxis::fit(0, 1000, 100), 1e9, 50, lim);
  EXPECT_DOUBLE_EQ(deep.ns_per_px, AxisLimits::kMinNsPerPx);
  auto wide = zoom_axis(TimeAxis::fit(0, 1000, 100), 1e-9, 50, lim);
  EXPECT_DOUBLE_EQ(wide.window_ns(), 1000 * AxisLimits::kMaxWindowFactor);
  // Panning far right stops half a window past the end.
  auto p = pan_axis(TimeAxis::fit(0, 100, 100), 1e9, lim);
  EXPECT_DOUBLE_EQ(p.t1_ns(), 1000 + 0.5 * 100);
  auto q = pan_axis(TimeAxis::fit(0, 100, 100), -1e9, lim);
  EXPECT_DOUBLE_EQ(q.t0_ns, -50);
}

TEST(Ruler, StepsFollowTheOneTwoFiveLadder) {
  EXPECT_DOUBLE_EQ(ruler_step_ns(10, 90), 1000);     // want 900 ns
  EXPECT_DOUBLE_EQ(ruler_step_ns(3, 90), 500);       // want 270 ns
  EXPECT_DOUBLE_EQ(ruler_step_ns(1000, 90), 1e5);    // want 90 us
  EXPECT_DOUBLE_EQ(ruler_step_ns(1500, 90), 2e5);    // want 135 us
  EXPECT_DOUBLE_EQ(ruler_step_ns(0.01, 90), 1);      // want 0.9 ns
}

TEST(Ruler, LabelsMajorTicksWithUnits) {
  // 10 us per pixel over 1000 px: a 1 ms step, minor ticks every 200 us.
  const auto a = TimeAxis::fit(5000, 5000 + 1e7, 1000);
  const auto ticks = ruler_ticks(a, 5000, 90);
  std::vector<std::string> labels;
  int minors = 0;
  for (const auto& t : ticks) {
    if (t.major) labels.push_back(t.label);
    else ++minors;
  }
  ASSERT_GE(labels.size(), 10u);
  EXPECT_EQ(labels[0], "0 ms");
  EXPECT_EQ(labels[1], "1 ms");
  EXPECT_EQ(labels[9], "9 ms");
  EXPECT_EQ(minors, 40);
  EXPECT_NEAR(ticks[1].x - ticks[0].x, 20.0, 1e-9);
}

TEST(Format, UnitsAndPrecision) {
  EXPECT_EQ(format_duration(850), "850 ns");
  EXPECT_EQ(format_duration(12500), std::string("12.5 ") + kMu + "s");
  EXPECT_EQ(format_duration(3.21e6), "3.21 ms");
  EXPECT_EQ(format_duration(1.5e9), "1.50 s");
  EXPECT_EQ(format_duration(999.6e3), "1.00 ms");
  EXPECT_EQ(format_time(1'500'000, 500'000), "1.5 ms");
  EXPECT_EQ(format_time(2'000'000, 1'000'000), "2 ms");
  EXPECT_EQ(format_time(300, 100), "300 ns");
  EXPECT_EQ(format_time(250'000'000, 50'000'000), "250 ms");
  EXPECT_EQ(format_time(1'500'000'000, 500'000'000), "1.5 s");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3.0 * (1 << 30)), "3.00 GiB");
  EXPECT_EQ(format_count(12345678), "12,345,678");
  EXPECT_EQ(format_count(-1000), "-1,000");
  EXPECT_EQ(format_percent(0.1234), "12.3 %");
  EXPECT_EQ(format_timestamp(1'234'567), "1.234567 ms");
}

TEST(Format, ParsesDurationsWithUnits) {
  EXPECT_EQ(parse_duration("1500"), 1500.0);
  EXPECT_EQ(parse_duration(" 250ns "), 250.0);
  EXPECT_EQ(parse_duration("12.5us"), 12500.0);
  EXPECT_EQ(parse_duration("12.5 \xC2\xB5s"), 12500.0);
  EXPECT_EQ(parse_duration("3ms"), 3e6);
  EXPECT_EQ(parse_duration("1.5 s"), 1.5e9);
  EXPECT_FALSE(parse_duration(""));
  EXPECT_FALSE(parse_duration("ms"));
  EXPECT_FALSE(parse_duration("3 parsecs"));
}

// --- level of detail ----------------------------------------------------------

TEST(Lod, FoldsRunsOfNarrowItemsOnly) {
  const std::vector<LodBlock> narrow{{0, 1, 1, 0}, {2, 3, 1, 1}, {4, 5, 1, 2}};
  EXPECT_EQ(fold_blocks(narrow, 1).size(), 3u);  // nothing is narrower than 1 ns
  auto f = fold_blocks(narrow, 2);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].start, 0);
  EXPECT_EQ(f[0].end, 5);
  EXPECT_EQ(f[0].count, 3u);
  // A wide item never folds, even with narrow neighbours touching it.
  const std::vector<LodBlock> mixed{{0, 100, 1, 0}, {101, 102, 1, 1}, {103, 104, 1, 2}};
  auto g = fold_blocks(mixed, 4);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[1].count, 2u);
  // The representative is the longest folded item.
  const std::vector<LodBlock> rep{{0, 1, 1, 0}, {1, 3, 1, 1}, {3, 4, 1, 2}};
  EXPECT_EQ(fold_blocks(rep, 4)[0].rep, 1u);
}

// Random serial track: every stored level conserves the items, stays sorted
// and halves the previous; a window at any zoom visits a bounded number of blocks.
TEST(Lod, PyramidBoundsTheBlocksOfAnyWindow) {
  std::mt19937_64 rng(7);
  std::vector<ItemExtent> items;
  std::int64_t t = 0;
  for (int i = 0; i < 200000; ++i) {
    const std::int64_t gap = static_cast<std::int64_t>(rng() % 50);
    const std::int64_t len = (rng() % 100 == 0) ? 100000 : static_cast<std::int64_t>(1 + rng() % 2000);
    items.push_back({t + gap, t + gap + len});
    t += gap + len;
  }
  const auto p = LodPyramid::build(items);
  ASSERT_FALSE(p.levels().empty());
  std::size_t prev = items.size();
  for (const auto& l : p.levels()) {
    std::uint64_t n = 0;
    for (const auto& b : l.blocks) n += b.count;
    EXPECT_EQ(n, items.size());
    EXPECT_TRUE(l.monotone);
    EXPECT_LE(l.blocks.size() * 2, prev);
    prev = l.blocks.size();
  }
  EXPECT_EQ(p.levels().back().blocks.size(), 1u);
  // Windows of 2000 px at several zooms.
  for (double ns_per_px : {1.0, 10.0, 100.0, 1e3, 1e4, 1e5}) {
    const double fold = 2 * ns_per_px;
    const double window = 2000 * ns_per_px;
    for (double t0 : {0.0, static_cast<double>(t) / 3, static_cast<double>(t) / 2}) {
      std::size_t visited = 0;
      if (const auto* l = p.level_for(fold)) {
        const auto& b = l->blocks;
        auto i = first_visible(b.size(), t0, true, 0, [&](std::size_t k) { return b[k].start; },
                               [&](std::size_t k) { return b[k].end; });
        for (; i < b.size() && static_cast<double>(b[i].start) <= t0 + window; ++i) ++visited;
      } else {
        for (const auto& it : items)
          if (static_cast<double>(it.end) >= t0 && static_cast<double>(it.start) <= t0 + window) ++visited;
      }
      // Wide items and gaps each take at least fold/2 ns once folded (a
      // coarser level than ideal at most doubles the blocks).
      EXPECT_LE(visited, 4 * (window / fold) + 4) << "ns_per_px " << ns_per_px;
    }
  }
}

// --- the fixture trace --------------------------------------------------------

class Fixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto path = testing::temp_path("core_fixture.db");
    testing::write_fixture_trace(path);
    trace_ = std::make_shared<const analyzer::Trace>(analyzer::load_trace(path));
    model_ = TimelineModel::build(trace_);
  }
  static void TearDownTestSuite() {
    model_.reset();
    trace_.reset();
  }
  static std::vector<RowKind> kinds(int group) {
    std::vector<RowKind> k;
    const auto& g = model_->groups()[static_cast<std::size_t>(group)];
    for (int r = g.first_row; r < g.end_row; ++r) k.push_back(model_->rows()[static_cast<std::size_t>(r)].kind);
    return k;
  }
  static int find_row(RankId rank, RowKind kind, std::string_view role = {}, int sub_row = 0) {
    const auto rows = model_->rows();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      if (r.rank != rank || r.kind != kind || r.sub_row != sub_row) continue;
      if (!role.empty() && (r.stream < 0 || trace_->streams[static_cast<std::size_t>(r.stream)].role != role))
        continue;
      return static_cast<int>(i);
    }
    return -1;
  }
  static inline std::shared_ptr<const analyzer::Trace> trace_;
  static inline std::shared_ptr<const TimelineModel> model_;
};

TEST_F(Fixture, RowsAreGroupedByRankWithStreamsInRoleOrder) {
  ASSERT_EQ(model_->groups().size(), 2u);
  using K = RowKind;
  // Each stream: op ranges, kernels, queue length (shown once the analyses
  // bring its values; RowLayout hides it until then).
  const std::vector<K> rank0{K::kRankHeader, K::kIterations, K::kLayers,     K::kChunks, K::kChunks,
                             K::kOps,        K::kActivities, K::kQueue,      K::kOps,    K::kActivities,
                             K::kQueue,      K::kOps,        K::kActivities, K::kQueue,  K::kMemory,
                             // the launching thread: two launches at 116 us (dispatch c1, expert c0) overlap
                             K::kApiCalls, K::kApiCalls};
  EXPECT_EQ(kinds(0), rank0);
  auto rank1 = rank0;
  rank1.erase(rank1.end() - 3);  // no memory events on rank 1
  EXPECT_EQ(kinds(1), rank1);
  EXPECT_EQ(model_->groups()[0].label, "Rank 0 \xC2\xB7 Test GPU");
  EXPECT_EQ(model_->rows()[static_cast<std::size_t>(model_->groups()[0].end_row - 2)].label,
            "thread 1000 \xC2\xB7 API calls");
  EXPECT_EQ(model_->start_ns(), us(-4));  // the first launch
  EXPECT_EQ(model_->end_ns(), us(310));
}

// Queue-length rows: hidden until their tracks arrive, then one per stream
// that launched through HTA's launch calls, each the analyzer's full series
// (analyzer::queue_lengths) with ties at one time folded to the last value;
// a zoomed-out frame still shows each track's maximum in some column.
TEST_F(Fixture, QueueRowsShowTheAnalyzersQueueLengthOnceComputed) {
  const RowLayout before = RowLayout::compute(*model_);
  for (std::size_t r = 0; r < model_->rows().size(); ++r)
    if (model_->rows()[r].kind == RowKind::kQueue) {
      EXPECT_FALSE(before.visible(static_cast<int>(r)));
    }
  const auto queues = QueueTracks::compute(*trace_);
  ASSERT_FALSE(queues->empty());
  const RowLayout after = RowLayout::compute(*model_, {}, queues.get());
  EXPECT_GT(after.total_height(), before.total_height());
  const auto full = analyzer::queue_lengths(*trace_);
  int shown = 0;
  for (std::size_t r = 0; r < model_->rows().size(); ++r) {
    const Row& row = model_->rows()[r];
    if (row.kind != RowKind::kQueue) continue;
    const CounterTrack* c = queues->for_stream(row.stream);
    EXPECT_EQ(after.visible(static_cast<int>(r)), c != nullptr);
    if (c == nullptr) continue;
    ++shown;
    const auto& s = trace_->streams[static_cast<std::size_t>(row.stream)];
    const auto it = std::find_if(full.begin(), full.end(), [&](const analyzer::StreamQueue& q) {
      return q.rank == s.rank.value && q.stream == s.id.value;
    });
    ASSERT_NE(it, full.end());
    EXPECT_EQ(c->max_value(), it->max);
    // The value in force after each change is the series' last point at that time.
    for (std::size_t i = 0; i < it->series.size(); ++i)
      if (i + 1 == it->series.size() || it->series[i + 1].ts_ns != it->series[i].ts_ns) {
        EXPECT_EQ(c->value_at(it->series[i].ts_ns), it->series[i].length);
      }
  }
  EXPECT_EQ(shown, static_cast<int>(queues->tracks().size()));
  // Zoomed out to 40 px: the counters of the queue rows keep each maximum.
  const auto axis = TimeAxis::fit(static_cast<double>(model_->start_ns()), static_cast<double>(model_->end_ns()), 40);
  const auto dl = prepare_draw_list(*model_, after, axis, 0, after.total_height(), {}, queues.get());
  int drawn = 0;
  for (const auto& dc : dl.counters) {
    if (dc.kind != RowKind::kQueue) continue;
    ++drawn;
    std::int64_t hi = 0;
    for (const auto& col : dc.columns) hi = std::max(hi, col.hi);
    EXPECT_EQ(hi, dc.max_value);
    EXPECT_LE(dc.columns.size(), 40u);
  }
  EXPECT_EQ(drawn, shown);
  // Without the tracks the draw list has no queue counter.
  for (const auto& dc : prepare_draw_list(*model_, after, axis, 0, after.total_height()).counters)
    EXPECT_NE(dc.kind, RowKind::kQueue);
}

// The rows built on several threads (each a run of the streams) are the
// rows built on one.
TEST_F(Fixture, QueueRowsAreTheSameOnSeveralThreads) {
  const auto one = QueueTracks::compute(*trace_, 1);
  ASSERT_GE(one->tracks().size(), 2u);
  for (const int threads : {2, 3, 8}) {
    const auto many = QueueTracks::compute(*trace_, threads);
    ASSERT_EQ(many->tracks().size(), one->tracks().size());
    for (std::size_t s = 0; s < trace_->streams.size(); ++s) {
      const auto* a = one->for_stream(static_cast<std::int32_t>(s));
      const auto* b = many->for_stream(static_cast<std::int32_t>(s));
      ASSERT_EQ(a == nullptr, b == nullptr) << "stream " << s << ", " << threads << " threads";
      if (a == nullptr) continue;
      EXPECT_EQ(a->rank(), b->rank());
      EXPECT_TRUE(std::ranges::equal(a->samples(), b->samples(), [](const CounterSample& x, const CounterSample& y) {
        return x.ts_ns == y.ts_ns && x.bytes == y.bytes;
      })) << "stream " << s << ", " << threads << " threads";
    }
  }
}

TEST_F(Fixture, SpansNestIterationLayerAndChunk) {
  const auto layers = find_row(RankId(0), RowKind::kLayers);
  ASSERT_GE(layers, 0);
  const auto& row = model_->rows()[static_cast<std::size_t>(layers)];
  ASSERT_EQ(row.items.size(), 3u);
  const auto span = [&](std::size_t p) { return model_->spans()[row.items[p]]; };
  EXPECT_EQ(span(0).start_ns, us(0));
  EXPECT_EQ(span(0).end_ns, us(90));
  EXPECT_EQ(span(1).start_ns, us(100));
  EXPECT_EQ(span(1).end_ns, us(170));
  EXPECT_EQ(span(2).phase, Phase::kBackward);
  EXPECT_EQ(model_->item_label({ItemSource::kSpan, row.items[2]}), "L1 bwd");
  // The overlapping chunks of layer 1 take two sub-rows.
  const auto c0 = find_row(RankId(0), RowKind::kChunks, {}, 0);
  const auto c1 = find_row(RankId(0), RowKind::kChunks, {}, 1);
  ASSERT_GE(c1, 0);
  const auto& r0 = model_->rows()[static_cast<std::size_t>(c0)];
  const auto& r1 = model_->rows()[static_cast<std::size_t>(c1)];
  ASSERT_EQ(r0.items.size(), 1u);
  ASSERT_EQ(r1.items.size(), 1u);
  EXPECT_EQ(model_->spans()[r0.items[0]].start_ns, us(110));
  EXPECT_EQ(model_->spans()[r0.items[0]].end_ns, us(150));
  EXPECT_EQ(model_->spans()[r1.items[0]].start_ns, us(120));
  EXPECT_EQ(model_->spans()[r1.items[0]].end_ns, us(170));
  const auto it = find_row(RankId(1), RowKind::kIterations);
  const auto& ir = model_->rows()[static_cast<std::size_t>(it)];
  ASSERT_EQ(ir.items.size(), 1u);
  EXPECT_EQ(model_->spans()[ir.items[0]].end_ns, us(260));
}

TEST_F(Fixture, ColoursFollowOpKindsAndKernelNames) {
  const auto row = find_row(RankId(0), RowKind::kActivities, "compute");
  const auto& r = model_->rows()[static_cast<std::size_t>(row)];
  ASSERT_EQ(r.items.size(), 8u);
  std::vector<ColourClass> c;
  for (std::size_t p = 0; p < r.items.size(); ++p) c.push_back(model_->item_colour(model_->row_item(r, p)));
  using C = ColourClass;
  EXPECT_EQ(c, (std::vector<C>{C::kGating, C::kExpertCompute, C::kExpertCompute, C::kGating, C::kExpertCompute,
                               C::kExpertCompute, C::kExpertCompute, C::kAllReduce}));
  const auto copy = find_row(RankId(1), RowKind::kActivities, "copy");
  EXPECT_EQ(model_->item_colour(model_->row_item(model_->rows()[static_cast<std::size_t>(copy)], 0)),
            ColourClass::kOffloadPrefetch);
  const auto comm_ops = find_row(RankId(1), RowKind::kOps, "comm");
  const auto& co = model_->rows()[static_cast<std::size_t>(comm_ops)];
  EXPECT_EQ(model_->item_colour(model_->row_item(co, 0)), ColourClass::kAllToAll);
  EXPECT_EQ(model_->item_colour(model_->row_item(co, co.items.size() - 1)), ColourClass::kAllReduce);
}

TEST_F(Fixture, HitTestFindsTheItemUnderTheCursor) {
  const auto row = find_row(RankId(0), RowKind::kActivities, "compute");
  const auto& r = model_->rows()[static_cast<std::size_t>(row)];
  auto hit = model_->hit_test(row, static_cast<double>(us(50)), 100);
  ASSERT_TRUE(hit);
  EXPECT_EQ(model_->item_name(model_->row_item(r, *hit)), "expert_gemm2");
  // In the gap [260, 300): nothing within 1 us, the nearest within 25 us.
  EXPECT_FALSE(model_->hit_test(row, static_cast<double>(us(280)), 1000));
  hit = model_->hit_test(row, static_cast<double>(us(290)), 25000);
  ASSERT_TRUE(hit);
  EXPECT_EQ(model_->item_name(model_->row_item(r, *hit)), "ncclDevKernel_AllReduce_Sum");
  // Every item is found back in its row.
  for (std::size_t i = 0; i < model_->rows().size(); ++i) {
    const auto& rr = model_->rows()[i];
    for (std::size_t p = 0; p < rr.items.size(); ++p) {
      const auto place = model_->place_of(model_->row_item(rr, p));
      ASSERT_TRUE(place);
      EXPECT_EQ(place->row, static_cast<int>(i));
      EXPECT_EQ(place->pos, p);
    }
  }
}

TEST_F(Fixture, MemoryCounterIsTheSumOfLiveAllocations) {
  ASSERT_EQ(model_->counters().size(), 1u);
  const auto& c = model_->counters()[0];
  EXPECT_EQ(c.rank(), RankId(0));
  EXPECT_EQ(c.value_at(us(50)), 4 << 20);
  EXPECT_EQ(c.value_at(us(150)), 6 << 20);
  EXPECT_EQ(c.value_at(us(250)), 2 << 20);
  EXPECT_EQ(c.max_value(), 6 << 20);
  // Drawn over [0, 300) us at 1 us per pixel: 4 MiB, then 6, then 2.
  const auto cols = c.columns(TimeAxis::fit(static_cast<double>(us(0)), static_cast<double>(us(300)), 300));
  ASSERT_EQ(cols.size(), 3u);
  EXPECT_EQ(cols[0].hi, 4 << 20);
  EXPECT_FLOAT_EQ(cols[1].x0, 100);
  EXPECT_EQ(cols[1].hi, 6 << 20);
  EXPECT_EQ(cols[2].hi, 2 << 20);
  EXPECT_FLOAT_EQ(cols[2].x1, 300);
}

// Each pixel column's range, read from the samples themselves: where the
// axis starts at a multiple of 2^m ns and a pixel is 2^m ns wide, every
// bucket no wider than a pixel lies in one column, so a column ranges over
// the values of its samples, and the value carried in from before where its
// first sample comes after its start (the carried value alone where it has
// none). Series of equal times, nanosecond and microsecond steps and long
// gaps, negative times included, so that levels are kept and skipped.
TEST(CounterTrack, ColumnsRangeOverEverySampleOfTheirPixel) {
  std::mt19937_64 rng(11);
  const auto below = [&rng](std::uint64_t n) { return static_cast<std::int64_t>(rng() % n); };
  for (int series = 0; series < 30; ++series) {
    std::vector<CounterSample> samples;
    std::int64_t t = -(std::int64_t{1} << 24) + below(1000);
    const auto n = 1 + below(4000);
    const auto gap_kinds = 1 + below(4);  // some series only of equal times and ns steps
    for (std::int64_t i = 0; i < n; ++i) {
      const auto kind = below(static_cast<std::uint64_t>(gap_kinds));
      t += kind == 0 ? 0 : kind == 1 ? 1 + below(4) : kind == 2 ? 1000 + below(3000) : below(1 << 22);
      samples.push_back({t, below(100) - 20});
    }
    const CounterTrack track(RankId(0), "queue length", samples);
    for (int m = 0; m <= 22; m += 2) {
      const std::int64_t w = std::int64_t{1} << m;
      TimeAxis axis;
      axis.ns_per_px = static_cast<double>(w);
      axis.width_px = 700;
      // Starting before the first sample, at a sample, and past the last.
      for (const auto from : {samples.front().ts_ns - 3 * w, samples[samples.size() / 2].ts_ns, samples.back().ts_ns + w}) {
        const std::int64_t t0 = (from >> m) << m;
        axis.t0_ns = static_cast<double>(t0);
        std::vector<std::pair<std::int64_t, std::int64_t>> want(static_cast<std::size_t>(axis.width_px));
        std::size_t i = 0;
        std::int64_t carry = 0;
        for (; i < samples.size() && samples[i].ts_ns < t0; ++i) carry = samples[i].bytes;
        for (std::size_t c = 0; c < want.size(); ++c) {
          const auto start = t0 + static_cast<std::int64_t>(c) * w;
          std::int64_t lo = carry, hi = carry;
          if (i < samples.size() && samples[i].ts_ns == start) lo = hi = samples[i].bytes;
          for (; i < samples.size() && samples[i].ts_ns < start + w; ++i) {
            lo = std::min(lo, samples[i].bytes);
            hi = std::max(hi, samples[i].bytes);
            carry = samples[i].bytes;
          }
          want[c] = {lo, hi};
        }
        std::vector<std::pair<std::int64_t, std::int64_t>> got(want.size(), {INT64_MIN, INT64_MIN});
        for (const auto& col : track.columns(axis))
          for (auto x = static_cast<std::size_t>(col.x0); x < static_cast<std::size_t>(col.x1) && x < got.size(); ++x)
            got[x] = {col.lo, col.hi};
        ASSERT_EQ(got, want) << "series " << series << ", 2^" << m << " ns a pixel, from " << t0;
      }
    }
  }
}

TEST_F(Fixture, ExpertLoadSumsOverSourceRanks) {
  const auto x = ExpertLoadIndex::from_trace(*trace_);
  ASSERT_EQ(x.iterations().size(), 2u);
  EXPECT_EQ(x.experts(), 4);
  EXPECT_EQ(x.max_tokens(), 103);
  const auto g0 = x.grid(*trace_, 0);
  EXPECT_EQ(g0.tokens, (std::vector<std::int64_t>{15, 25, 35, 45, 1, 2, 103, 4}));
  EXPECT_EQ(g0.layer_total(1), 110);
  const auto g1 = x.grid(*trace_, 1);
  EXPECT_EQ(g1.tokens, (std::vector<std::int64_t>{1, 1, 1, 1, -1, -1, -1, -1}));
}

TEST_F(Fixture, SearchIsCaseInsensitiveOverNamesAndKinds) {
  EXPECT_EQ(search_items(*model_, "alltoall").hits.size(), 12u);     // kernels only
  EXPECT_EQ(search_items(*model_, "ALL_TO_ALL").hits.size(), 12u);   // op kinds only
  const auto r = search_items(*model_, "expert_gemm");
  ASSERT_EQ(r.hits.size(), 10u);
  EXPECT_TRUE(std::is_sorted(r.hits.begin(), r.hits.end(),
                             [](const SearchHit& a, const SearchHit& b) { return a.start_ns < b.start_ns; }));
  EXPECT_EQ(search_items(*model_, "memcpy dtoh").hits.size(), 2u);
  EXPECT_EQ(search_items(*model_, "L1 bwd").hits.size(), 2u);        // layer spans
  EXPECT_TRUE(search_items(*model_, "").hits.empty());
  EXPECT_TRUE(search_items(*model_, "expert_gemm", 3).truncated);
}

TEST_F(Fixture, DetailsNameTheOpAndTheApiCall) {
  const auto row = find_row(RankId(0), RowKind::kActivities, "compute");
  const auto& r = model_->rows()[static_cast<std::size_t>(row)];
  const auto fields = describe_item(*model_, model_->row_item(r, 2));  // expert_gemm2
  auto value = [&](const std::string& key) {
    for (const auto& f : fields)
      if (f.key == key) return f.value;
    return std::string("<missing>");
  };
  EXPECT_EQ(value("Name"), "expert_gemm2");
  EXPECT_EQ(value("Duration"), std::string("15.0 ") + kMu + "s");
  EXPECT_EQ(value("Start"), std::string("49.000 ") + kMu + "s");  // from the first launch at -4 us
  EXPECT_EQ(value("Op kind"), "expert_ffn");
  EXPECT_EQ(value("Layer"), "0");
  EXPECT_EQ(value("Iteration"), "0");
  EXPECT_EQ(value("Call"), "cudaLaunchKernel");
  EXPECT_EQ(value("Launch to start"), std::string("4.00 ") + kMu + "s");
  EXPECT_EQ(value("Grid"), "128 x 1 x 1");
  const auto copy = find_row(RankId(0), RowKind::kActivities, "copy");
  const auto cf = describe_item(*model_, model_->row_item(model_->rows()[static_cast<std::size_t>(copy)], 0));
  bool has_bytes = false;
  for (const auto& f : cf) has_bytes |= f.key == "Bytes" && f.value == "1.00 MiB (1,048,576 B)";
  EXPECT_TRUE(has_bytes);
}

TEST_F(Fixture, ApiCallsFindTheKernelTheyLaunched) {
  const auto& g = model_->groups()[0];
  const auto& api_row = model_->rows()[static_cast<std::size_t>(g.end_row - 2)];
  ASSERT_EQ(api_row.kind, RowKind::kApiCalls);
  // The third launch on rank 0's thread is expert_gemm1 at 30 us.
  const auto fields = describe_item(*model_, model_->row_item(api_row, 2));
  auto value = [&](const std::string& key) {
    for (const auto& f : fields)
      if (f.key == key) return f.value;
    return std::string("<missing>");
  };
  EXPECT_EQ(value("Name"), "cudaLaunchKernel");
  EXPECT_EQ(value("Activity"), "expert_gemm1");
  EXPECT_EQ(value("Launch to start"), std::string("4.00 ") + kMu + "s");
  EXPECT_EQ(search_items(*model_, "cudaLaunch").hits.size(), 2u * 14u + 1u);  // 14 kernels per rank, + 1 on rank 0
}

TEST_F(Fixture, RangeSummaryOfLayerOneForward) {
  const auto s = analyzer::breakdown_in_window(*trace_, us(100), us(200));
  ASSERT_EQ(s.ranks.size(), 2u);
  for (const auto& r : s.ranks) {
    EXPECT_EQ(r.t.category_ns[static_cast<std::size_t>(Category::kGating)], 10'000);
    EXPECT_EQ(r.t.category_ns[static_cast<std::size_t>(Category::kAllToAll)], 40'000);
    EXPECT_EQ(r.t.category_ns[static_cast<std::size_t>(Category::kExpertCompute)], 40'000);
    EXPECT_EQ(r.t.busy_ns, 70'000);
    EXPECT_EQ(r.t.idle_ns, 30'000);
    EXPECT_EQ(r.t.comm_ns, 40'000);
    EXPECT_EQ(r.t.comm_hidden_ns, 20'000);  // dispatch c1 under expert c0, combine c0 under expert c1
  }
  EXPECT_EQ(s.total.t.busy_ns, 140'000);
  // The unclaimed NCCL all-reduce kernel counts as all-reduce.
  const auto t = analyzer::breakdown_in_window(*trace_, us(295), us(305));
  EXPECT_EQ(t.ranks[0].t.category_ns[static_cast<std::size_t>(Category::kAllReduce)], 5'000);
}

TEST_F(Fixture, DrawListPutsEachColourInItsLane) {
  const auto layout = RowLayout::compute(*model_);
  // 1 us per pixel from the trace start.
  const auto axis = TimeAxis::fit(static_cast<double>(us(0)), static_cast<double>(us(320)), 320);
  const auto dl = prepare_draw_list(*model_, layout, axis, 0, layout.total_height());
  const int compute = find_row(RankId(0), RowKind::kActivities, "compute");
  const int comm = find_row(RankId(0), RowKind::kActivities, "comm");
  auto colour_at = [&](int row, float x) {
    for (const auto& r : dl.rects)
      if (r.row == row && r.x0 <= x && x < r.x1) return r.colour;
    return ColourClass::kCount;
  };
  EXPECT_EQ(colour_at(compute, 40), ColourClass::kExpertCompute);
  EXPECT_EQ(colour_at(comm, 20), ColourClass::kAllToAll);
  EXPECT_EQ(colour_at(comm, 40), ColourClass::kCount);  // idle
  for (const auto& r : dl.rects)
    if (r.row == compute) {
      EXPECT_NE(r.colour, ColourClass::kAllToAll);
    }
  EXPECT_FALSE(dl.labels.empty());
  // Zoomed out to 10 us per pixel the kernels fold into runs.
  const auto far = TimeAxis::fit(static_cast<double>(us(0)), static_cast<double>(us(320)), 32);
  const auto dl2 = prepare_draw_list(*model_, layout, far, 0, layout.total_height());
  bool folded = false;
  for (const auto& r : dl2.rects) folded |= r.folded();
  EXPECT_TRUE(folded);
  // Collapsing rank 0 hides its rows.
  const auto collapsed = RowLayout::compute(*model_, {true, false});
  EXPECT_FALSE(collapsed.visible(compute));
  EXPECT_TRUE(collapsed.visible(model_->groups()[0].first_row));
  EXPECT_LT(collapsed.total_height(), layout.total_height());
  EXPECT_EQ(collapsed.row_at(1), model_->groups()[0].first_row);
}

TEST_F(Fixture, PanelsGetTheAnalyzersResults) {
  const auto a = compute_analysis_results(*trace_);
  // The analyzer's own analyses (analyze(), as the report's), nothing of the GUI's.
  ASSERT_TRUE(a.analyses);
  EXPECT_TRUE(a.error.empty());
  const auto loc = analyzer::analyze_locality(*trace_);
  ASSERT_TRUE(loc.has_load);  // the fixture's load has iterations 0 and 1
  EXPECT_EQ(a.analyses->locality.has_load, loc.has_load);
  EXPECT_EQ(a.analyses->locality.curve.size(), loc.curve.size());
  const auto mem = analyzer::analyze_memory(*trace_);
  EXPECT_EQ(a.analyses->memory.has_buffer_usage, mem.has_buffer_usage);
  EXPECT_EQ(a.analyses->memory.bubbles.size(), mem.bubbles.size());
  EXPECT_EQ(a.analyses->memory.peak_bytes, 6 << 20);
  // The report's sections come along, the memory one among them.
  ASSERT_NE(a.section("memory"), nullptr);
  ASSERT_NE(a.section("locality"), nullptr);
  // The recommenders are in (analyzer/recommend.h): present, one item per
  // MoE layer with expert load and subject.
  EXPECT_TRUE(a.recommendations_error.empty());
  ASSERT_TRUE(a.analyses->recommendations);
  for (const auto& r : a.analyses->recommendations->items) {
    EXPECT_FALSE(r.subject.empty());
    EXPECT_FALSE(r.evidence.empty());
  }
}

}  // namespace
}  // namespace moetrace::gui
