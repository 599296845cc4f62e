// Simulator fidelity against the papers' measurements: the headline results
// of the four papers, run in the simulator with each paper's hardware cost
// model and workloads (bench/fidelity: the rows, shared with the
// paper-fidelity test), printed side by side with the value the paper
// reports.
//
// Each row: paper, table/figure, quantity, paper value, simulated value,
// ratio = simulated / paper, whether the row is a hit, whether the ordering
// the paper reports holds in simulation (which method wins, which r wins;
// "-" where the row states no ordering), the assumptions the row rests on
// with its value at their other setting, and a note. A point row is a hit
// within 15 % of 1; a range row ("1.47-2.66x") is counted apart, a hit only
// inside the paper's range; a speedup row whose simulated effect is null
// (within 2 % of 1) where the paper measured one of 5 % or more is a miss.
// The summary gives the counts, and the counts again with each assumption
// at its other setting.
//
// Usage: paper_bench [--paper ppmoe|pipemoe|mpipemoe|pro-prophet|all]
//                    [--format text|markdown|tsv] [--keep-traces DIR] [--sensitivity]
// tsv: one line per row with its id (the key of the paper-fidelity test),
// the counts as in the other formats after it.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "bench_args.h"
#include "moetrace/fidelity/paper_rows.h"

using namespace moetrace;
using fidelity::Row;

