#include "moetrace/analyzer/nvtx_projection.h"

#include <algorithm>
#include <tuple>
#include <unordered_set>

#include "moetrace/analyzer/interval.h"

namespace moetrace::analyzer {

namespace {

void add_activity(NvtxGpuProjection& p, const Activity& a, std::vector<Interval>& gpu) {
  ++p.activities;
  p.gpu_start_ns = p.gpu_start_ns < 0 ? a.start_ns : std::min(p.gpu_start_ns, a.start_ns);
  p.gpu_end_ns = std::max(p.gpu_end_ns, a.end_ns);
  gpu.push_back({a.start_ns, a.end_ns});
}

}  // namespace

NvtxProjector::NvtxProjector(const Trace& trace) : trace_(trace) {
  for (std::size_t i = 0; i < trace.api_calls.size(); ++i) {
    const auto& c = trace.api_calls[i];
    if (c.correlation_id != 0) calls_[{c.rank.value, c.thread_id}].push_back(static_cast<std::uint32_t>(i));
  }
  for (auto& [key, v] : calls_)
    std::sort(v.begin(), v.end(), [&](std::uint32_t a, std::uint32_t b) {
      return trace.api_calls[a].start_ns < trace.api_calls[b].start_ns;
    });
  launches_.reserve(trace.activities.size());
  for (std::size_t i = 0; i < trace.activities.size(); ++i) {
    const auto& a = trace.activities[i];
    if (a.correlation_id != 0) launches_.push_back({a.rank.value, a.correlation_id, static_cast<std::uint32_t>(i)});
  }
  std::sort(launches_.begin(), launches_.end());
}

NvtxGpuProjection NvtxProjector::project(const NvtxRange& range) const {
  NvtxGpuProjection p;
  const auto it = calls_.find({range.rank.value, range.thread_id});
  if (it == calls_.end()) return p;
  const auto& calls = it->second;
  const std::int64_t end = range.end_ns < range.start_ns ? INT64_MAX : range.end_ns;
  auto first = std::lower_bound(calls.begin(), calls.end(), range.start_ns, [&](std::uint32_t c, std::int64_t t) {
    return trace_.api_calls[c].start_ns < t;
  });
  std::vector<Interval> gpu;
  for (auto c = first; c != calls.end() && trace_.api_calls[*c].start_ns <= end; ++c) {
    const auto& call = trace_.api_calls[*c];
    ++p.api_calls;
    const Launch lo{call.rank.value, call.correlation_id, 0};
    for (auto l = std::lower_bound(launches_.begin(), launches_.end(), lo);
         l != launches_.end() && l->rank == call.rank.value && l->correlation_id == call.correlation_id; ++l) {
      add_activity(p, trace_.activities[l->activity], gpu);
    }
  }
  p.gpu_busy_ns = IntervalSet::from(std::move(gpu)).length();
  return p;
}

NvtxGpuProjection project_nvtx_range(const Trace& trace, const NvtxRange& range) {
  NvtxGpuProjection p;
  const std::int64_t end = range.end_ns < range.start_ns ? INT64_MAX : range.end_ns;
  std::unordered_set<std::int64_t> correlations;
  for (const auto& c : trace.api_calls)
    if (c.rank == range.rank && c.thread_id == range.thread_id && c.correlation_id != 0 &&
        c.start_ns >= range.start_ns && c.start_ns <= end) {
      ++p.api_calls;
      correlations.insert(c.correlation_id);
    }
  if (correlations.empty()) return p;
  std::vector<Interval> gpu;
  for (const auto& a : trace.activities) {
    if (a.rank == range.rank && a.correlation_id != 0 && correlations.count(a.correlation_id))
      add_activity(p, a, gpu);
  }
  p.gpu_busy_ns = IntervalSet::from(std::move(gpu)).length();
  return p;
}

namespace {

// Most GPU time first, then most host time, then by name: a total order.
void sort_names(std::vector<NvtxNameSummary>& names) {
  std::sort(names.begin(), names.end(), [](const NvtxNameSummary& a, const NvtxNameSummary& b) {
    return std::tie(b.gpu_busy_ns, b.host_ns, a.domain, a.name) < std::tie(a.gpu_busy_ns, a.host_ns, b.domain, b.name);
  });
}

}  // namespace

NvtxAnalysis analyze_nvtx(const Trace& trace) {
  NvtxAnalysis out;
  const bool any = std::any_of(trace.nvtx.begin(), trace.nvtx.end(),
                               [&](const NvtxRange& r) { return trace.str(r.domain) != "moetrace"; });
  if (!any) return out;
  const NvtxProjector projector(trace);
  std::map<std::pair<std::int32_t, std::int32_t>, NvtxNameSummary> by_name;  // (domain, name) string ids
  for (const auto& r : trace.nvtx) {
    if (trace.str(r.domain) == "moetrace") continue;
    ++out.ranges;
    auto& s = by_name[{r.domain.value, r.name.value}];
    if (s.ranges == 0) {
      s.domain = std::string(trace.str(r.domain));
      s.name = std::string(trace.str(r.name));
    }
    ++s.ranges;
    if (r.end_ns >= r.start_ns) s.host_ns += r.end_ns - r.start_ns;
    const auto p = projector.project(r);
    if (p.activities > 0) ++out.ranges_with_gpu;
    s.activities += p.activities;
    s.gpu_busy_ns += p.gpu_busy_ns;
  }
  for (auto& [key, s] : by_name) out.names.push_back(std::move(s));
  sort_names(out.names);
  return out;
}

NvtxAnalysis merge_nvtx(std::vector<NvtxAnalysis> parts) {
  NvtxAnalysis out;
  std::map<std::pair<std::string, std::string>, NvtxNameSummary> by_name;
  for (auto& p : parts) {
    out.ranges += p.ranges;
    out.ranges_with_gpu += p.ranges_with_gpu;
    for (auto& n : p.names) {
      auto& s = by_name[{n.domain, n.name}];
      if (s.ranges == 0) {
        s.domain = std::move(n.domain);
        s.name = std::move(n.name);
      }
      s.ranges += n.ranges;
      s.host_ns += n.host_ns;
      s.activities += n.activities;
      s.gpu_busy_ns += n.gpu_busy_ns;
    }
    p = NvtxAnalysis();
  }
  for (auto& [key, s] : by_name) out.names.push_back(std::move(s));
  sort_names(out.names);
  return out;
}

}  // namespace moetrace::analyzer
