#include "moetrace/analyzer/stream_waits.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

namespace moetrace::analyzer {

std::vector<StreamWait> recorded_stream_waits(const Trace& t, std::int64_t* recorded) {
  std::vector<StreamWait> out;
  std::int64_t n = 0;
  // Per stream track, its activities by launch correlation id (built on demand).
  std::map<std::size_t, std::vector<std::pair<std::int64_t, std::uint32_t>>> by_corr;
  auto track = [&](std::size_t s) -> const std::vector<std::pair<std::int64_t, std::uint32_t>>& {
    auto [it, fresh] = by_corr.try_emplace(s);
    if (fresh) {
      for (auto i = t.activity_track_begin[s]; i < t.activity_track_begin[s + 1]; ++i)
        if (t.activities[i].correlation_id > 0)
          it->second.push_back({t.activities[i].correlation_id, static_cast<std::uint32_t>(i)});
      std::sort(it->second.begin(), it->second.end());
    }
    return it->second;
  };
  for (const auto& y : t.sync_events) {
    if (y.kind != SyncEvent::kStreamWaitEvent || y.event_record_correlation_id <= 0 || y.correlation_id <= 0) continue;
    const int waiting = t.stream_index(y.stream), recording = t.stream_index(y.wait_stream);
    if (waiting < 0 || recording < 0 || waiting == recording) continue;
    ++n;
    const auto& src = track(static_cast<std::size_t>(recording));
    const auto p = std::lower_bound(src.begin(), src.end(), std::make_pair(y.event_record_correlation_id, 0u));
    if (p == src.begin()) continue;  // nothing launched before the record: no wait
    const auto& dst = track(static_cast<std::size_t>(waiting));
    const auto q = std::upper_bound(dst.begin(), dst.end(), std::make_pair(y.correlation_id, ~0u));
    if (q == dst.end()) continue;
    out.push_back({std::prev(p)->second, q->second});
  }
  if (recorded != nullptr) *recorded = n;
  return out;
}

}  // namespace moetrace::analyzer
