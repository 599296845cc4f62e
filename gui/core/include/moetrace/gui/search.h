// Search by name over everything on the timeline: kernel and op names, op
// kinds ("dispatch_all_to_all"), copies ("memcpy DtoH") and span labels
// ("L3 bwd"). Case-insensitive substring. Runs off the GUI thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/gui/timeline_model.h"

namespace moetrace::gui {

struct SearchHit {
  ItemRef item;
  std::int64_t start_ns = 0;
};

struct SearchResult {
  std::string query;
  std::vector<SearchHit> hits;  // by start time
  bool truncated = false;       // more than max_hits matched
};

SearchResult search_items(const TimelineModel& model, std::string_view query, std::size_t max_hits = 1'000'000,
                          const std::atomic<bool>* cancel = nullptr);

}  // namespace moetrace::gui
