// The report's section on a run of several rank files: which files and
// ranks, each rank's clock, waiting at collectives and the rank that holds
// up each MoE layer (rank_waits.h). Present where the run came from several
// files (or a file `moetrace merge` wrote).
#include <fmt/format.h>

#include <algorithm>

#include "moetrace/analyzer/run_loader.h"
#include "report_sections.h"

namespace moetrace::analyzer {

namespace report_detail {
namespace {

std::string ranks_text(const std::vector<std::int32_t>& ranks) {
  return ranks.empty() ? "-" : rank_ranges(ranks);
}

std::string offset_text(const RankClock& c) {
  if (!c.estimated) return "-";
  return fmt::format("{:+.3f} us{}", c.offset_ns / 1e3, c.usable() ? "" : " (not applied)");
}

std::string spread_text(const RankClock& c) {
  if (!c.estimated) return "-";
  return c.spread_ns < 0 ? "unknown" : fmt::format("{:.3f} us", c.spread_ns / 1e3);
}

void files_part(Section& s, const RunFiles& f) {
  std::vector<std::int32_t> held;
  for (const auto& file : f.files) held.insert(held.end(), file.ranks.begin(), file.ranks.end());
  std::sort(held.begin(), held.end());
  s.para(fmt::format("{} file{} analysed as one run: rank{} {} of world size {}.", f.files.size(),
                     f.files.size() == 1 ? "" : "s", held.size() == 1 ? "" : "s", ranks_text(held), f.world_size));
  if (!f.missing_ranks.empty())
    s.para(fmt::format("Missing: rank{} {} (no file given holds {}); numbers over ranks cover the others only.",
                       f.missing_ranks.size() == 1 ? "" : "s", ranks_text(f.missing_ranks),
                       f.missing_ranks.size() == 1 ? "it" : "them"));
  for (const auto& [path, why] : f.left_out) s.para("Left out: " + why + ".");
}

void clocks_part(Section& s, const RunFiles& f, const ReportOptions& o) {
  const auto& c = f.clocks;
  s.para(c.applied ? fmt::format("Clocks aligned to rank {}'s from the collectives (participants leave an "
                                 "all-to-all or all-reduce together): offset at the first collective, drift, "
                                 "the spread of the collectives about the fit, and how they were paired; an offset "
                                 "is applied only where they agree (see why otherwise).",
                                 c.reference_rank)
                   : fmt::format("Clocks as recorded (--no-align); the offsets the collectives suggest against rank {}:",
                                 c.reference_rank));
  std::vector<std::string> path_of(static_cast<std::size_t>(std::max(f.world_size, 0)));
  for (const auto& file : f.files)
    for (auto r : file.ranks)
      if (r >= 0 && static_cast<std::size_t>(r) < path_of.size()) path_of[static_cast<std::size_t>(r)] = file.path;
  const auto [listed, note] = ranks_to_list(
      c.ranks, o.per_rank, "clock offset", [](const RankClock& r) { return r.estimated ? std::abs(r.offset_ns) : -1.0; },
      [](const RankClock& r) { return offset_text(r); });
  Table t{{"rank", "offset", "drift ppm", "spread", "paired by", "collectives", "file"}, {}};
  for (auto i : listed) {
    const auto& r = c.ranks[i];
    const auto rank = static_cast<std::size_t>(r.rank);
    t.rows.push_back({std::to_string(r.rank), offset_text(r), r.estimated ? fmt::format("{:+.3f}", r.drift_ppm) : "-",
                      spread_text(r),
                      r.pairing.empty() ? "-" : r.pairing,
                      r.rejected > 0 ? fmt::format("{} ({} outliers)", r.collectives, r.rejected) : std::to_string(r.collectives),
                      rank < path_of.size() ? path_of[rank] : ""});
  }
  s.table("Per rank:", std::move(t));
  if (!note.empty()) s.para(note);
  for (const auto& r : c.ranks)
    if (r.estimated && !r.refused.empty()) s.para(fmt::format("rank {} not aligned: {}", r.rank, r.refused));
}

void waits_part(Section& s, const Analyses& a, const ReportOptions& o) {
  const auto& w = a.rank_waits;
  if (!w.has_collectives) {
    s.para("No all-to-all or all-reduce with two or more participants: no waiting time to attribute.");
    return;
  }
  Table t{{"layer", "collectives", "wait (all ranks)", "held up by", "delay it caused", "last at", "slowest rank"}, {}};
  for (const auto& l : w.layers) {
    std::string slowest = "-";
    for (const auto& b : a.breakdown.layers)
      if (b.layer == l.layer && b.slowest_rank >= 0)
        slowest = fmt::format("{} ({})", b.slowest_rank, format_duration(b.max_window_ns));
    t.rows.push_back({l.layer < 0 ? "other" : std::to_string(l.layer), std::to_string(l.instances),
                      format_duration(l.wait_ns), l.holding_rank < 0 ? "-" : std::to_string(l.holding_rank),
                      l.holding_rank < 0 ? "-" : format_duration(l.holding_ns),
                      l.holding_rank < 0 ? "-" : fmt::format("{} of {}", l.holding_last, l.instances), slowest});
  }
  s.table("Critical path per MoE layer: the rank whose late arrival at the layer's collectives delayed them most "
          "(delay: its lateness beyond the next-latest participant, summed), and the slowest rank by layer time:",
          std::move(t));
  const auto [listed, note] = ranks_to_list(
      w.ranks, o.per_rank, "waiting time", [](const RankWait& r) { return r.wait_ns; },
      [](const RankWait& r) { return format_duration(r.wait_ns); });
  Table r{{"rank", "collectives", "waiting", "per collective", "last at", "delay caused"}, {}};
  for (auto i : listed) {
    const auto& x = w.ranks[i];
    r.rows.push_back({std::to_string(x.rank), std::to_string(x.instances), format_duration(x.wait_ns),
                      format_duration(x.instances > 0 ? x.wait_ns / x.instances : 0), std::to_string(x.last),
                      format_duration(x.held_up_ns)});
  }
  s.table("Waiting at collectives per rank (time ready before the last participant was):", std::move(r));
  if (!note.empty()) s.para(note);
}

}  // namespace

bool has_ranks_section(const Trace& trace) {
  return trace.files != nullptr || !trace.config_value("merge.files").empty();
}

Section ranks_section(const Trace& trace, const Analyses& a, const ReportOptions& o) {
  Section s{"ranks", "Ranks of the run: files, clocks, waiting at collectives", {}};
  if (trace.files) {
    files_part(s, *trace.files);
    clocks_part(s, *trace.files, o);
  }
  waits_part(s, a, o);
  return s;
}

}  // namespace report_detail

nlohmann::json rank_files_json(const RunFiles& f) {
  nlohmann::json files = nlohmann::json::array(), left = nlohmann::json::array(), clocks = nlohmann::json::array();
  for (const auto& file : f.files) files.push_back({{"path", file.path}, {"ranks", file.ranks}});
  for (const auto& [path, why] : f.left_out) left.push_back({{"path", path}, {"reason", why}});
  for (const auto& r : f.clocks.ranks)
    clocks.push_back({{"rank", r.rank},
                      {"estimated", r.estimated},
                      {"collectives", r.collectives},
                      {"rejected", r.rejected},
                      {"offset_ns", r.offset_ns},
                      {"drift_ppm", r.drift_ppm},
                      {"uncertainty_ns", r.uncertainty_ns},
                      {"spread_ns", r.spread_ns},
                      {"pairing", r.pairing},
                      {"refused", r.refused},
                      {"usable", r.usable()}});
  return {{"files", files},
          {"left_out", left},
          {"world_size", f.world_size},
          {"missing_ranks", f.missing_ranks},
          {"duplicate_ranks", f.duplicate_ranks},
          {"by_file", f.by_file},
          {"clock_alignment",
           {{"reference_rank", f.clocks.reference_rank},
            {"t0_ns", f.clocks.t0_ns},
            {"applied", f.clocks.applied},
            {"ranks", clocks}}}};
}

nlohmann::json rank_waits_json(const RankWaitAnalysis& w) {
  auto rank_rows = [](const std::vector<RankWait>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : v)
      a.push_back({{"rank", r.rank},
                   {"collectives", r.instances},
                   {"wait_ns", r.wait_ns},
                   {"last", r.last},
                   {"held_up_ns", r.held_up_ns}});
    return a;
  };
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : w.layers)
    layers.push_back({{"layer", l.layer},
                      {"collectives", l.instances},
                      {"wait_ns", l.wait_ns},
                      {"holding_rank", l.holding_rank},
                      {"holding_ns", l.holding_ns},
                      {"holding_last", l.holding_last},
                      {"ranks", rank_rows(l.ranks)}});
  return {{"has_collectives", w.has_collectives}, {"layers", layers}, {"ranks", rank_rows(w.ranks)}};
}

}  // namespace moetrace::analyzer
