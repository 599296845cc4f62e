// GPU idle time, launch queues and kernel launches as Holistic Trace Analysis
// (HTA, facebookresearch/HolisticTraceAnalysis) defines them on PyTorch
// profiler (Kineto) traces, so that its users can compare the two tools'
// numbers. Each definition below names the HTA function and file it follows
// (HTA's TraceAnalysis API in hta/trace_analysis.py, and its documentation
// pages "Idle Time Breakdown", "Augmented Counters" / queue length, and "CUDA
// Kernel Launch Statistics"); where moetrace departs from HTA it says so.
//
// GPU events are the trace's activities: kernels, memcpy and memset (HTA's
// rows with a stream, `stream != -1`). A launching call is the runtime API
// call with the activity's correlation id on its rank (Trace::launching_call).
// Runtime call names are compared without CUPTI's version suffix
// ("cudaLaunchKernel_v7000" is cudaLaunchKernel), since Nsight Systems and
// CUPTI record them so and Kineto does not.
//
// 1. Idle-time breakdown per stream (HTA get_idle_time_breakdown,
//    hta/analyzers/breakdown_analysis.py, _analyze_idle_time_for_stream).
//    On each rank and stream, the GPU events sorted by start; each event k
//    after the first defines one idle interval
//        gap_k = start_k - end_{k-1}        (the previous event by start)
//    classified as
//        host_wait   the launching call of event k started after event k-1
//                    ended (call.start > end_{k-1}, strict): the CPU had not
//                    launched it yet;
//        kernel_wait otherwise, if gap_k < consecutive_kernel_delay (strict;
//                    30 us, the threshold HTA applies: its default is
//                    documented as 30 ns, but HTA compares it with the
//                    trace's own time unit, which for PyTorch-profiler
//                    traces is the microsecond; with 30 us moetrace's rows
//                    equal HTA's on its sampled test ranks, checked against
//                    HTA's code run on them): the overhead of launching
//                    back-to-back kernels;
//        other       otherwise (no launching call, or a longer gap behind a
//                    call made in time: waiting on an event of another stream,
//                    for example).
//    idle_ns(category) = sum of its gaps; ratio = idle_ns(category) / the
//    stream's idle time (every stream has all three categories, 0 where
//    none; HTA lists the categories present, with NaN ratios for a stream
//    never idle). Window: HTA's per-stream one, from the stream's first
//    event to its last: time before the first and after the last event is not
//    idle time. Which events: LaunchQueueOptions::window (below). Departure: a
//    negative gap (overlapping records on one stream, clock noise) counts as
//    zero; HTA would subtract it.
//
// 2. Queue length per stream (HTA get_queue_length_time_series and
//    get_queue_length_summary, hta/analyzers/trace_counters.py). The number
//    of operations a stream has outstanding: +1 when a launching call whose
//    name is one of HTA's runtime launch events (cudaLaunchKernel,
//    cudaLaunchKernelExC, cuLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync,
//    cudaMemsetAsync, and MTIA's "runFunction - job_prep_and_submit_for_execution";
//    TraceSymbolTable.get_runtime_launch_events_mask) starts,
//    -1 when the GPU event it launched starts ("Decremented when a CUDA
//    kernel/memcopy operation executes on a stream"), on the stream of that
//    GPU event; only calls with a GPU event count. The series is a step
//    function with one point per change, as HTA's; at equal times the
//    increments come first (HTA's sort leaves ties unspecified). The summary
//    is HTA's: pandas `describe()` over the series' points (not weighted by
//    time): count, mean, standard deviation (n - 1 denominator; 0 for a single
//    point, where pandas gives NaN), min, 25th, 50th and 75th percentiles
//    (linear interpolation) and max. Time with the queue full is HTA's
//    get_time_spent_blocked_on_full_queue: the time the series spends at a
//    length >= max_queue_length (HTA's CUDA_MAX_LAUNCH_QUEUE_PER_STREAM =
//    1024, hta/common/constants.py), also relative to the rank's trace
//    duration (here: the span of its activities and API calls). moetrace adds
//    the time the series spends at its own maximum.
//
// 3. Kernel-launch statistics (HTA get_cuda_kernel_launch_stats,
//    hta/analyzers/cuda_kernel_analysis.py). Every GPU event launched by a
//    call named cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync or
//    cudaMemsetAsync (HTA's include_memory_events=True default):
//        cpu_duration = call.end - call.start
//        gpu_duration = event.end - event.start
//        launch_delay = max(0, event.start - call.end)
//    HTA's documentation: "the difference between GPU kernel starting and CPU
//    operator ending"; its code clips negative delays to 0. (Older HTA code
//    computed event.start - call.start + cpu_duration, against its own
//    documentation.) moetrace also keeps start_delay = event.start -
//    call.start. Outliers, with HTA's default cutoffs:
//        short GPU kernel       gpu_duration < cpu_duration and cpu_duration
//                               <= runtime_cutoff (HTA's plot of them filters
//                               both)
//        runtime outlier        cpu_duration > runtime_cutoff (50 us)
//        launch-delay outlier   launch_delay > launch_delay_cutoff (100 us)
//    GPU events launched by other calls (cuLaunchKernel, cudaGraphLaunch,
//    NCCL's launches) are counted beside, not in, the statistics.
//
// ROCm (HIP) traces: HIP's launch calls count as CUDA's do in 2 and 3
// (hipLaunchKernel, hipExtLaunchKernel, hipModuleLaunchKernel,
// hipExtModuleLaunchKernel, hipMemcpyAsync, hipMemsetAsync, ...; the list is
// in launch_queue.cc). Departures: the module launches count in 3, since
// Triton, Composable Kernel and hipBLASLt launch every kernel so; a graph
// launch (hipGraphLaunch) queues its kernels in 2.
//
// Window (all three). HTA drops the last ProfilerStep when it loads a trace
// (include_last_profiler_step=False, its default): on a rank with two or
// more ProfilerStep ranges it keeps the CPU calls that start before the last
// step's start and the GPU events they launched (ProfilerSteps, breakdown.h).
// LaunchQueueOptions::window does the same for `steps-but-last` (`report
// --window`), keeps the steps' work for `steps`, and the whole trace for
// `span` (HTA with include_last_profiler_step=True, less its calls before the
// first step).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

