// The report's section on each rank's critical path (critical_path.h:
// Holistic Trace Analysis's definition). The text, Markdown and HTML reports
// show the length and its split by category per rank, and the events with
// the most time on the longest rank's path; the JSON report adds every rank's
// path events (at most CriticalPathOptions::top_events each).
#include <fmt/format.h>

#include <algorithm>

#include "report_sections.h"

namespace moetrace::analyzer {

namespace {

constexpr PathCategory kPathCategories[] = {PathCategory::kCpuOp,        PathCategory::kKernelCompute,
                                            PathCategory::kKernelCommunication, PathCategory::kMemcpyMemset,
                                            PathCategory::kLaunchDelay,  PathCategory::kKernelGap};
constexpr std::size_t kEventsShown = 5;

}  // namespace

namespace report_detail {

Section critical_path_section(const Analyses& a, const ReportOptions& o) {
  Section s{"critical_path", "Critical path per rank", {}};
  const auto& paths = a.critical_path;
  if (paths.empty()) {
    s.para("No host or GPU events in the trace: no critical path.");
    return s;
  }
  s.para("The longest chain of dependent work on each rank, as Holistic Trace Analysis (HTA) builds it: CPU ops "
         "nested on their threads, launch calls to their kernels, kernels in stream order, kernels to the "
         "synchronisations that waited for them (critical_path.h). Waiting in a synchronisation and time between "
         "top-level ops count zero; the path does not cross collectives to other ranks.");
  const auto [picked, note] = ranks_to_list(
      paths, o.per_rank, "path length", [](const auto& r) { return r.length_ns; },
      [](const auto& r) { return format_duration(r.length_ns); });
  Table t{{"rank", "length", "CPU ops", "compute", "communication", "memcpy/memset", "launch delay", "kernel gap"}, {}};
  for (auto i : picked) {
    const auto& r = paths[i];
    std::vector<std::string> row{std::to_string(r.rank), format_duration(r.length_ns)};
    for (auto c : kPathCategories)
      row.push_back(fmt::format("{} ({:.1f}%)", format_duration(r.at(c)), 100.0 * r.share(c)));
    t.rows.push_back(std::move(row));
  }
  s.table("Critical path length and its time by category (share of the length). Launch delay: from a launch call's "
          "start to its kernel's start where the stream was empty; kernel gap: between consecutive kernels of a "
          "stream that was not.",
          std::move(t));
  if (!note.empty()) s.para(note);
  const auto longest = std::max_element(paths.begin(), paths.end(),
                                        [](const auto& x, const auto& y) { return x.length_ns < y.length_ns; });
  if (longest->events.empty()) return s;
  Table e{{"event", "kind", "category", "on path", "start", "duration"}, {}};
  for (std::size_t i = 0; i < longest->events.size() && i < kEventsShown; ++i) {
    const auto& p = longest->events[i];
    e.rows.push_back({p.name, std::string(path_event_kind_name(p.kind)), std::string(path_category_name(p.category)),
                      format_duration(p.path_ns), format_duration(p.start_ns), format_duration(p.end_ns - p.start_ns)});
  }
  auto caption = fmt::format("Events with the most time on rank {}'s path ({} of {}; the JSON report lists more).",
                             longest->rank, e.rows.size(), longest->path_event_count);
  s.table(std::move(caption), std::move(e));
  return s;
}

}  // namespace report_detail

nlohmann::json critical_path_json(const std::vector<RankCriticalPath>& paths) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : paths) {
    nlohmann::json cats = nlohmann::json::array(), events = nlohmann::json::array();
    for (auto c : kPathCategories)
      cats.push_back({{"category", path_category_name(c)}, {"ns", r.at(c)}, {"share", r.share(c)}});
    for (const auto& p : r.events)
      events.push_back({{"name", p.name},
                        {"kind", path_event_kind_name(p.kind)},
                        {"category", path_category_name(p.category)},
                        {"path_ns", p.path_ns},
                        {"start_ns", p.start_ns},
                        {"end_ns", p.end_ns},
                        {"stream", p.stream},
                        {"thread", p.thread},
                        {"correlation_id", p.correlation_id}});
    ranks.push_back({{"rank", r.rank},
                     {"length_ns", r.length_ns},
                     {"start_ns", r.start_ns},
                     {"end_ns", r.end_ns},
                     {"nodes", r.nodes},
                     {"edges", r.edges},
                     {"path_edges", r.path_edges},
                     {"path_events", r.path_event_count},
                     {"categories", cats},
                     {"events", events}});
  }
  return {{"ranks", ranks}};
}

}  // namespace moetrace::analyzer
