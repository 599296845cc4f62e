// The fields of the analyses' rows under the names that every output gives
// them: the JSON report (report.h) and the Python module's tables
// (python/moetrace_bindings.cc). Each function calls put(name, value) for
// its fields in the order of the Python table's columns; the JSON report
// sets one key each (its objects keep their keys sorted).
#pragma once

#include <cstddef>
#include <cstdint>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/critical_path.h"
#include "moetrace/analyzer/launch_queue.h"

namespace moetrace::analyzer {

// A time split's totals (breakdown.h); the time per category apart.
template <class Put>
void put_split_totals(const TimeSplit& t, Put&& put) {
  put("window_ns", t.window_ns);
  put("busy_ns", t.busy_ns);
  put("idle_ns", t.idle_ns);
  put("outside_ns", t.outside_ns());
  put("comm_ns", t.comm_ns);
  put("comm_hidden_ns", t.comm_hidden_ns);
  put("comm_exposed_ns", t.comm_exposed_ns);
  put("overlap_ns", t.overlap_ns);
  put("hidden_fraction", t.hidden_fraction());
  put("all_to_all_share", t.all_to_all_share());
  put("all_reduce_share", t.all_reduce_share());
}

// The key of a per-stream row: `stream` is the CUDA stream as the trace
// recorded it (HTA's column), `stream_id` moetrace's own id.
template <class Put>
void put_stream_key(std::int32_t rank, std::int32_t stream, std::int64_t native_stream, Put&& put) {
  put("rank", rank);
  put("stream", native_stream);
  put("stream_id", stream);
}

// A stream's idle time in one category (launch_queue.h).
template <class Put>
void put_idle_category(const StreamIdle& s, IdleCategory c, Put&& put) {
  put("category", idle_category_name(c));
  put("idle_ns", s.at(c));
  put("ratio", s.ratio(c));
  put("intervals", s.gaps[static_cast<std::size_t>(c)]);
}

// A stream's launch queue length, summarised (HTA's get_queue_length_summary).
template <class Put>
void put_queue_summary(const StreamQueue& q, Put&& put) {
  put("count", q.count);
  put("mean", q.mean);
  put("std", q.stddev);
  put("min", q.min);
  put("p25", q.p25);
  put("p50", q.p50);
  put("p75", q.p75);
  put("max", q.max);
  put("at_max_ns", q.at_max_ns);
  put("full_ns", q.full_ns);
  put("full_fraction", q.full_fraction);
}

// A rank's launch counts (HTA's get_cuda_kernel_launch_stats).
template <class Put>
void put_launch_counts(const RankLaunchStats& r, Put&& put) {
  put("rank", r.rank);
  put("launches", r.launches);
  put("short_kernels", r.short_kernels);
  put("runtime_outliers", r.runtime_outliers);
  put("launch_delay_outliers", r.launch_delay_outliers);
  put("other_launch_calls", r.other_launch_calls);
  put("no_launch_call", r.no_launch_call);
}

// A launch's durations and delays.
template <class Put>
void put_launch_times(const KernelLaunch& k, Put&& put) {
  put("cpu_duration_ns", k.cpu_duration_ns);
  put("gpu_duration_ns", k.gpu_duration_ns);
  put("launch_delay_ns", k.launch_delay_ns);
  put("start_delay_ns", k.start_delay_ns);
}

// An event on a critical path (critical_path.h).
template <class Put>
void put_path_event(const PathEvent& e, Put&& put) {
  put("name", e.name);
  put("kind", path_event_kind_name(e.kind));
  put("category", path_category_name(e.category));
  put("path_ns", e.path_ns);
  put("start_ns", e.start_ns);
  put("end_ns", e.end_ns);
  put("stream", e.native_stream);
  put("stream_id", e.stream);
  put("thread", e.thread);
  put("correlation_id", e.correlation_id);
}

}  // namespace moetrace::analyzer
