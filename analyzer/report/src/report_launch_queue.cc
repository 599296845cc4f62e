// The report's section on GPU idle time, launch queues and kernel launches
// (launch_queue.h: Holistic Trace Analysis's definitions). The text,
// Markdown and HTML reports show the summaries; the JSON report adds HTA's
// idle-time rows, each stream's queue-length series (at most
// ReportOptions::timeline_points points per stream, max-preserving) and the
// longest launch delays per rank.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "report_sections.h"

namespace moetrace::analyzer {

namespace {

constexpr IdleCategory kIdleCategories[] = {IdleCategory::kHostWait, IdleCategory::kKernelWait,
                                            IdleCategory::kOther};

std::string stream_label(std::int32_t id, std::int64_t native) {
  return native >= 0 ? std::to_string(native) : fmt::format("#{}", id);
}

}  // namespace

namespace report_detail {
namespace {

std::string share_cell(std::int64_t ns, std::int64_t of) {
  return fmt::format("{} ({:.1f}%)", format_duration(ns), of > 0 ? 100.0 * static_cast<double>(ns) / static_cast<double>(of) : 0.0);
}

// The ranks whose rows the tables list: all, or ranks_to_list's pick by `key`.
template <class Key, class Show>
std::pair<std::set<std::int32_t>, std::string> listed_ranks(const std::map<std::int32_t, std::int64_t>& totals,
                                                            bool all, std::string_view by, Key key, Show show) {
  struct Row {
    std::int32_t rank;
    std::int64_t value;
  };
  std::vector<Row> rows;
  for (const auto& [rank, v] : totals) rows.push_back({rank, v});
  const auto [picked, note] = ranks_to_list(rows, all, by, key, show);
  std::set<std::int32_t> ranks;
  for (auto i : picked) ranks.insert(rows[i].rank);
  return {ranks, note};
}

void idle_part(Section& s, const LaunchQueueAnalysis& L, const ReportOptions& o) {
  std::map<std::int32_t, std::int64_t> host_wait;
  for (const auto& r : L.idle) host_wait[r.rank] += r.at(IdleCategory::kHostWait);
  const auto [ranks, note] = listed_ranks(
      host_wait, o.per_rank, "host-wait time", [](const auto& r) { return r.value; },
      [](const auto& r) { return format_duration(r.value); });
  Table t{{"rank", "stream", "events", "window", "idle", "host wait", "kernel wait", "other"}, {}};
  for (const auto& r : L.idle) {
    if (!ranks.contains(r.rank)) continue;
    const auto idle = r.idle_total_ns();
    t.rows.push_back({std::to_string(r.rank), stream_label(r.stream, r.native_stream), std::to_string(r.events),
                      format_duration(r.window_ns), share_cell(idle, r.window_ns),
                      share_cell(r.at(IdleCategory::kHostWait), idle), share_cell(r.at(IdleCategory::kKernelWait), idle),
                      share_cell(r.at(IdleCategory::kOther), idle)});
  }
  s.table(fmt::format("Idle time per stream (HTA's idle time breakdown): the gaps between consecutive GPU events "
                      "from the stream's first event to its last (idle: share of that window; categories: share of "
                      "the idle time). Host wait: the next event's launch call started after the previous event "
                      "ended; kernel wait: a gap under {} ns behind a launch made in time; other: the rest.",
                      L.options.consecutive_kernel_delay_ns),
          std::move(t));
  if (!note.empty()) s.para(note);
}

void queue_part(Section& s, const LaunchQueueAnalysis& L, const ReportOptions& o) {
  if (L.queues.empty()) {
    s.para("Queue length: no GPU event was launched by cudaLaunchKernel(ExC), cuLaunchKernel(Ex), cudaMemcpyAsync or "
           "cudaMemsetAsync in the trace" +
           std::string(L.hip ? ", nor by a HIP launch (hipLaunchKernel, hip(Ext)ModuleLaunchKernel, hipGraphLaunch, "
                               "hipMemcpyAsync, hipMemsetAsync)."
                             : "."));
    return;
  }
  std::map<std::int32_t, std::int64_t> peak;
  for (const auto& q : L.queues) peak[q.rank] = std::max<std::int64_t>(peak[q.rank], q.max);
  const auto [ranks, note] = listed_ranks(
      peak, o.per_rank, "longest queue", [](const auto& r) { return r.value; },
      [](const auto& r) { return std::to_string(r.value); });
  Table t{{"rank", "stream", "points", "mean", "std", "min", "25%", "50%", "75%", "max", "time at max",
           fmt::format("full (>= {})", L.options.max_queue_length)},
          {}};
  for (const auto& q : L.queues) {
    if (!ranks.contains(q.rank)) continue;
    t.rows.push_back({std::to_string(q.rank), stream_label(q.stream, q.native_stream), std::to_string(q.count),
                      fmt::format("{:.2f}", q.mean), fmt::format("{:.2f}", q.stddev), std::to_string(q.min),
                      fmt_double(q.p25), fmt_double(q.p50), fmt_double(q.p75), std::to_string(q.max),
                      format_duration(q.at_max_ns),
                      q.full_ns > 0 ? fmt::format("{} ({:.1f}%)", format_duration(q.full_ns), 100.0 * q.full_fraction)
                                    : "-"});
  }
  s.table("Queue length per stream (HTA's queue length summary): operations launched and not yet started on the "
          "GPU, +1 at each launch call's start, -1 at its event's GPU start; statistics over the series' points, "
          "as HTA's, not weighted by time. Full: time at HTA's launch-queue limit, and its share of the rank's "
          "trace. The series itself is in the JSON report.",
          std::move(t));
  if (!note.empty()) s.para(note);
}

void launch_part(Section& s, const LaunchQueueAnalysis& L, const ReportOptions& o) {
  std::map<std::int32_t, std::int64_t> outliers;
  std::int64_t other = 0, none = 0, launches = 0;
  for (const auto& r : L.launches) {
    outliers[r.rank] = r.launch_delay_outliers;
    other += r.other_launch_calls;
    none += r.no_launch_call;
    launches += r.launches;
  }
  const auto [ranks, note] = listed_ranks(
      outliers, o.per_rank, "launch-delay outliers", [](const auto& r) { return r.value; },
      [](const auto& r) { return std::to_string(r.value); });
  Table t{{"rank", "launches", "short GPU", fmt::format("call > {}", format_duration(L.options.runtime_cutoff_ns)),
           fmt::format("delay > {}", format_duration(L.options.launch_delay_cutoff_ns)), "median call",
           "median delay", "95% delay", "max delay"},
          {}};
  for (const auto& r : L.launches) {
    if (!ranks.contains(r.rank)) continue;
    auto d = [](double ns) { return format_duration(static_cast<std::int64_t>(ns)); };
    t.rows.push_back({std::to_string(r.rank), std::to_string(r.launches), std::to_string(r.short_kernels),
                      std::to_string(r.runtime_outliers), std::to_string(r.launch_delay_outliers),
                      d(r.cpu_duration_ns.p50), d(r.launch_delay_ns.p50), d(r.launch_delay_ns.p95),
                      format_duration(r.launch_delay_ns.max)});
  }
  s.table(std::string("Kernel launches per rank (HTA's CUDA kernel launch statistics): events launched by "
                      "cudaLaunchKernel(ExC), cudaMemcpyAsync or cudaMemsetAsync") +
              (L.hip ? ", and on ROCm by hipLaunchKernel, hipModuleLaunchKernel, hipExtModuleLaunchKernel, "
                       "hipMemcpyAsync or hipMemsetAsync"
                     : "") +
              ". Launch delay: GPU start minus the call's end (0 where the GPU started first); short GPU: ran "
              "shorter than its launch call took (calls within the cutoff); outliers: calls and delays above "
              "HTA's cutoffs.",
          std::move(t));
  if (!note.empty()) s.para(note);
  if (other > 0 || none > 0)
    s.para(fmt::format("Not in these statistics: {} GPU event{} launched by other calls (cuLaunchKernel, graph "
                       "launches, ...), {} without a launching call in the trace.",
                       other, other == 1 ? "" : "s", none));
  if (launches == 0) s.para("No GPU event was launched by one of HTA's launch calls.");
}

}  // namespace

Section launch_queue_section(const Analyses& a, const ReportOptions& o) {
  const auto& L = a.launch_queue;
  Section s{"launch_queue", "GPU idle time, launch queues and kernel launches", {}};
  if (L.empty()) {
    s.para("No kernels, copies or memsets in the trace: no idle time, launch queue or launch to measure.");
    return s;
  }
  s.para("As Holistic Trace Analysis (HTA) defines them on PyTorch profiler traces, with its default thresholds "
         "(launch_queue.h gives each definition and its source).");
  if (L.options.window != RankWindow::kSpan)
    s.para(fmt::format("Window ({}): on ranks with two or more profiler steps, the CPU calls {} and the GPU work "
                       "they launched{}.",
                       rank_window_name(L.options.window),
                       L.options.window != RankWindow::kSteps ? "that started before the last step's start"
                                                               : "that started within the steps",
                       L.options.window != RankWindow::kSteps
                           ? ", as HTA analyses a trace by default (include_last_profiler_step=False)"
                           : ""));
  idle_part(s, L, o);
  queue_part(s, L, o);
  launch_part(s, L, o);
  return s;
}

}  // namespace report_detail

nlohmann::json launch_queue_json(const LaunchQueueAnalysis& L, const ReportOptions& options) {
  const auto& opt = L.options;
  nlohmann::json rows = nlohmann::json::array(), streams = nlohmann::json::array();
  for (const auto& r : L.idle) {
    nlohmann::json stream = {{"events", r.events}, {"window_ns", r.window_ns}, {"idle_ns", r.idle_total_ns()}};
    put_stream_key(r.rank, r.stream, r.native_stream, report_detail::json_put(stream));
    streams.push_back(std::move(stream));
    for (auto c : kIdleCategories) {
      nlohmann::json row;
      put_stream_key(r.rank, r.stream, r.native_stream, report_detail::json_put(row));
      put_idle_category(r, c, report_detail::json_put(row));
      rows.push_back(std::move(row));
    }
  }
  nlohmann::json queues = nlohmann::json::array();
  for (const auto& q : L.queues) {
    std::vector<MemoryPoint> steps;
    steps.reserve(q.series.size());
    for (const auto& p : q.series) steps.push_back({p.ts_ns, p.length});
    const auto kept = downsample_max(steps, options.timeline_points);
    nlohmann::json points = nlohmann::json::array();
    for (const auto& p : kept) points.push_back({p.ts_ns, p.bytes});
    nlohmann::json queue = {
        {"series", {{"downsampled", q.downsampled || kept.size() < steps.size()}, {"points", points}}}};
    put_stream_key(q.rank, q.stream, q.native_stream, report_detail::json_put(queue));
    put_queue_summary(q, report_detail::json_put(queue));
    queues.push_back(std::move(queue));
  }
  auto dist = [](const Distribution& d) {
    return nlohmann::json{{"mean", d.mean}, {"p50", d.p50}, {"p95", d.p95}, {"max", d.max}};
  };
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : L.launches) {
    nlohmann::json worst = nlohmann::json::array();
    for (const auto& k : r.worst) {
      nlohmann::json launch = {{"correlation_id", k.correlation_id}, {"name", k.name}, {"gpu_start_ns", k.gpu_start_ns}};
      put_launch_times(k, report_detail::json_put(launch));
      worst.push_back(std::move(launch));
    }
    nlohmann::json rank = {{"cpu_duration_ns", dist(r.cpu_duration_ns)},
                           {"gpu_duration_ns", dist(r.gpu_duration_ns)},
                           {"launch_delay_ns", dist(r.launch_delay_ns)},
                           {"worst", worst}};
    put_launch_counts(r, report_detail::json_put(rank));
    ranks.push_back(std::move(rank));
  }
  return {{"window", rank_window_name(opt.window)},
          {"thresholds",
           {{"consecutive_kernel_delay_ns", opt.consecutive_kernel_delay_ns},
            {"runtime_cutoff_ns", opt.runtime_cutoff_ns},
            {"launch_delay_cutoff_ns", opt.launch_delay_cutoff_ns},
            {"max_queue_length", opt.max_queue_length}}},
          {"idle_time", {{"streams", streams}, {"rows", rows}}},
          {"queue_length", {{"streams", queues}}},
          {"kernel_launches", {{"ranks", ranks}}}};
}

}  // namespace moetrace::analyzer
