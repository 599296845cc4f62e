#include "moetrace/analyzer/launch_queue.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>

#include "moetrace/analyzer/downsample.h"
#include "moetrace/analyzer/name_memo.h"
#include "parallel.h"
#include "stream_queue_walk.h"

namespace moetrace::analyzer {
namespace {

bool is_one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  const auto b = runtime_call_base_name(name);
  return std::find(names.begin(), names.end(), b) != names.end();
}

// HIP's launch calls (ROCm traces of the PyTorch profiler, recorded through
// roctracer; the calls libkineto's RoctracerActivityApi correlates with their
// kernels): runtime launches (hipLaunchKernel, hipExtLaunchKernel, the
// cooperative ones), module launches (hipModuleLaunchKernel,
// hipExtModuleLaunchKernel, hipHccModuleLaunchKernel: how Triton, Composable
// Kernel and hipBLASLt launch every kernel) and the asynchronous copies and
// sets.
bool hip_launch(std::string_view name) {
  return is_one_of(name, {"hipLaunchKernel", "hipExtLaunchKernel", "hipLaunchCooperativeKernel",
                          "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel",
                          "hipModuleLaunchCooperativeKernel", "hipMemcpyAsync", "hipMemsetAsync",
                          "hipMemsetD8Async", "hipMemsetD32Async", "hipMemcpyWithStream"});
}

// HTA's runtime launch events for the queue length (CUDA ones of
// TraceSymbolTable.get_runtime_launch_events_mask), and HIP's launches.
// Departure: a HIP graph launch (hipGraphLaunch) queues every kernel of the
// graph at once, so its kernels count in the queue too.
bool queues_work(std::string_view name) {
  return is_one_of(name, {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                          "cudaMemcpyAsync", "cudaMemsetAsync", "hipGraphLaunch",
                          "runFunction - job_prep_and_submit_for_execution"}) ||  // MTIA's launch
         hip_launch(name);
}

// HTA's launch calls for the launch statistics (cuda_kernel_launch_stats,
// include_memory_events=True), and HIP's launches. Departure: HIP's module
// launches count (CUDA's cuLaunchKernel does not in HTA): on ROCm they
// launch most kernels.
bool counts_as_launch(std::string_view name) {
  return is_one_of(name, {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"}) ||
         hip_launch(name);
}

bool has_tracks(const Trace& t) { return t.activity_track_begin.size() == t.streams.size() + 1; }

// numpy's default (linear) percentile between the values of ranks lo and
// hi = min(lo + 1, n - 1), frac = pos - lo, where pos = q (n - 1).
double interpolated(double frac, double at_lo, double at_hi) { return at_lo + frac * (at_hi - at_lo); }

// numpy's default (linear) percentile of sorted values.
template <class T>
double percentile(const std::vector<T>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  return interpolated(pos - static_cast<double>(lo), static_cast<double>(sorted[lo]), static_cast<double>(sorted[hi]));
}

}  // namespace

Distribution distribution_of(std::vector<std::int64_t> v) {
  Distribution d;
  if (v.empty()) return d;
  // Summed in any order, the sum is the sorted order's where every partial
  // sum is exact in a double (magnitudes summing to at most 2^53: 104 days
  // of nanoseconds); then the ranks asked for are found by selection (a
  // rank-one launch has 490 K of each duration on a 10 M-event trace: their
  // sorts were a third of the launch statistics).
  constexpr std::uint64_t kExact = std::uint64_t{1} << 53;
  std::uint64_t magnitude = 0;
  std::int64_t sum = 0;
  for (const auto x : v) {
    const auto m = x < 0 ? std::uint64_t(0) - static_cast<std::uint64_t>(x) : static_cast<std::uint64_t>(x);
    magnitude = m > kExact ? kExact + 1 : std::min(kExact + 1, magnitude + m);
    sum += magnitude <= kExact ? x : 0;
  }
  if (magnitude > kExact) {
    std::sort(v.begin(), v.end());
    double total = 0;
    for (auto x : v) total += static_cast<double>(x);
    d.mean = total / static_cast<double>(v.size());
    d.p50 = percentile(v, 0.50);
    d.p95 = percentile(v, 0.95);
    d.max = v.back();
    return d;
  }
  d.mean = static_cast<double>(sum) / static_cast<double>(v.size());
  const auto at = [&v](std::size_t k) { return v.begin() + static_cast<std::ptrdiff_t>(k); };
  // Ranks from `from` on are past the last selection; the value of rank lo,
  // then of hi (the least past lo).
  std::size_t from = 0;
  auto value_at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    if (lo >= from) {
      std::nth_element(at(from), at(lo), v.end());
      from = lo + 1;
    }
    const auto hi = std::min(lo + 1, v.size() - 1);
    const auto at_hi = hi == lo ? v[lo] : *std::min_element(at(lo + 1), v.end());
    return interpolated(pos - static_cast<double>(lo), static_cast<double>(v[lo]), static_cast<double>(at_hi));
  };
  d.p50 = value_at(0.50);
  d.p95 = value_at(0.95);
  d.max = *std::max_element(v.begin(), v.end());
  return d;
}

namespace {

// The options' window: which GPU events and calls are analysed.
class Window {
 public:
  Window(const Trace& t, RankWindow w) : t_(t), w_(w), steps_(w == RankWindow::kSpan ? ProfilerSteps() : ProfilerSteps(t)) {}
  bool keeps(const ApiCall& c) const { return steps_.keeps(c.rank.value, c.start_ns, w_); }
  // An event by its launching call; on a rank with steps, none: not kept.
  bool keeps(const Activity& a) const {
    if (keeps_all(a.rank.value)) return true;
    const ApiCall* call = t_.launching_call(a);
    return call != nullptr && keeps(*call);
  }
  // Whether every event of `rank` is kept (the span, or a rank without steps).
  bool keeps_all(std::int32_t rank) const { return w_ == RankWindow::kSpan || !steps_.has_steps(rank); }

