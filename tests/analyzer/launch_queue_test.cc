// Golden tests of launch_queue.h: idle-time breakdown, queue length and
// kernel-launch statistics as Holistic Trace Analysis (HTA) defines them.
// Every expected number is derived by hand from HTA's definitions in the
// comment above the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/launch_queue.h"
#include "moetrace/analyzer/report.h"
#include "expect_named.h"
#include "json_schema.h"
#include "loaded_trace.h"

namespace moetrace::analyzer {
namespace {

const std::string kLqReportSchema = std::string(MOETRACE_SOURCE_DIR) + "/schemas/report.schema.json";

const StreamIdle& idle_of(const std::vector<StreamIdle>& v, int rank, int stream) {
  for (const auto& r : v)
    if (r.rank == rank && r.stream == stream) return r;
  throw std::runtime_error("no such stream");
}

// What a test expects of one stream's idle time: the fields it names
// (expect_named.h), the idle ns of a category by the category's name.
struct IdleWant {
  std::optional<std::int64_t> events{}, window{}, host_wait{}, kernel_wait{}, other{};
};
void expect_idle(const StreamIdle& s, const IdleWant& w) {
  SCOPED_TRACE("idle time of rank " + std::to_string(s.rank) + " stream " + std::to_string(s.stream));
  testing::expect_named(w.events, s.events, "events");
  testing::expect_named(w.window, s.window_ns, "window_ns");
  testing::expect_named(w.host_wait, s.at(IdleCategory::kHostWait), "host_wait");
  testing::expect_named(w.kernel_wait, s.at(IdleCategory::kKernelWait), "kernel_wait");
  testing::expect_named(w.other, s.at(IdleCategory::kOther), "other");
}

const StreamQueue& queue_of(const std::vector<StreamQueue>& v, int rank, int stream) {
  for (const auto& q : v)
    if (q.rank == rank && q.stream == stream) return q;
  throw std::runtime_error("no such stream");
}

// The classification with a 30 ns threshold, so that gaps of tens of ns
// tell kernel_wait from other (the default, 30 us, is HTA's on
// microsecond traces: see ReportSectionsInEveryFormat).
const LaunchQueueOptions k30ns{.consecutive_kernel_delay_ns = 30};

// Rank 0, stream 0: six kernels, each launched by a call (corr = kernel #).
//   K1 [1000, 2000)  call [500, 600)
//   K2 [2010, 3000)  call [700, 800)   gap 10; call before K1's end (2000);
//                                      10 < 30 -> kernel_wait 10
//   K3 [3500, 4000)  call [3200, 3300) gap 500; call start 3200 > 3000
//                                      -> host_wait 500
//   K4 [4600, 5000)  call [900, 1000)  gap 600 >= 30, call in time -> other 600
//   K5 [5030, 5100)  call [950, 990)   gap 30: not < 30 -> other 30
//   K6 [5100, 5200)  call [5100, 5150) gap 0; call start 5100 not > 5100
//                                      -> kernel_wait 0
//   host_wait 500 (1 interval), kernel_wait 10 (2), other 630 (2);
//   idle 1140, ratios 500/1140, 10/1140, 630/1140; window 5200 - 1000 = 4200.
// Stream 1: kernels without launch calls:
//   [0, 100), [120, 200): gap 20 < 30 -> kernel_wait 20 (no call: never host
//   wait); [1200, 1300): gap 1000 -> other 1000.
// Stream 2: one memcpy: no interval, idle 0, every ratio 0.
constexpr std::string_view kIdle = R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=compute
  stream id=2 rank=0 role=copy
  kernel rank=0 stream=0 start=1000 end=2000 corr=1
  kernel rank=0 stream=0 start=2010 end=3000 corr=2
  kernel rank=0 stream=0 start=3500 end=4000 corr=3
  kernel rank=0 stream=0 start=4600 end=5000 corr=4
  kernel rank=0 stream=0 start=5030 end=5100 corr=5
  kernel rank=0 stream=0 start=5100 end=5200 corr=6
  api rank=0 start=500 end=600 corr=1
  api rank=0 start=700 end=800 corr=2
  api rank=0 start=3200 end=3300 corr=3
  api rank=0 start=900 end=1000 corr=4
  api rank=0 start=950 end=990 corr=5
  api rank=0 start=5100 end=5150 corr=6
  kernel rank=0 stream=1 start=0 end=100
  kernel rank=0 stream=1 start=120 end=200
  kernel rank=0 stream=1 start=1200 end=1300
  memcpy rank=0 stream=2 start=50 end=60 bytes=64
)";

TEST(LaunchQueue, IdleTimeSplitsIntoHostWaitKernelWaitAndOther) {
  const auto trace = testing::load_text_trace("lq-idle.db", kIdle);
  const auto idle = idle_time_breakdown(trace, k30ns);
  ASSERT_EQ(idle.size(), 3u);
  const auto& s0 = idle_of(idle, 0, 0);
  expect_idle(s0, {.events = 6, .window = 4200, .host_wait = 500, .kernel_wait = 10, .other = 630});
  EXPECT_EQ(s0.idle_total_ns(), 1140);
  EXPECT_EQ(s0.gaps, (std::array<std::int64_t, 3>{1, 2, 2}));
  EXPECT_DOUBLE_EQ(s0.ratio(IdleCategory::kHostWait), 500.0 / 1140.0);
  EXPECT_DOUBLE_EQ(s0.ratio(IdleCategory::kKernelWait), 10.0 / 1140.0);
  EXPECT_DOUBLE_EQ(s0.ratio(IdleCategory::kOther), 630.0 / 1140.0);

  expect_idle(idle_of(idle, 0, 1), {.window = 1300, .host_wait = 0, .kernel_wait = 20, .other = 1000});

  const auto& s2 = idle_of(idle, 0, 2);
  EXPECT_EQ(s2.events, 1);
  EXPECT_EQ(s2.idle_total_ns(), 0);
  EXPECT_EQ(s2.ratio(IdleCategory::kOther), 0.0);
}

// A larger threshold moves the 30 ns and 600 ns gaps of stream 0 into
// kernel_wait (both < 1000, calls in time): kernel_wait 10 + 0 + 600 + 30 = 640,
// other 0; host wait stays 500 (it is tested first).
TEST(LaunchQueue, KernelWaitFollowsTheConsecutiveKernelDelay) {
  const auto trace = testing::load_text_trace("lq-idle-delay.db", kIdle);
  LaunchQueueOptions o;
  o.consecutive_kernel_delay_ns = 1000;
  const auto idle = idle_time_breakdown(trace, o);
  expect_idle(idle_of(idle, 0, 0), {.host_wait = 500, .kernel_wait = 640, .other = 0});
}

// Rank 0, stream 0 (+1 at each launch call's start, -1 at its event's GPU start):
//   c1 cudaLaunchKernel        [100, 150)  -> kernel [400, 500)
//   c2 cudaLaunchKernel        [200, 250)  -> kernel [500, 600)
//   c3 cudaLaunchKernel_v7000  [300, 350)  -> kernel [600, 700)  (CUPTI's name)
//   c4 cudaMemsetAsync         [650, 655)  -> memset [800, 850)
//   c5 cudaGraphLaunch         [660, 670)  -> kernel [900, 1000) (not a launch event: no change)
// Series: (100,1) (200,2) (300,3) (400,2) (500,1) (600,0) (650,1) (800,0).
// describe(): count 8; values sorted 0 0 1 1 1 2 2 3, mean 10/8 = 1.25;
//   squared deviations 2 x 1.5625 + 3 x 0.0625 + 2 x 0.5625 + 3.0625 = 7.5,
//   std = sqrt(7.5 / 7); min 0, max 3;
//   25%: position 0.25 x 7 = 1.75 -> 0 + 0.75 x (1 - 0) = 0.75;
//   50%: position 3.5 -> 1; 75%: position 5.25 -> 2.
// At max (3): [300, 400) = 100 ns.
// With max_queue_length 2: full on [200, 300), [300, 400), [400, 500) = 300 ns;
//   the rank's trace spans 100 (c1) to 1000 (the graph kernel's end) = 900 ns,
//   full_fraction 300 / 900.
// Rank 1, stream 1: a call and its kernel start at 2000 together: the launch
// counts first, (2000,1) (2000,0): min 0 (never -1), max 1, at max 0 ns,
// mean 0.5, std sqrt(0.5 / 1).
constexpr std::string_view kQueue = R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=1 role=compute
  api rank=0 start=100 end=150 corr=1
  api rank=0 start=200 end=250 corr=2
  api rank=0 start=300 end=350 corr=3 name=cudaLaunchKernel_v7000
  api rank=0 start=650 end=655 corr=4 name=cudaMemsetAsync
  api rank=0 start=660 end=670 corr=5 name=cudaGraphLaunch
  kernel rank=0 stream=0 start=400 end=500 corr=1
  kernel rank=0 stream=0 start=500 end=600 corr=2
  kernel rank=0 stream=0 start=600 end=700 corr=3
  memset rank=0 stream=0 start=800 end=850 bytes=64 corr=4
  kernel rank=0 stream=0 start=900 end=1000 corr=5
  api rank=1 start=2000 end=2010 corr=1
  kernel rank=1 stream=1 start=2000 end=2100 corr=1
)";