// HTA's defaults (hta/trace_analysis.py, hta/common/constants.py).
struct LaunchQueueOptions {
  std::int64_t consecutive_kernel_delay_ns = 30'000;  // get_idle_time_breakdown: 30 (trace units: us)
  std::int64_t runtime_cutoff_ns = 50'000;        // get_cuda_kernel_launch_stats: 50 us
  std::int64_t launch_delay_cutoff_ns = 100'000;  // get_cuda_kernel_launch_stats: 100 us
  std::int32_t max_queue_length = 1024;           // CUDA_MAX_LAUNCH_QUEUE_PER_STREAM
  // Points kept per stream of the queue-length series in LaunchQueueAnalysis
  // (max-preserving; the summary uses every point); 0: all.
  std::size_t series_points = 4096;
  // Launches kept per rank, the longest launch delays first.
  std::size_t worst_launches = 10;
  // The work analysed on ranks with profiler steps (see above); HTA's default
  // is kStepsButLast.
  RankWindow window = RankWindow::kSpan;
};

enum class IdleCategory : std::uint8_t { kHostWait, kKernelWait, kOther };
inline constexpr int kNumIdleCategories = 3;
// A runtime call's name without CUPTI's version suffix: "cudaLaunchKernel_v7000"
// -> "cudaLaunchKernel" (critical_path.h compares names so too).
std::string_view runtime_call_base_name(std::string_view name);

// Whether a call (by name, version suffix allowed) is one of HTA's runtime
// launch events, which count in the queue length (2. below).
bool hta_queues_work(std::string_view name);

// "host_wait", "kernel_wait", "other": HTA's idle_category values.
std::string_view idle_category_name(IdleCategory c);

struct StreamIdle {
  std::int32_t rank = 0;
  std::int32_t stream = -1;          // StreamId
  std::int64_t native_stream = -1;   // the CUDA stream as recorded (HTA's `stream`); -1: unknown
  std::int64_t events = 0;           // kernels, memcpy and memset
  std::int64_t window_ns = 0;        // first event's start to last event's end
  std::array<std::int64_t, kNumIdleCategories> idle_ns{};
  std::array<std::int64_t, kNumIdleCategories> gaps{};  // intervals in each category
  std::int64_t at(IdleCategory c) const { return idle_ns[static_cast<std::size_t>(c)]; }
  std::int64_t idle_total_ns() const { return idle_ns[0] + idle_ns[1] + idle_ns[2]; }
  // HTA's idle_time_ratio; 0 where the stream was never idle.
  double ratio(IdleCategory c) const {
    const auto t = idle_total_ns();
    return t > 0 ? static_cast<double>(at(c)) / static_cast<double>(t) : 0.0;
  }
};

struct QueuePoint {
  std::int64_t ts_ns = 0;
  std::int32_t length = 0;  // from ts_ns until the next point
  friend bool operator==(const QueuePoint&, const QueuePoint&) = default;
};

