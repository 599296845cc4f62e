// The report's section on each rank's critical path (critical_path.h:
// Holistic Trace Analysis's definition). The text, Markdown and HTML reports
// show the length and its split by category per rank, and the events with
// the most time on the longest rank's path; the JSON report adds every rank's
// path events (at most CriticalPathOptions::top_events each). Runs of several
// ranks add the one path across ranks, joined at collectives.
#include <fmt/format.h>

#include <algorithm>

#include "report_sections.h"

namespace moetrace::analyzer {

namespace {

constexpr PathCategory kPathCategories[] = {PathCategory::kCpuOp,        PathCategory::kKernelCompute,
                                            PathCategory::kKernelCommunication, PathCategory::kMemcpyMemset,
                                            PathCategory::kLaunchDelay,  PathCategory::kKernelGap};
constexpr std::size_t kEventsShown = 5;

nlohmann::json categories_json(const RankCriticalPath& r) {
  nlohmann::json cats = nlohmann::json::array();
  for (auto c : kPathCategories)
    cats.push_back({{"category", path_category_name(c)}, {"ns", r.at(c)}, {"share", r.share(c)}});
  return cats;
}

nlohmann::json event_json(const PathEvent& p) {
  nlohmann::json j;
  put_path_event(p, report_detail::json_put(j));
  return j;
}

void across_ranks_tables(ReportSection& s, const CrossRankCriticalPath& x) {
  const auto& r = x.path;
  s.para(fmt::format(
      "Across ranks: one path over every rank's graph, joined at the collectives matched across ranks (as for the "
      "collective waits): a collective's kernel cannot end before every participant has started it, and its time "
      "before the last participant started is waiting, counted nowhere (critical_path.h). {} collective instances "
      "joined ranks; the path is {} long and changes rank {} times.",
      x.collective_instances, format_duration(r.length_ns), x.crossings));
  ReportTable t{{"path", "length", "CPU ops", "compute", "communication", "memcpy/memset", "launch delay", "kernel gap"}, {}};
  std::vector<std::string> row{"across ranks", format_duration(r.length_ns)};
  for (auto c : kPathCategories) row.push_back(fmt::format("{} ({:.1f}%)", format_duration(r.at(c)), 100.0 * r.share(c)));
  t.rows.push_back(std::move(row));
  s.table("The critical path across ranks: length and time by category (share of the length).", std::move(t));
  ReportTable by_rank{{"rank", "on path", "share"}, {}};
  for (const auto& [rank, ns] : x.rank_ns)
    if (ns > 0)
      by_rank.rows.push_back({std::to_string(rank), format_duration(ns),
                              fmt::format("{:.1f}%", r.length_ns > 0 ? 100.0 * static_cast<double>(ns) /
                                                                           static_cast<double>(r.length_ns)
                                                                     : 0.0)});
  if (!by_rank.rows.empty()) s.table("Time on the path across ranks by the rank of its events.", std::move(by_rank));
  if (r.events.empty()) return;
  ReportTable e{{"rank", "event", "kind", "category", "on path", "start", "duration"}, {}};
  for (std::size_t i = 0; i < r.events.size() && i < kEventsShown; ++i) {
    const auto& p = r.events[i];
    e.rows.push_back({std::to_string(p.rank), p.name, std::string(path_event_kind_name(p.kind)),
                      std::string(path_category_name(p.category)), format_duration(p.path_ns),
                      format_duration(p.start_ns), format_duration(p.end_ns - p.start_ns)});
  }
  auto caption = fmt::format("Events with the most time on the path across ranks ({} of {}; the JSON report lists more).",
                             e.rows.size(), r.path_event_count);
  s.table(std::move(caption), std::move(e));
}

}  // namespace

namespace report_detail {

Section critical_path_section(const Analyses& a, const ReportOptions& o) {
  Section s{"critical_path", "Critical path per rank", {}};
  const auto& paths = a.critical_path;
  if (paths.empty()) {
    s.para("No host or GPU events in the trace: no critical path.");
    return s;
  }
  s.para(std::string(
             "The longest chain of dependent work on each rank, as Holistic Trace Analysis (HTA) builds it: CPU ops "
             "nested on their threads, launch calls to their kernels, kernels in stream order, kernels to the "
             "synchronisations that waited for them (critical_path.h). Waiting in a synchronisation and time "
             "between top-level ops count zero; each rank's path stays on its rank") +
         (a.critical_path_across_ranks ? " (the path across ranks follows)." : "."));
  if (!a.critical_path_window.empty())
    s.para("Window: " + a.critical_path_window + "; the host events that start in it and the GPU work they "
           "launched (HTA's annotation window).");
  if (!a.critical_path_across_ranks && !a.not_computed_reason.empty())
    s.para("The path across ranks is not computed: " + a.not_computed_reason + ".");
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
  if (!longest->events.empty()) {
    Table e{{"event", "kind", "category", "on path", "start", "duration"}, {}};
    for (std::size_t i = 0; i < longest->events.size() && i < kEventsShown; ++i) {
      const auto& p = longest->events[i];
      e.rows.push_back({p.name, std::string(path_event_kind_name(p.kind)), std::string(path_category_name(p.category)),
                        format_duration(p.path_ns), format_duration(p.start_ns),
                        format_duration(p.end_ns - p.start_ns)});
    }
    auto caption = fmt::format("Events with the most time on rank {}'s path ({} of {}; the JSON report lists more).",
                               longest->rank, e.rows.size(), longest->path_event_count);
    s.table(std::move(caption), std::move(e));
  }
  if (a.critical_path_across_ranks && a.critical_path_across_ranks->path.nodes > 0)
    across_ranks_tables(s, *a.critical_path_across_ranks);
  return s;
}

}  // namespace report_detail

namespace {

// The fields of a path that a rank's and the path across ranks share.
template <class Path>
nlohmann::json path_json(const Path& r) {
  return {{"length_ns", r.length_ns}, {"start_ns", r.start_ns},
          {"end_ns", r.end_ns},       {"nodes", r.nodes},
          {"edges", r.edges},         {"path_edges", r.path_edges},
          {"path_events", r.path_event_count}, {"categories", categories_json(r)}};
}

}  // namespace

nlohmann::json critical_path_json(const std::vector<RankCriticalPath>& paths,
                                  const std::optional<CrossRankCriticalPath>& across, const std::string& window) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : paths) {
    nlohmann::json events = nlohmann::json::array();
    for (const auto& p : r.events) events.push_back(event_json(p));
    auto rank = path_json(r);
    rank["rank"] = r.rank;
    rank["window_start_ns"] = r.window_start_ns;
    rank["window_end_ns"] = r.window_end_ns;
    rank["events"] = std::move(events);
    ranks.push_back(std::move(rank));
  }
  nlohmann::json j = {{"ranks", ranks}, {"window", window.empty() ? std::string("whole trace") : window}};
  if (across) {
    nlohmann::json events = nlohmann::json::array(), by_rank = nlohmann::json::array();
    for (const auto& p : across->path.events) {
      auto e = event_json(p);
      e["rank"] = p.rank;
      events.push_back(std::move(e));
    }
    for (const auto& [rank, ns] : across->rank_ns) by_rank.push_back({{"rank", rank}, {"ns", ns}});
    auto a = path_json(across->path);
    a["ranks"] = across->ranks;
    a["collective_instances"] = across->collective_instances;
    a["collective_edges"] = across->collective_edges;
    a["waiting_ns"] = across->waiting_ns;
    a["crossings"] = across->crossings;
    a["rank_ns"] = std::move(by_rank);
    a["events"] = std::move(events);
    j["across_ranks"] = std::move(a);
  }
  return j;
}

}  // namespace moetrace::analyzer