TEST(LaunchQueue, QueueLengthSeriesAndHtaSummary) {
  const auto trace = testing::load_text_trace("lq-queue.db", kQueue);
  LaunchQueueOptions o;
  o.max_queue_length = 2;
  const auto queues = queue_lengths(trace, o);
  ASSERT_EQ(queues.size(), 2u);
  const auto& q = queue_of(queues, 0, 0);
  const std::vector<QueuePoint> expected = {{100, 1}, {200, 2}, {300, 3}, {400, 2},
                                            {500, 1}, {600, 0}, {650, 1}, {800, 0}};
  EXPECT_EQ(q.series, expected);
  EXPECT_EQ(q.count, 8);
  EXPECT_DOUBLE_EQ(q.mean, 1.25);
  EXPECT_NEAR(q.stddev, std::sqrt(7.5 / 7.0), 1e-12);
  EXPECT_EQ(q.min, 0);
  EXPECT_EQ(q.max, 3);
  EXPECT_DOUBLE_EQ(q.p25, 0.75);
  EXPECT_DOUBLE_EQ(q.p50, 1.0);
  EXPECT_DOUBLE_EQ(q.p75, 2.0);
  EXPECT_EQ(q.at_max_ns, 100);
  EXPECT_EQ(q.full_ns, 300);
  EXPECT_DOUBLE_EQ(q.full_fraction, 300.0 / 900.0);

  const auto& tie = queue_of(queues, 1, 1);
  EXPECT_EQ(tie.series, (std::vector<QueuePoint>{{2000, 1}, {2000, 0}}));
  EXPECT_EQ(tie.min, 0);
  EXPECT_EQ(tie.max, 1);
  EXPECT_EQ(tie.at_max_ns, 0);
  EXPECT_DOUBLE_EQ(tie.mean, 0.5);
  EXPECT_NEAR(tie.stddev, std::sqrt(0.5), 1e-12);
}