 private:
  const Trace& t_;
  RankWindow w_;
  ProfilerSteps steps_;
};

// The span of each rank's activities and API calls: HTA's trace duration.
std::map<std::int32_t, std::int64_t> rank_durations(const Trace& t, const Window& window) {
  std::map<std::int32_t, std::pair<std::int64_t, std::int64_t>> span;
  auto widen = [&](std::int32_t rank, std::int64_t s, std::int64_t e) {
    auto [it, fresh] = span.try_emplace(rank, s, e);
    if (!fresh) {
      it->second.first = std::min(it->second.first, s);
      it->second.second = std::max(it->second.second, e);
    }
  };
  for (const auto& a : t.activities)
    if (window.keeps(a)) widen(a.rank.value, a.start_ns, a.end_ns);
  for (const auto& c : t.api_calls)
    if (window.keeps(c)) widen(c.rank.value, c.start_ns, c.end_ns);
  std::map<std::int32_t, std::int64_t> out;
  for (const auto& [rank, s] : span) out[rank] = std::max<std::int64_t>(0, s.second - s.first);
  return out;
}


}  // namespace

bool hta_queues_work(std::string_view name) { return queues_work(name); }

std::string_view runtime_call_base_name(std::string_view name) {
  const auto v = name.rfind("_v");
  if (v == std::string_view::npos || v + 2 == name.size()) return name;
  for (auto i = v + 2; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return name;
  return name.substr(0, v);
}

std::string_view idle_category_name(IdleCategory c) {
  switch (c) {
    case IdleCategory::kHostWait: return "host_wait";
    case IdleCategory::kKernelWait: return "kernel_wait";
    case IdleCategory::kOther: return "other";
  }
  return "other";
}

std::vector<StreamIdle> idle_time_breakdown(const Trace& t, const LaunchQueueOptions& o) {
  std::vector<StreamIdle> out;
  if (!has_tracks(t)) return out;
  const Window window(t, o.window);
  std::vector<Activity> kept;
  for (std::size_t s = 0; s < t.streams.size(); ++s) {
    // The stream's events as they are, or the window's part of them.
    std::span<const Activity> events = t.track_activities(s);
    if (!window.keeps_all(t.streams[s].rank.value)) {
      kept.clear();
      for (const auto& a : events)
        if (window.keeps(a)) kept.push_back(a);
      events = kept;
    }
    if (events.empty()) continue;
    StreamIdle r;
    r.rank = t.streams[s].rank.value;
    r.stream = t.streams[s].id.value;
    r.native_stream = t.streams[s].native_id;
    r.events = static_cast<std::int64_t>(events.size());
    std::int64_t last_end = events.front().end_ns;
    for (std::size_t k = 1; k < events.size(); ++k) {
      const auto prev_end = events[k - 1].end_ns;
      const auto gap = events[k].start_ns - prev_end;
      const ApiCall* call = t.launching_call(events[k]);
      const auto c = call != nullptr && call->start_ns > prev_end ? IdleCategory::kHostWait
                     : gap < o.consecutive_kernel_delay_ns        ? IdleCategory::kKernelWait
                                                                  : IdleCategory::kOther;
      const auto i = static_cast<std::size_t>(c);
      r.idle_ns[i] += std::max<std::int64_t>(0, gap);
      ++r.gaps[i];
      last_end = std::max(last_end, events[k].end_ns);
    }
    r.window_ns = last_end - events.front().start_ns;
    out.push_back(r);
  }
  std::sort(out.begin(), out.end(),
            [](const StreamIdle& a, const StreamIdle& b) { return std::pair(a.rank, a.stream) < std::pair(b.rank, b.stream); });
  return out;
}

namespace {

// The times a stream's queue grows (its launches' calls start) and shrinks
// (its GPU events start), and the series they make, kept from one stream to
// the next (page faults of fresh series were a quarter of the GUI's queue
// series on a 10 M-event trace: perf).
struct QueueScratch {
  std::vector<detail::QueuePoint> up, down;
  std::vector<QueuePoint> series;
};

// Stream s's queue-length series, every change point, into scratch.series;
// false where no launch event of HTA's launched anything on it.
template <class Queues>
bool stream_series(const Trace& t, std::size_t s, const Window& window, Queues& queues, QueueScratch& scratch) {
  auto& up = scratch.up;
  auto& down = scratch.down;
  up.clear();
  down.clear();
  scratch.series.clear();
  const auto begin = t.activity_track_begin[s], end = t.activity_track_begin[s + 1];
  for (auto i = begin; i < end; ++i) {
    const auto& a = t.activities[i];
    const ApiCall* call = t.launching_call(a);
    if (call == nullptr || !queues.of(call->name) || !window.keeps(*call)) continue;
    up.push_back({call->start_ns, static_cast<std::uint32_t>(i)});
    down.push_back({a.start_ns, static_cast<std::uint32_t>(i)});
  }
  if (up.empty()) return false;
  // Equal changes are alike, so the series is the one a stable sort of
  // every (time, +1 / -1) by time, +1 first, gives.
  scratch.series.reserve(up.size() + down.size());
  const auto point = [&](const detail::QueuePoint& p, std::int32_t length) {
    scratch.series.push_back({p.ts_ns, length});
  };
  detail::walk_stream_queue(up, down, point, point);
  return true;
}

// HTA's summary of a stream's full series (pandas describe), and the time
// at its maximum and at a full queue. The lengths are counted, not sorted:
// a series has at most one more distinct length than points (each point
// moves it by one), and the sum of squares is added in the sorted order.
void summarize(const std::vector<QueuePoint>& series, const LaunchQueueOptions& o,
               const std::map<std::int32_t, std::int64_t>& durations, std::vector<std::int64_t>& counts,
               StreamQueue& q) {
  std::int32_t lo = series.front().length, hi = lo;
  double sum = 0;
  for (const auto& p : series) {
    lo = std::min(lo, p.length);
    hi = std::max(hi, p.length);
    sum += p.length;
  }
  counts.assign(static_cast<std::size_t>(std::int64_t{hi} - lo + 1), 0);
  for (const auto& p : series) ++counts[static_cast<std::size_t>(p.length - lo)];
  q.count = static_cast<std::int64_t>(series.size());
  q.mean = sum / static_cast<double>(series.size());
  if (series.size() > 1) {
    double ss = 0;
    for (std::size_t v = 0; v < counts.size(); ++v) {
      const double d = (static_cast<double>(v) + lo) - q.mean;
      for (auto k = counts[v]; k > 0; --k) ss += d * d;
    }
    q.stddev = std::sqrt(ss / static_cast<double>(series.size() - 1));
  }
  q.min = lo;
  q.max = hi;
  // The value of rank r (0-based) in sorted order.
  const auto at_rank = [&](std::size_t r) {
    std::size_t v = 0;
    for (auto seen = static_cast<std::size_t>(counts[0]); seen <= r; seen += static_cast<std::size_t>(counts[++v])) {
    }
    return static_cast<double>(static_cast<std::int64_t>(v) + lo);
  };
  // numpy's default (linear) percentile, as percentile() of the sorted values.
  const auto quantile = [&](double f) {
    const double pos = f * static_cast<double>(series.size() - 1);
    const auto r = static_cast<std::size_t>(std::floor(pos));
    return interpolated(pos - static_cast<double>(r), at_rank(r), at_rank(std::min(r + 1, series.size() - 1)));
  };
  q.p25 = quantile(0.25);
  q.p50 = quantile(0.50);
  q.p75 = quantile(0.75);
  // Each point holds until the next; the last one has no duration (HTA's
  // ts.shift(-1) - ts).
  for (std::size_t i = 0; i + 1 < series.size(); ++i) {
    const auto dur = series[i + 1].ts_ns - series[i].ts_ns;
    if (series[i].length >= o.max_queue_length) q.full_ns += dur;
    if (series[i].length == q.max) q.at_max_ns += dur;
  }
  if (auto it = durations.find(q.rank); it != durations.end() && it->second > 0)
    q.full_fraction = static_cast<double>(q.full_ns) / static_cast<double>(it->second);
}

// The streams' indices in order of (rank, stream).
std::vector<std::size_t> streams_in_order(const Trace& t) {
  std::vector<std::size_t> order(t.streams.size());
  for (std::size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tuple(t.streams[a].rank.value, t.streams[a].id.value, a) <
           std::tuple(t.streams[b].rank.value, t.streams[b].id.value, b);
  });
  return order;
}

// Each stream's full series, each(stream index, series) in the order of
// streams_in_order: on `threads` threads, each taking a run of the streams
// of about equal numbers of GPU events with its own buffers and names'
// memo. The series is the thread's buffer, reused for its next stream:
// `each` copies what it keeps, or takes the buffer (swap).
template <class Each>
void each_queue_series(const Trace& t, const Window& window, int threads, const Each& each) {
  const auto order = streams_in_order(t);
  const auto groups = std::min<std::size_t>(static_cast<std::size_t>(detail::worker_count(threads)), order.size());
  std::vector<std::size_t> cut{0};
  const auto total = static_cast<double>(t.activities.size());
  double events = 0;
  for (std::size_t k = 0; k < order.size() && cut.size() < groups; ++k) {
    events += static_cast<double>(t.activity_track_begin[order[k] + 1] - t.activity_track_begin[order[k]]);
    if (events >= total * static_cast<double>(cut.size()) / static_cast<double>(groups)) cut.push_back(k + 1);
  }
  cut.push_back(order.size());
  detail::parallel_for(cut.size() - 1, static_cast<int>(cut.size() - 1), [&](std::size_t g) {
    NameMemo queues(t, queues_work);
    QueueScratch scratch;
    for (auto k = cut[g]; k < cut[g + 1]; ++k)
      if (stream_series(t, order[k], window, queues, scratch)) each(order[k], scratch.series);
  });
}

// Every stream's series and summary, the series reduced to `max_points` (0:
// all) after the summary has read every point.
std::vector<StreamQueue> queues_of(const Trace& t, const LaunchQueueOptions& o, std::size_t max_points) {
  std::vector<StreamQueue> out;
  if (!has_tracks(t)) return out;
  const Window window(t, o.window);
  const auto durations = rank_durations(t, window);
  std::vector<std::int64_t> counts;  // of each length, summarize()
  each_queue_series(t, window, 1, [&](std::size_t s, std::vector<QueuePoint>& series) {
    StreamQueue q;
    q.rank = t.streams[s].rank.value;
    q.stream = t.streams[s].id.value;
    q.native_stream = t.streams[s].native_id;
    summarize(series, o, durations, counts, q);
    if (max_points > 0 && series.size() > max_points) {
      q.series = downsample_max(series, static_cast<int>(std::min<std::size_t>(max_points, INT32_MAX)),
                                &QueuePoint::length);
      q.downsampled = true;
    } else {
      q.series.swap(series);
    }
    out.push_back(std::move(q));
  });
  return out;
}

// Calls every GPU event's launch to `launch(KernelLaunch)`, or to
// `unlisted(rank, has_call)` where its call is not one of HTA's launch calls
// (has_call) or it has none in the trace.
// `scanned(i)`, where given, after each activity i (kept or not).
template <class Launch, class Unlisted, class Scanned = void (*)(std::size_t)>
void scan_launches(const Trace& t, const LaunchQueueOptions& o, Launch&& launch, Unlisted&& unlisted,
                   Scanned&& scanned = [](std::size_t) {}) {
  const Window window(t, o.window);
  NameMemo launches(t, counts_as_launch);
  for (std::size_t i = 0; i < t.activities.size(); scanned(i++)) {
    const auto& a = t.activities[i];
    if (!window.keeps(a)) continue;
    const ApiCall* call = t.launching_call(a);
    if (call == nullptr || !launches.of(call->name)) {
      unlisted(a.rank.value, call != nullptr);
      continue;
    }
    KernelLaunch k;
    k.rank = a.rank.value;
    k.activity = static_cast<std::uint32_t>(i);
    k.correlation_id = a.correlation_id;
    k.cpu_duration_ns = call->end_ns - call->start_ns;
    k.gpu_duration_ns = a.end_ns - a.start_ns;
    k.launch_delay_ns = std::max<std::int64_t>(0, a.start_ns - call->end_ns);
    k.start_delay_ns = a.start_ns - call->start_ns;
    k.short_kernel = k.gpu_duration_ns < k.cpu_duration_ns && k.cpu_duration_ns <= o.runtime_cutoff_ns;
    k.runtime_outlier = k.cpu_duration_ns > o.runtime_cutoff_ns;
    k.launch_delay_outlier = k.launch_delay_ns > o.launch_delay_cutoff_ns;
    launch(k);
  }
}

// Longest launch delay first; ties by the longer start delay, then trace order.
bool worse(const KernelLaunch& x, const KernelLaunch& y) {
  return std::tuple(-x.launch_delay_ns, -x.start_delay_ns, x.activity) <
         std::tuple(-y.launch_delay_ns, -y.start_delay_ns, y.activity);
}

}  // namespace

std::vector<StreamQueue> queue_lengths(const Trace& t, const LaunchQueueOptions& o) { return queues_of(t, o, 0); }

void for_each_queue_series(const Trace& t, const LaunchQueueOptions& o,
                           const std::function<void(std::size_t, std::span<const QueuePoint>)>& each, int threads) {
  if (!has_tracks(t)) return;
  each_queue_series(t, Window(t, o.window), threads,
                    [&](std::size_t s, const std::vector<QueuePoint>& series) { each(s, series); });
}

std::vector<KernelLaunch> kernel_launches(const Trace& t, const LaunchQueueOptions& o) {
  std::vector<KernelLaunch> out;
  scan_launches(t, o, [&](const KernelLaunch& k) { out.push_back(k); }, [](std::int32_t, bool) {});
  std::sort(out.begin(), out.end(), [&](const KernelLaunch& x, const KernelLaunch& y) {
    return std::tuple(x.rank, t.activities[x.activity].start_ns, x.activity) <
           std::tuple(y.rank, t.activities[y.activity].start_ns, y.activity);
  });
  return out;
}

std::vector<RankLaunchStats> launch_statistics(const Trace& t, const LaunchQueueOptions& o) {
  // Per rank: the three durations of every launch (for the percentiles) and
  // the worst launches so far, kept sorted and bounded; summed up, and the
  // durations given back, once the rank's last activity is scanned (one
  // rank's held at a time where the stream tracks come by rank, not every
  // rank's: 24 bytes a launch, 90 MiB on a 10 M-event trace).
  struct Accumulated {
    RankLaunchStats stats;
    std::vector<std::int64_t> cpu, gpu, delay;
  };
  std::map<std::int32_t, Accumulated> ranks;
  std::map<std::int32_t, RankLaunchStats> done;
  const auto finish = [&](std::map<std::int32_t, Accumulated>::iterator it) {
    auto& r = it->second;
    r.stats.rank = it->first;
    r.stats.cpu_duration_ns = distribution_of(std::move(r.cpu));
    r.stats.gpu_duration_ns = distribution_of(std::move(r.gpu));
    r.stats.launch_delay_ns = distribution_of(std::move(r.delay));
    for (auto& w : r.stats.worst) {
      const auto& act = t.activities[w.activity];
      w.gpu_start_ns = act.start_ns;
      switch (act.type) {
        case ActivityType::kMemcpy: w.name = "memcpy"; break;
        case ActivityType::kMemset: w.name = "memset"; break;
        case ActivityType::kKernel: w.name = std::string(t.str(act.name)); break;
      }
    }
    done[it->first] = std::move(r.stats);
    ranks.erase(it);
  };
  // (one past its last activity, rank), in order.
  std::vector<std::pair<std::size_t, std::int32_t>> rank_ends;
  {
    std::map<std::int32_t, std::size_t> end_of;
    auto at = end_of.end();  // the last activity's rank's (ranks come in runs)
    for (std::size_t i = 0; i < t.activities.size(); ++i) {
      const auto rank = t.activities[i].rank.value;
      if (at == end_of.end() || at->first != rank) at = end_of.try_emplace(rank, 0).first;
      at->second = i + 1;
    }
    for (const auto& [rank, e] : end_of) rank_ends.emplace_back(e, rank);
    std::sort(rank_ends.begin(), rank_ends.end());
  }
  std::size_t next_end = 0;
  scan_launches(
      t, o,
      [&](const KernelLaunch& k) {
        auto& r = ranks[k.rank];
        ++r.stats.launches;
        r.stats.short_kernels += k.short_kernel ? 1 : 0;
        r.stats.runtime_outliers += k.runtime_outlier ? 1 : 0;
        r.stats.launch_delay_outliers += k.launch_delay_outlier ? 1 : 0;
        r.cpu.push_back(k.cpu_duration_ns);
        r.gpu.push_back(k.gpu_duration_ns);
        r.delay.push_back(k.launch_delay_ns);
        auto& w = r.stats.worst;
        if (o.worst_launches == 0 || (w.size() == o.worst_launches && !worse(k, w.back()))) return;
        w.insert(std::upper_bound(w.begin(), w.end(), k, worse), WorstLaunch{k, {}, 0});
        if (w.size() > o.worst_launches) w.pop_back();
      },
      [&](std::int32_t rank, bool has_call) {
        auto& r = ranks[rank].stats;
        ++(has_call ? r.other_launch_calls : r.no_launch_call);
      },
      [&](std::size_t i) {
        for (; next_end < rank_ends.size() && rank_ends[next_end].first == i + 1; ++next_end)
          if (const auto it = ranks.find(rank_ends[next_end].second); it != ranks.end()) finish(it);
      });
  while (!ranks.empty()) finish(ranks.begin());
  std::vector<RankLaunchStats> out;
  for (auto& [rank, stats] : done) out.push_back(std::move(stats));
  return out;
}

LaunchQueueAnalysis analyze_launch_queue(const Trace& t, const LaunchQueueOptions& o) {
  LaunchQueueAnalysis a;
  a.options = o;
  a.idle = idle_time_breakdown(t, o);
  a.queues = queues_of(t, o, o.series_points);
  NameMemo hip(t, hip_launch);
  for (const auto& call : t.api_calls)
    if (hip.of(call.name)) {
      a.hip = true;
      break;
    }
  a.launches = launch_statistics(t, o);
  return a;
}

LaunchQueueAnalysis merge_launch_queues(std::vector<LaunchQueueAnalysis> parts) {
  LaunchQueueAnalysis a;
  if (parts.empty()) return a;
  a.options = parts.front().options;
  for (auto& p : parts) {
    for (auto& x : p.idle) a.idle.push_back(std::move(x));
    for (auto& x : p.queues) a.queues.push_back(std::move(x));
    for (auto& x : p.launches) a.launches.push_back(std::move(x));
    a.hip = a.hip || p.hip;
    p = LaunchQueueAnalysis();
  }
  auto by_stream = [](const auto& x, const auto& y) { return std::tie(x.rank, x.stream) < std::tie(y.rank, y.stream); };
  std::stable_sort(a.idle.begin(), a.idle.end(), by_stream);
  std::stable_sort(a.queues.begin(), a.queues.end(), by_stream);
  std::stable_sort(a.launches.begin(), a.launches.end(),
                   [](const RankLaunchStats& x, const RankLaunchStats& y) { return x.rank < y.rank; });
  return a;
}

}  // namespace moetrace::analyzer
