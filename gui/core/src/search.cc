#include "moetrace/gui/search.h"

#include <algorithm>
#include <array>

#include "moetrace/schema/ascii.h"

namespace moetrace::gui {
namespace {

bool contains(std::string_view haystack, const std::string& needle_lower) {
  return to_ascii_lower(haystack).find(needle_lower) != std::string::npos;
}

}  // namespace

SearchResult search_items(const TimelineModel& model, std::string_view query, std::size_t max_hits,
                          const std::atomic<bool>* cancel) {
  SearchResult r;
  r.query = std::string(query);
  const std::string q = to_ascii_lower(query);
  if (q.empty()) return r;
  const auto& t = model.trace();
  // Names repeat: decide each distinct name once.
  std::vector<bool> name_matches(t.strings.size());
  for (std::size_t i = 0; i < t.strings.size(); ++i) name_matches[i] = contains(t.strings[i], q);
  auto string_match = [&](StringId id) {
    return id.valid() && static_cast<std::size_t>(id.value) < name_matches.size() &&
           name_matches[static_cast<std::size_t>(id.value)];
  };
  std::vector<bool> kind_matches;
  for (const auto& k : all_op_kinds()) kind_matches.push_back(contains(k.name, q));
  const bool memset_match = std::string("memset").find(q) != std::string::npos;
  const bool unnamed_kernel_match = std::string("kernel").find(q) != std::string::npos;  // shown as "kernel"
  std::array<std::int8_t, 256> copy_match;  // by copy kind; -1: not decided yet
  copy_match.fill(-1);

  auto add = [&](ItemRef item) {
    if (r.hits.size() >= max_hits) {
      r.truncated = true;
      return false;
    }
    r.hits.push_back({item, model.item_start(item)});
    return true;
  };
  for (std::size_t i = 0; i < t.activities.size(); ++i) {
    if ((i & 0xFFFF) == 0 && cancel && cancel->load()) return r;
    const auto& a = t.activities[i];
    bool match;
    if (a.type == analyzer::ActivityType::kKernel)
      match = a.name.valid() && static_cast<std::size_t>(a.name.value) < name_matches.size() ? string_match(a.name)
                                                                                              : unnamed_kernel_match;
    else if (a.type == analyzer::ActivityType::kMemset) match = memset_match;
    else {
      auto& m = copy_match[a.copy_kind];
      if (m < 0) m = contains(model.item_name({ItemSource::kActivity, static_cast<std::uint32_t>(i)}), q) ? 1 : 0;
      match = m == 1;
    }
    if (match && !add({ItemSource::kActivity, static_cast<std::uint32_t>(i)})) break;
  }
  for (std::size_t i = 0; i < t.ops.size() && !r.truncated; ++i) {
    if ((i & 0xFFFF) == 0 && cancel && cancel->load()) return r;
    const auto& o = t.ops[i];
    const auto k = static_cast<std::size_t>(o.kind);
    if ((string_match(o.name) || (k < kind_matches.size() && kind_matches[k])) &&
        !add({ItemSource::kOp, static_cast<std::uint32_t>(i)}))
      break;
  }
  // Host side: only where the timeline shows it.
  bool host_rows = false;
  for (const auto& row : model.rows()) host_rows |= row.kind == RowKind::kApiCalls || row.kind == RowKind::kNvtx;
  for (std::size_t i = 0; host_rows && i < t.api_calls.size() && !r.truncated; ++i) {
    if ((i & 0xFFFF) == 0 && cancel && cancel->load()) return r;
    if (string_match(t.api_calls[i].name) && !add({ItemSource::kApiCall, static_cast<std::uint32_t>(i)})) break;
  }
  for (std::size_t i = 0; host_rows && i < t.nvtx.size() && !r.truncated; ++i)
    if (string_match(t.nvtx[i].name) && !add({ItemSource::kNvtx, static_cast<std::uint32_t>(i)})) break;
  for (std::size_t i = 0; i < model.spans().size() && !r.truncated; ++i)
    if (contains(model.item_label({ItemSource::kSpan, static_cast<std::uint32_t>(i)}), q) &&
        !add({ItemSource::kSpan, static_cast<std::uint32_t>(i)}))
      break;
  std::stable_sort(r.hits.begin(), r.hits.end(),
                   [](const SearchHit& a, const SearchHit& b) { return a.start_ns < b.start_ns; });
  return r;
}

}  // namespace moetrace::gui