// HTA's default limit (1024) is never reached: no time with the queue full.
TEST(LaunchQueue, NoFullQueueUnderHtasLimit) {
  const auto trace = testing::load_text_trace("lq-queue-default.db", kQueue);
  const auto queues = queue_lengths(trace);
  const auto& q = queue_of(queues, 0, 0);
  EXPECT_EQ(q.full_ns, 0);
  EXPECT_EQ(q.full_fraction, 0.0);
}

// Rank 0, stream 0 (cutoffs: runtime 50 us, launch delay 100 us):
//   L1 cudaLaunchKernel       [0, 10000)        kernel [15000, 17000)
//      cpu 10000, gpu 2000, delay 15000 - 10000 = 5000; short (2000 < 10000 <= 50000)
//   L2 cudaLaunchKernel       [20000, 80000)    kernel [200000, 201000)
//      cpu 60000 > 50000: runtime outlier, so not short; delay 120000 > 100000: outlier
//   L3 cudaMemcpyAsync        [90000, 95000)    memcpy [94000, 99000)
//      cpu 5000, gpu 5000 (not <: not short); GPU started before the call's end:
//      delay max(0, -1000) = 0, start delay 4000
//   L4 cudaLaunchKernel_v7000 [300000, 300020)  kernel [400020, 400030)
//      cpu 20, gpu 10: short; delay exactly 100000: not an outlier
//   L5 cudaLaunchKernel       [500000, 550000)  kernel [560000, 600000)
//      cpu exactly 50000: not a runtime outlier; gpu 40000 < 50000: short; delay 10000
//   cuLaunchKernel            [610000, 610010)  kernel [620000, 620100): other launch call
//   a kernel without correlation id: no launch call
// Rank 0: launches 5, short 3 (L1, L4, L5), runtime outliers 1 (L2), delay
// outliers 1 (L2), other 1, none 1.
// Delays sorted 0, 5000, 10000, 100000, 120000: mean 235000 / 5 = 47000,
//   median 10000, 95%: position 3.8 -> 100000 + 0.8 x 20000 = 116000, max 120000.
// Call durations sorted 20, 5000, 10000, 50000, 60000: median 10000.
// Longest delays first: L2, L4, L5, L1, L3.
constexpr std::string_view kLaunches = R"(
  stream id=0 rank=0 role=compute
  api rank=0 start=0 end=10000 corr=1
  kernel rank=0 stream=0 start=15000 end=17000 corr=1 name=l1
  api rank=0 start=20000 end=80000 corr=2
  kernel rank=0 stream=0 start=200000 end=201000 corr=2 name=l2
  api rank=0 start=90000 end=95000 corr=3 name=cudaMemcpyAsync
  memcpy rank=0 stream=0 start=94000 end=99000 bytes=1024 corr=3
  api rank=0 start=300000 end=300020 corr=4 name=cudaLaunchKernel_v7000
  kernel rank=0 stream=0 start=400020 end=400030 corr=4 name=l4
  api rank=0 start=500000 end=550000 corr=5
  kernel rank=0 stream=0 start=560000 end=600000 corr=5 name=l5
  api rank=0 start=610000 end=610010 corr=6 name=cuLaunchKernel
  kernel rank=0 stream=0 start=620000 end=620100 corr=6 name=driver
  kernel rank=0 stream=0 start=700000 end=700100 name=orphan
)";