namespace {

std::string fmt_value(double v) {
  const double a = std::abs(v);
  if (a == 0) return "0";
  if (a >= 1000) return fmt::format("{:.0f}", v);
  if (a >= 100) return fmt::format("{:.1f}", v);
  return fmt::format("{:.3g}", v);
}

std::string ordering_text(const std::optional<bool>& o) { return !o ? "-" : (*o ? "yes" : "no"); }

// "assumed: <setting> [<other setting>: <value>, hit <yes/no>, ordering <yes/no/->]; ..."
std::string assumptions_text(const Row& r) {
  std::string s;
  for (const auto& a : r.assumptions) {
    if (!s.empty()) s += "; ";
    s += "assumed: " + a.setting;
    for (const auto& alt : r.alternates)
      if (alt.assumption == a.key)
        s += fmt::format(" [{}: {}, hit {}, ordering {}]", alt.setting, fmt_value(alt.sim),
                         r.null_effect_of(alt.sim) ? "no (null effect)" : (r.within_of(alt.sim) ? "yes" : "no"),
                         ordering_text(alt.ordering));
  }
  return s;
}

std::string counts_text(const fidelity::Summary& s) {
  return fmt::format("point rows within 15 %: {} of {}; range rows inside the range: {} of {}; orderings right: {} "
                     "of {}",
                     s.points_within, s.points, s.ranges_inside, s.ranges, s.ordered, s.ordering_rows);
}

enum class Format { kText, kMarkdown, kTsv };

void print_rows(const std::vector<Row>& rows, Format format) {
  const bool markdown = format == Format::kMarkdown;
  if (format == Format::kTsv) {
    std::printf("id\tpaper\ttable/figure\tquantity\tpaper_lo\tpaper_hi\tsimulated\tratio\thit\tordering\t"
                "assumed\tnote\n");
  } else if (markdown) {
    std::printf("| paper | table/figure | quantity | paper | simulated | ratio | hit (15 %% / in range) | ordering "
                "right | assumed [value at the other setting] | note |\n");
    std::printf("|---|---|---|---:|---:|---:|---|---|---|---|\n");
  } else {
    std::printf("%-12s %-26s %-58s %12s %10s %7s %16s %8s  %s\n", "paper", "table/figure", "quantity", "paper",
                "simulated", "ratio", "hit", "ordering", "note; assumed [value at the other setting]");
  }
  for (const auto& r : rows) {
    const std::string paper_v =
        r.range() ? fmt::format("{}-{}", fmt_value(r.paper_lo), fmt_value(r.paper_hi)) : fmt_value(r.paper_lo);
    const std::string sim_v = r.simulated ? fmt_value(r.sim) : "n/a";
    const std::string ratio = r.simulated ? fmt::format("{:.2f}", r.ratio()) : "n/a";
    const std::string order = r.simulated ? ordering_text(r.ordering) : "-";
    const std::string assumed = assumptions_text(r);
    if (format == Format::kTsv) {
      std::printf("%s\t%s\t%s\t%s\t%.6g\t%.6g\t%s\t%s\t%s\t%s\t%s\t%s\n", r.id.c_str(), r.paper.c_str(),
                  r.where.c_str(), r.quantity.c_str(), r.paper_lo, r.paper_hi,
                  r.simulated ? fmt::format("{:.6g}", r.sim).c_str() : "n/a", ratio.c_str(), r.hit_text().c_str(),
                  order.c_str(), assumed.c_str(), r.note.c_str());
    } else if (markdown) {
      std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.paper.c_str(), r.where.c_str(),
                  r.quantity.c_str(), paper_v.c_str(), sim_v.c_str(), ratio.c_str(), r.hit_text().c_str(),
                  order.c_str(), assumed.c_str(), r.note.c_str());
    } else {
      std::string tail = r.note;
      if (!assumed.empty()) tail += (tail.empty() ? "" : "; ") + assumed;
      std::printf("%-12s %-26s %-58s %12s %10s %7s %16s %8s  %s\n", r.paper.c_str(), r.where.c_str(),
                  r.quantity.c_str(), paper_v.c_str(), sim_v.c_str(), ratio.c_str(), r.hit_text().c_str(),
                  order.c_str(), tail.c_str());
    }
  }
  const auto s = fidelity::summarize(rows);
  std::printf("\n%d rows simulated: %s; %d null simulated effects against a paper effect >= 5 %% (misses); %d rows "
              "not simulated; %d calibration inputs (not counted)\n",
              s.points + s.ranges, counts_text(s).c_str(), s.null_effects, s.not_simulated, s.calibration);
  // By paper, in the order the rows came.
  std::vector<std::string> papers;
  for (const auto& r : rows)
    if (papers.empty() || papers.back() != r.paper) papers.push_back(r.paper);
  for (const auto& p : papers) {
    std::vector<Row> mine;
    for (const auto& r : rows)
      if (r.paper == p) mine.push_back(r);
    std::printf("  %s: %s\n", p.c_str(), counts_text(fidelity::summarize(mine)).c_str());
  }
  // What each assumption buys: every row that rests on it at its other
  // setting, the rest as above.
  std::map<std::string, std::pair<std::string, std::string>> assumptions;  // key -> (assumed, other)
  for (const auto& r : rows)
    for (const auto& a : r.assumptions)
      for (const auto& alt : r.alternates)
        if (alt.assumption == a.key) assumptions.emplace(a.key, std::pair{a.setting, alt.setting});
  for (const auto& [key, settings] : assumptions) {
    std::vector<Row> other;
    int affected = 0;
    for (const auto& r : rows) {
      other.push_back(r.under_alternate(key));
      for (const auto& a : r.assumptions) affected += a.key == key ? 1 : 0;
    }
    std::printf("assumed: %s (%d rows); with those rows at the other setting (%s): %s\n", settings.first.c_str(),
                affected, settings.second.c_str(), counts_text(fidelity::summarize(other)).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string paper = "all";
  Format format = Format::kText;
  std::string keep;
  bool sensitivity = false;
  for (bench::Args args("paper_bench", argc, argv); args.next();) {
    const std::string& a = args.flag();
    if (a == "--paper") paper = args.value();
    else if (a == "--format") {
      const std::string f = args.value();
      if (f == "text") format = Format::kText;
      else if (f == "markdown") format = Format::kMarkdown;
      else if (f == "tsv") format = Format::kTsv;
      else {
        std::fprintf(stderr, "paper_bench: --format must be text, markdown or tsv\n");
        return 2;
      }
    }
    else if (a == "--keep-traces") keep = args.value();
    else if (a == "--sensitivity") sensitivity = true;
    else {
      std::fprintf(stderr,
                   "usage: paper_bench [--paper ppmoe|pipemoe|mpipemoe|pro-prophet|all] [--format text|markdown|tsv] "
                   "[--keep-traces DIR] [--sensitivity]\n");
      return 2;
    }
  }
  const bool all = paper == "all";
  if (!all && paper != "ppmoe" && paper != "pipemoe" && paper != "mpipemoe" && paper != "pro-prophet") {
    std::fprintf(stderr, "paper_bench: --paper must be ppmoe, pipemoe, mpipemoe, pro-prophet or all\n");
    return 2;
  }
  // --keep-traces: ppmoe's simulated traces are written there and kept
  // (by default to a temporary folder, removed afterwards).
  if (!keep.empty()) std::filesystem::create_directories(keep);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Row> rows;
  auto append = [&rows](std::vector<Row> more) {
    for (auto& r : more) rows.push_back(std::move(r));
  };
  try {
    if (all || paper == "ppmoe") append(fidelity::ppmoe_rows(keep));
    if (all || paper == "pipemoe") {
      append(fidelity::pipemoe_rows("pipemoe-2080ti-ib100"));
      append(fidelity::pipemoe_rows("pipemoe-fig6"));
      if (sensitivity) append(fidelity::pipemoe_rows(std::string("pipemoe-2080ti-ib100") + fidelity::kInterferenceSuffix));
    }
    if (all || paper == "mpipemoe") append(fidelity::mpipemoe_rows());
    if (all || paper == "pro-prophet") append(fidelity::pro_prophet_rows());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paper_bench: %s\n", e.what());
    return 1;
  }
  print_rows(rows, format);
  std::printf("(%.1f s)\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}
