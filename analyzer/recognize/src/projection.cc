#include "moetrace/analyzer/projection.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace moetrace::analyzer {
namespace {

constexpr std::int64_t kAnyThread = -1;

struct HostRange {
  std::int64_t start, end;
  std::int32_t op;
};

struct Query {
  std::int32_t rank;
  std::int64_t thread, t;
  std::size_t activity;
};

// Walks host ranges in start order while queries arrive in time order; the
// top of the stack, once ranges that ended before the query are popped, is
// the open range that started last: the innermost one when ranges nest.
class RangeSweep {
 public:
  explicit RangeSweep(const std::vector<HostRange>* ranges) : ranges_(ranges) {}
  const HostRange* at(std::int64_t t) {
    if (!ranges_) return nullptr;
    while (next_ < ranges_->size() && (*ranges_)[next_].start <= t) stack_.push_back(next_++);
    while (!stack_.empty() && (*ranges_)[stack_.back()].end < t) stack_.pop_back();
    return stack_.empty() ? nullptr : &(*ranges_)[stack_.back()];
  }

 private:
  const std::vector<HostRange>* ranges_;
  std::size_t next_ = 0;
  std::vector<std::size_t> stack_;
};

// Picks the innermost of two candidates: the later start, then the shorter.
const HostRange* inner(const HostRange* a, const HostRange* b) {
  if (!a) return b;
  if (!b) return a;
  if (a->start != b->start) return a->start > b->start ? a : b;
  return a->end <= b->end ? a : b;
}

// GPU runs: an op's time is the span of the GPU work it launched.
void retime_gpu_ops(Trace& trace, ProjectionStats& stats) {
  if (trace.run.simulated) return;
  std::vector<std::pair<std::int64_t, std::int64_t>> span(trace.ops.size(), {INT64_MAX, INT64_MIN});
  for (const auto& a : trace.activities)
    if (a.op >= 0) {
      auto& s = span[static_cast<std::size_t>(a.op)];
      s.first = std::min(s.first, a.start_ns);
      s.second = std::max(s.second, a.end_ns);
    }
  for (std::size_t o = 0; o < trace.ops.size(); ++o) {
    const auto& s = span[o];
    auto& op = trace.ops[o];
    if (s.first > s.second || (op.start_ns == s.first && op.end_ns == s.second)) continue;
    op.start_ns = s.first;
    op.end_ns = s.second;
    ++stats.ops_retimed;
  }
  if (stats.ops_retimed > 0) trace.sort_ops();
}

}  // namespace

ProjectionStats project_activities(Trace& trace) {
  ProjectionStats stats;
  stats.ran = true;
  stats.activities = static_cast<std::int64_t>(trace.activities.size());

  // Queries: every unattributed activity's launching API call.
  std::vector<Query> queries;
  for (std::size_t i = 0; i < trace.activities.size(); ++i) {
    const auto& a = trace.activities[i];
    if (a.op >= 0) {
      ++stats.attributed_in_trace;
      continue;
    }
    if (a.correlation_id == 0) {
      ++stats.no_correlation;
      continue;
    }
    const ApiCall* call = trace.launching_call(a);
    if (!call) {
      ++stats.no_api_call;
      continue;
    }
    queries.push_back({a.rank.value, call->thread_id, call->start_ns, i});
  }
  if (queries.empty()) {
    // Nothing to project (every activity attributed or uncorrelated).
    retime_gpu_ops(trace, stats);
    trace.projection = stats;
    return stats;
  }

  // Host ranges of ops, per (rank, thread); kAnyThread where the thread is unknown.
  std::unordered_map<std::int64_t, std::size_t> nvtx_by_id;
  for (std::size_t i = 0; i < trace.nvtx.size(); ++i) nvtx_by_id.emplace(trace.nvtx[i].id, i);
  auto nvtx_end = [](const NvtxRange& r) { return r.end_ns < 0 ? INT64_MAX : r.end_ns; };
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<HostRange>> ranges;
  std::vector<bool> has_range(trace.ops.size(), false);
  for (std::size_t o = 0; o < trace.ops.size(); ++o) {
    const auto& op = trace.ops[o];
    const NvtxRange* nvtx = nullptr;
    if (op.nvtx_id >= 0)
      if (auto it = nvtx_by_id.find(op.nvtx_id); it != nvtx_by_id.end()) nvtx = &trace.nvtx[it->second];
    const auto index = static_cast<std::int32_t>(o);
    if (op.launch_start_ns >= 0) {
      const auto end = std::max(op.launch_start_ns, op.launch_end_ns);
      ranges[{op.rank.value, nvtx ? nvtx->thread_id : kAnyThread}].push_back(
          {op.launch_start_ns, end, index});
      has_range[o] = true;
    } else if (nvtx) {
      ranges[{op.rank.value, nvtx->thread_id}].push_back({nvtx->start_ns, nvtx_end(*nvtx), index});
      has_range[o] = true;
    }
  }
  // NVTX ranges of the moetrace domain that name an op by payload (op id).
  for (const auto& r : trace.nvtx) {
    if (!r.has_payload_int || trace.str(r.domain) != "moetrace") continue;
    const int o = trace.op_index(OpId(r.payload_int));
    if (o < 0 || has_range[static_cast<std::size_t>(o)] ||
        trace.ops[static_cast<std::size_t>(o)].rank != r.rank)
      continue;
    ranges[{r.rank.value, r.thread_id}].push_back({r.start_ns, nvtx_end(r), o});
  }
  for (auto& [key, list] : ranges)
    std::sort(list.begin(), list.end(), [](const HostRange& a, const HostRange& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });

  std::sort(queries.begin(), queries.end(), [](const Query& a, const Query& b) {
    return std::tie(a.rank, a.thread, a.t) < std::tie(b.rank, b.thread, b.t);
  });

  for (std::size_t q = 0; q < queries.size();) {
    const auto rank = queries[q].rank;
    const auto thread = queries[q].thread;
    auto find = [&](std::int64_t th) -> const std::vector<HostRange>* {
      auto it = ranges.find({rank, th});
      return it == ranges.end() ? nullptr : &it->second;
    };
    RangeSweep same(find(thread)), any(thread == kAnyThread ? nullptr : find(kAnyThread));
    for (; q < queries.size() && queries[q].rank == rank && queries[q].thread == thread; ++q) {
      const auto t = queries[q].t;
      const HostRange* r = inner(same.at(t), any.at(t));
      if (!r) {
        ++stats.outside_ranges;
        continue;
      }
      trace.activities[queries[q].activity].op = r->op;
      ++stats.projected;
    }
  }

  retime_gpu_ops(trace, stats);
  trace.projection = stats;
  return stats;
}

}  // namespace moetrace::analyzer