// What a test expects of one launch: the fields it names (expect_named.h).
struct LaunchWant {
  std::optional<std::int64_t> cpu{}, gpu{}, delay{}, start_delay{};
  std::optional<bool> short_kernel{}, runtime_outlier{}, delay_outlier{};
};
void expect_launch(const KernelLaunch& l, const LaunchWant& w) {
  SCOPED_TRACE("launch with correlation id " + std::to_string(l.correlation_id));
  testing::expect_named(w.cpu, l.cpu_duration_ns, "cpu_duration_ns");
  testing::expect_named(w.gpu, l.gpu_duration_ns, "gpu_duration_ns");
  testing::expect_named(w.delay, l.launch_delay_ns, "launch_delay_ns");
  testing::expect_named(w.start_delay, l.start_delay_ns, "start_delay_ns");
  testing::expect_named(w.short_kernel, l.short_kernel, "short_kernel");
  testing::expect_named(w.runtime_outlier, l.runtime_outlier, "runtime_outlier");
  testing::expect_named(w.delay_outlier, l.launch_delay_outlier, "launch_delay_outlier");
}

// A rank's launch counts, in the words of the comments above the tests.
std::string launch_counts(const RankLaunchStats& r) {
  return fmt::format("launches {}, short {}, runtime outliers {}, delay outliers {}, other {}, none {}", r.launches,
                     r.short_kernels, r.runtime_outliers, r.launch_delay_outliers, r.other_launch_calls,
                     r.no_launch_call);
}

TEST(LaunchQueue, KernelLaunchDelaysAndOutliers) {
  const auto trace = testing::load_text_trace("lq-launch.db", kLaunches);
  const auto launches = kernel_launches(trace);
  ASSERT_EQ(launches.size(), 5u);
  // Sorted by GPU start: L3's memcpy (94000) runs before L2's kernel (200000).
  std::vector<std::int64_t> by_start;
  for (const auto& k : launches) by_start.push_back(k.correlation_id);
  EXPECT_EQ(by_start, (std::vector<std::int64_t>{1, 3, 2, 4, 5}));
  expect_launch(launches[0], {.cpu = 10000,  // L1
                              .gpu = 2000,
                              .delay = 5000,
                              .start_delay = 15000,
                              .short_kernel = true,
                              .runtime_outlier = false,
                              .delay_outlier = false});
  expect_launch(launches[2],  // L2
                {.delay = 120000, .short_kernel = false, .runtime_outlier = true, .delay_outlier = true});
  expect_launch(launches[1], {.delay = 0, .start_delay = 4000, .short_kernel = false});        // L3
  expect_launch(launches[3], {.delay = 100000, .short_kernel = true, .delay_outlier = false});  // L4
  expect_launch(launches[4], {.cpu = 50000, .short_kernel = true, .runtime_outlier = false});   // L5

  const auto a = analyze_launch_queue(trace);
  ASSERT_EQ(a.launches.size(), 1u);
  const auto& r = a.launches[0];
  EXPECT_EQ(launch_counts(r), "launches 5, short 3, runtime outliers 1, delay outliers 1, other 1, none 1");
  EXPECT_DOUBLE_EQ(r.launch_delay_ns.mean, 47000.0);
  EXPECT_DOUBLE_EQ(r.launch_delay_ns.p50, 10000.0);
  EXPECT_NEAR(r.launch_delay_ns.p95, 116000.0, 1e-6);
  EXPECT_EQ(r.launch_delay_ns.max, 120000);
  EXPECT_DOUBLE_EQ(r.cpu_duration_ns.p50, 10000.0);
  ASSERT_EQ(r.worst.size(), 5u);
  std::vector<std::int64_t> order;
  for (const auto& k : r.worst) order.push_back(k.correlation_id);
  EXPECT_EQ(order, (std::vector<std::int64_t>{2, 4, 5, 1, 3}));
}