struct StreamQueue {
  std::int32_t rank = 0;
  std::int32_t stream = -1;
  std::int64_t native_stream = -1;
  std::vector<QueuePoint> series;  // every change, or downsampled (see `downsampled`)
  bool downsampled = false;
  // HTA's summary (pandas describe) over every point of the full series.
  std::int64_t count = 0;
  double mean = 0, stddev = 0, p25 = 0, p50 = 0, p75 = 0;
  std::int32_t min = 0, max = 0;
  std::int64_t at_max_ns = 0;    // time at `max` (moetrace's)
  std::int64_t full_ns = 0;      // time at >= max_queue_length (HTA's duration_at_max_queue_length)
  double full_fraction = 0;      // full_ns / the rank's trace duration
};

// One GPU event launched by one of HTA's kernel-launch calls.
struct KernelLaunch {
  std::int32_t rank = 0;
  std::uint32_t activity = 0;  // index into Trace::activities
  std::int64_t correlation_id = 0;
  std::int64_t cpu_duration_ns = 0;
  std::int64_t gpu_duration_ns = 0;
  std::int64_t launch_delay_ns = 0;  // max(0, GPU start - call end): HTA's
  std::int64_t start_delay_ns = 0;   // GPU start - call start
  bool short_kernel = false;
  bool runtime_outlier = false;
  bool launch_delay_outlier = false;
};

// One of a rank's worst launches, named (its activity index is its
// trace's).
struct WorstLaunch : KernelLaunch {
  std::string name;  // the kernel's; "memcpy", "memset"
  std::int64_t gpu_start_ns = 0;
};

struct Distribution {
  double mean = 0, p50 = 0, p95 = 0;
  std::int64_t max = 0;
};
// The mean, numpy's default (linear) 50th and 95th percentiles, and the
// largest of `values` (none: all 0).
Distribution distribution_of(std::vector<std::int64_t> values);

struct RankLaunchStats {
  std::int32_t rank = 0;
  std::int64_t launches = 0;               // GPU events in the statistics
  std::int64_t short_kernels = 0;
  std::int64_t runtime_outliers = 0;
  std::int64_t launch_delay_outliers = 0;
  std::int64_t other_launch_calls = 0;     // GPU events launched by calls outside HTA's set
  std::int64_t no_launch_call = 0;         // GPU events without a launching call in the trace
  Distribution cpu_duration_ns, gpu_duration_ns, launch_delay_ns;
  std::vector<WorstLaunch> worst;          // longest launch delays first
};

struct LaunchQueueAnalysis {
  LaunchQueueOptions options;
  std::vector<StreamIdle> idle;             // sorted by (rank, stream)
  std::vector<StreamQueue> queues;          // sorted by (rank, stream); streams with launches
  std::vector<RankLaunchStats> launches;    // sorted by rank; ranks with GPU events
  bool hip = false;                         // the trace's launches are HIP calls (ROCm), reports say so
  bool empty() const { return idle.empty() && queues.empty() && launches.empty(); }
};

// The three analyses, each on its own, with every row (no downsampling).
std::vector<StreamIdle> idle_time_breakdown(const Trace& trace, const LaunchQueueOptions& options = {});
std::vector<StreamQueue> queue_lengths(const Trace& trace, const LaunchQueueOptions& options = {});
// Each stream's series of queue_lengths() (every change point) without the
// summary: each(the stream's index in Trace::streams, its series). The
// series' memory is reused for the next stream: copy what is kept. For a
// front end that keeps every point (the GUI's queue rows) without holding
// every stream's twice. On `threads` threads (0: the machine's cores), each
// taking a run of the streams in order of (rank, stream), so `each` is
// called from several threads at once, for different streams; on one, in
// that order on the calling thread.
void for_each_queue_series(const Trace& trace, const LaunchQueueOptions& options,
                           const std::function<void(std::size_t stream, std::span<const QueuePoint> series)>& each,
                           int threads = 1);
// Sorted by (rank, GPU start).
std::vector<KernelLaunch> kernel_launches(const Trace& trace, const LaunchQueueOptions& options = {});

// The launches summarised per rank (LaunchQueueAnalysis::launches), the
// worst ones bounded by options.worst_launches; sorted by rank.
std::vector<RankLaunchStats> launch_statistics(const Trace& trace, const LaunchQueueOptions& options = {});

// All three, with the series bounded by options.series_points and the
// launches summarised per rank.
LaunchQueueAnalysis analyze_launch_queue(const Trace& trace, const LaunchQueueOptions& options = {});
// The analyses of traces of disjoint ranks (files of one run, each analysed
// alone, their stream ids those of the union) as analyze_launch_queue() of
// their union. Consumes `parts`.
LaunchQueueAnalysis merge_launch_queues(std::vector<LaunchQueueAnalysis> parts);

}  // namespace moetrace::analyzer