// Each rank's statistics are of its own launches alone, where its stream
// tracks lie apart among another rank's (stream order 0, 1, 2: ranks 0, 1,
// 0). Rank 0: launch delays 1000 - 200 = 800, 1200 - 600 = 600 (stream 0)
// and 3000 - 400 = 2600 (stream 2): 3 launches, mean 4000 / 3, p50 800, max
// 2600, the worst corr 2 (stream 2), then 1, then 3. Rank 1: one launch,
// delay 2000 - 1600 = 400, and a kernel launched through the driver API,
// which HTA does not count (other 1).
TEST(LaunchQueue, EachRanksStatisticsWhereItsStreamsLieApart) {
  const auto trace = testing::load_text_trace("lq-apart.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=1 role=compute
    stream id=2 rank=0 role=compute
    api rank=0 start=100 end=200 corr=1
    kernel rank=0 stream=0 start=1000 end=1100 corr=1 name=a
    api rank=0 start=300 end=400 corr=2
    kernel rank=0 stream=2 start=3000 end=3100 corr=2 name=b
    api rank=0 start=500 end=600 corr=3
    kernel rank=0 stream=0 start=1200 end=1300 corr=3 name=c
    api rank=1 start=1500 end=1600 corr=1
    kernel rank=1 stream=1 start=2000 end=2050 corr=1 name=d
    api rank=1 start=1700 end=1750 corr=2 name=cuLaunchKernel
    kernel rank=1 stream=1 start=2100 end=2200 corr=2 name=e
  )");
  const auto stats = launch_statistics(trace, {});
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].rank, 0);
  EXPECT_EQ(stats[0].launches, 3);
  EXPECT_EQ(stats[0].other_launch_calls, 0);
  EXPECT_DOUBLE_EQ(stats[0].launch_delay_ns.mean, 4000.0 / 3.0);
  EXPECT_DOUBLE_EQ(stats[0].launch_delay_ns.p50, 800.0);
  EXPECT_EQ(stats[0].launch_delay_ns.max, 2600);
  std::vector<std::int64_t> worst;
  for (const auto& w : stats[0].worst) worst.push_back(w.correlation_id);
  EXPECT_EQ(worst, (std::vector<std::int64_t>{2, 1, 3}));
  EXPECT_EQ(stats[0].worst.front().name, "b");
  EXPECT_EQ(stats[1].rank, 1);
  EXPECT_EQ(stats[1].launches, 1);
  EXPECT_EQ(stats[1].other_launch_calls, 1);
  EXPECT_EQ(stats[1].launch_delay_ns.max, 400);
}

// No GPU events at all (ops only), and a bare in-memory trace: every result
// empty, the report says so and its JSON still matches the schema.
TEST(LaunchQueue, NoKernelsGiveEmptyResults) {
  const auto trace = testing::load_text_trace("lq-empty.db", testing::kFortyPercentLayer);
  EXPECT_TRUE(idle_time_breakdown(trace).empty());
  EXPECT_TRUE(queue_lengths(trace).empty());
  EXPECT_TRUE(kernel_launches(trace).empty());
  const auto a = analyze(trace);
  EXPECT_TRUE(a.launch_queue.empty());
  const auto j = report_json(trace, a, {});
  EXPECT_EQ(testing::schema_errors(j, kLqReportSchema), std::vector<std::string>{});
  EXPECT_TRUE(j["launch_queue"]["idle_time"]["rows"].empty());
  std::ostringstream text;
  write_text_report(text, trace, a, {});
  EXPECT_NE(text.str().find("no idle time, launch queue or launch to measure"), std::string::npos) << text.str();

  const Trace bare;
  EXPECT_TRUE(analyze_launch_queue(bare).empty());
}

// Kernels without API calls: idle time is kernel wait or other, never host
// wait; no queue; every event is counted as having no launch call.
//   [0, 100), [110, 200): gap 10 -> kernel_wait; [300, 400): gap 100 -> other.
TEST(LaunchQueue, KernelsWithoutApiCalls) {
  const auto trace = testing::load_text_trace("lq-no-api.db", R"(
    stream id=0 rank=0 role=compute
    kernel rank=0 stream=0 start=0 end=100
    kernel rank=0 stream=0 start=110 end=200
    kernel rank=0 stream=0 start=300 end=400
  )");
  const auto a = analyze_launch_queue(trace, k30ns);
  ASSERT_EQ(a.idle.size(), 1u);
  expect_idle(a.idle[0], {.host_wait = 0, .kernel_wait = 10, .other = 100});
  EXPECT_TRUE(a.queues.empty());
  ASSERT_EQ(a.launches.size(), 1u);
  EXPECT_EQ(launch_counts(a.launches[0]), "launches 0, short 0, runtime outliers 0, delay outliers 0, other 0, none 3");
  EXPECT_EQ(a.launches[0].launch_delay_ns.max, 0);
}

// 1000 launches, each call at 100 i and its kernel at 100 i + 50: the series
// alternates 1, 0 (2000 points, max 1). The analysis keeps at most
// series_points of them, the JSON report at most timeline_points; the peak
// survives both; the summary counts every point.
TEST(LaunchQueue, SeriesAreBoundedAndKeepTheirPeak) {
  std::string text = "stream id=0 rank=0 role=compute\n";
  for (int i = 1; i <= 1000; ++i) {
    text += "api rank=0 start=" + std::to_string(100 * i) + " end=" + std::to_string(100 * i + 10) +
            " corr=" + std::to_string(i) + "\n";
    text += "kernel rank=0 stream=0 start=" + std::to_string(100 * i + 50) + " end=" + std::to_string(100 * i + 60) +
            " corr=" + std::to_string(i) + "\n";
  }
  const auto trace = testing::load_text_trace("lq-long.db", text);
  LaunchQueueOptions o;
  o.series_points = 100;
  const auto a = analyze_launch_queue(trace, o);
  ASSERT_EQ(a.queues.size(), 1u);
  const auto& q = a.queues[0];
  EXPECT_EQ(q.count, 2000);
  EXPECT_TRUE(q.downsampled);
  EXPECT_LE(q.series.size(), 100u);
  EXPECT_GE(q.series.size(), 50u);
  std::int32_t peak = 0;
  for (const auto& p : q.series) peak = std::max(peak, p.length);
  EXPECT_EQ(peak, 1);

  Analyses all = analyze(trace);
  ReportOptions ro;
  ro.timeline_points = 64;
  const auto j = report_json(trace, all, ro);
  EXPECT_EQ(testing::schema_errors(j, kLqReportSchema), std::vector<std::string>{});
  const auto& series = j["launch_queue"]["queue_length"]["streams"][0]["series"];
  EXPECT_TRUE(series["downsampled"].get<bool>());
  EXPECT_LE(series["points"].size(), 64u);
  EXPECT_EQ(j["launch_queue"]["queue_length"]["streams"][0]["count"], 2000);
}

// The report in every format: JSON rows as HTA gives them (rank, stream,
// category, idle_ns, ratio) matching the schema; the text report has the
// summaries and not the series. The default threshold, 30 us, makes every
// gap of kIdle's stream 0 behind a call made in time kernel_wait: 10 + 600
// + 30 + 0 = 640; host_wait 500 as before; other 0.
TEST(LaunchQueue, ReportSectionsInEveryFormat) {
  const auto trace = testing::load_text_trace("lq-report.db", kIdle);
  const auto a = analyze(trace);
  const auto j = report_json(trace, a, {});
  EXPECT_EQ(testing::schema_errors(j, kLqReportSchema), std::vector<std::string>{});
  const auto& rows = j["launch_queue"]["idle_time"]["rows"];
  ASSERT_EQ(rows.size(), 9u);  // 3 streams x 3 categories
  EXPECT_EQ(rows[0]["stream_id"], 0);
  EXPECT_EQ(rows[0]["stream"], -1);  // the CUDA stream: the text trace records none
  EXPECT_EQ(rows[0]["category"], "host_wait");
  EXPECT_EQ(rows[0]["idle_ns"], 500);
  EXPECT_DOUBLE_EQ(rows[0]["ratio"].get<double>(), 500.0 / 1140.0);
  EXPECT_EQ(rows[1]["category"], "kernel_wait");
  EXPECT_EQ(rows[1]["idle_ns"], 640);
  EXPECT_EQ(rows[2]["category"], "other");
  EXPECT_EQ(rows[2]["idle_ns"], 0);
  EXPECT_EQ(j["launch_queue"]["thresholds"]["consecutive_kernel_delay_ns"], 30'000);

  std::ostringstream text, md, html;
  write_text_report(text, trace, a, {});
  write_markdown_report(md, trace, a, {});
  write_html_report(html, trace, a, {});
  EXPECT_NE(text.str().find("\nGPU idle time, launch queues and kernel launches\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("500 ns (43.9%)"), std::string::npos) << text.str();  // host wait: 500 / 1140
  EXPECT_EQ(text.str().find("points\":"), std::string::npos);
  EXPECT_NE(md.str().find("## GPU idle time, launch queues and kernel launches"), std::string::npos);
  EXPECT_NE(html.str().find("<section id=\"launch_queue\">"), std::string::npos);
}

// The window on a rank with profiler steps (HTA's include_last_profiler_step).
// Rank 0: three steps [0, 1000), [1000, 2000), [2000, 3000); one kernel
// launched per step by cudaLaunchKernel (calls at 100, 1100, 2100; kernels
// 300-500, 1300-1500, 2300-2500) and one more whose call (at 2900) starts in
// the last step. steps-but-last keeps the calls that start before 2000, the
// last step's start, and their kernels: 2 launches; on the stream, kernels
// 300-500 and 1300-1500: one gap of 800 whose call (1100) started after 500,
// host_wait 800, window 1500 - 300 = 1200; queue points: 2 launches + 2 GPU
// starts = 4, never more than 1 outstanding. span: all 4 (8 queue points).
// Rank 1 records one step only: no window applies, both kernels count.
constexpr std::string_view kSteps = R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=1 role=compute
  nvtx rank=0 start=0 end=1000 domain=pytorch name=ProfilerStep#1
  nvtx rank=0 start=1000 end=2000 domain=pytorch name=ProfilerStep#2
  nvtx rank=0 start=2000 end=3000 domain=pytorch name=ProfilerStep#3
  kernel rank=0 stream=0 start=300 end=500 corr=1
  kernel rank=0 stream=0 start=1300 end=1500 corr=2
  kernel rank=0 stream=0 start=2300 end=2500 corr=3
  kernel rank=0 stream=0 start=3000 end=3100 corr=4
  api rank=0 start=100 end=150 corr=1 name=cudaLaunchKernel
  api rank=0 start=1100 end=1150 corr=2 name=cudaLaunchKernel
  api rank=0 start=2100 end=2150 corr=3 name=cudaLaunchKernel
  api rank=0 start=2900 end=2950 corr=4 name=cudaLaunchKernel
  nvtx rank=1 start=0 end=1000 domain=pytorch name=ProfilerStep#1
  kernel rank=1 stream=1 start=300 end=500 corr=11
  kernel rank=1 stream=1 start=2300 end=2500 corr=12
  api rank=1 start=100 end=150 corr=11 name=cudaLaunchKernel
  api rank=1 start=2100 end=2150 corr=12 name=cudaLaunchKernel
)";

TEST(LaunchQueue, StepsButLastLeavesOutTheLastProfilerStepAsHtaDoes) {
  const auto trace = testing::load_text_trace("lq-steps.db", kSteps);
  LaunchQueueOptions but_last;
  but_last.window = RankWindow::kStepsButLast;
  const auto a = analyze_launch_queue(trace, but_last);
  ASSERT_EQ(a.launches.size(), 2u);
  EXPECT_EQ(a.launches[0].rank, 0);
  EXPECT_EQ(a.launches[0].launches, 2);
  EXPECT_EQ(a.launches[1].launches, 2);  // rank 1: one step, no window
  expect_idle(idle_of(a.idle, 0, 0), {.events = 2, .window = 1200, .host_wait = 800});
  const auto& q0 = queue_of(a.queues, 0, 0);
  EXPECT_EQ(q0.count, 4);  // two launches, two GPU starts
  EXPECT_EQ(q0.max, 1);

  const auto all = analyze_launch_queue(trace);  // span
  EXPECT_EQ(all.launches[0].launches, 4);
  EXPECT_EQ(idle_of(all.idle, 0, 0).events, 4);
  EXPECT_EQ(queue_of(all.queues, 0, 0).count, 8);

  LaunchQueueOptions steps;
  steps.window = RankWindow::kSteps;  // calls from 0 to 3000: the fourth too (2900)
  EXPECT_EQ(analyze_launch_queue(trace, steps).launches[0].launches, 4);

  // analyze() follows the report's --window.
  BreakdownOptions b;
  b.rank_window = RankWindow::kStepsButLast;
  EXPECT_EQ(analyze(trace, {}, b).launch_queue.launches[0].launches, 2);
}

// The launch statistics' distributions: by hand, {5, 1, 3, 3, 9} sorted is
// 1 3 3 5 9: mean 21 / 5 = 4.2; p50 at 0.5 x 4 = rank 2: 3; p95 at
// 0.95 x 4 = 3.8: 5 + 0.8 (9 - 5) = 8.2; max 9.
TEST(LaunchDistribution, MeanPercentilesAndMaxByHand) {
  const auto d = distribution_of({5, 1, 3, 3, 9});
  EXPECT_DOUBLE_EQ(d.mean, 4.2);
  EXPECT_DOUBLE_EQ(d.p50, 3.0);
  EXPECT_DOUBLE_EQ(d.p95, 8.2);
  EXPECT_EQ(d.max, 9);
  const auto none = distribution_of({});
  EXPECT_EQ(none.mean, 0.0);
  EXPECT_EQ(none.max, 0);
}

// Against the sorted values (how the figures were computed before: sorted,
// summed in order, percentiles read off): sizes 1 to 300, many ties,
// negative values, and sums past 2^53 where a double's sum depends on the
// order (2^62, -2^62, 1, 3: summed sorted, 1 and 3 vanish beside 2^62 and
// the mean is 0, not 1): bit for bit.
TEST(LaunchDistribution, AgreesWithTheSortedValuesBitForBit) {
  auto sorted_reference = [](std::vector<std::int64_t> v) {
    std::sort(v.begin(), v.end());
    Distribution d;
    double sum = 0;
    for (auto x : v) sum += static_cast<double>(x);
    d.mean = sum / static_cast<double>(v.size());
    auto pct = [&](double q) {
      const double pos = q * static_cast<double>(v.size() - 1);
      const auto lo = static_cast<std::size_t>(std::floor(pos));
      const auto hi = std::min(lo + 1, v.size() - 1);
      return static_cast<double>(v[lo]) + (pos - static_cast<double>(lo)) *
                                              (static_cast<double>(v[hi]) - static_cast<double>(v[lo]));
    };
    d.p50 = pct(0.5);
    d.p95 = pct(0.95);
    d.max = v.back();
    return d;
  };
  std::uint64_t seed = 99;
  auto draw = [&](std::int64_t n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::int64_t>((seed >> 33) % static_cast<std::uint64_t>(n));
  };
  std::vector<std::vector<std::int64_t>> inputs = {{std::int64_t{1} << 62, -(std::int64_t{1} << 62), 1, 3}};
  for (std::int64_t n = 1; n <= 300; n += n < 30 ? 1 : 37) {
    std::vector<std::int64_t> v;
    for (std::int64_t i = 0; i < n; ++i) v.push_back(draw(7) - 2);  // ties
    inputs.push_back(v);
    for (auto& x : v) x = draw(1000000007) * (draw(3) == 0 ? -1 : 1);
    inputs.push_back(v);
  }
  for (const auto& v : inputs) {
    const auto got = distribution_of(v), want = sorted_reference(v);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got.mean), std::bit_cast<std::uint64_t>(want.mean)) << v.size();
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got.p50), std::bit_cast<std::uint64_t>(want.p50)) << v.size();
    EXPECT_EQ(std::bit_cast<std::uint64_t>(got.p95), std::bit_cast<std::uint64_t>(want.p95)) << v.size();
    EXPECT_EQ(got.max, want.max) << v.size();
  }
  EXPECT_EQ(distribution_of(inputs.front()).mean, 0.0);
}

}  // namespace
}  // namespace moetrace::analyzer
