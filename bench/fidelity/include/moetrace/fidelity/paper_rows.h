// The papers' headline measurements run in the simulator: one Row per
// comparison of a simulated quantity with the value a paper reports. Shared
// by bench/paper_bench.cc (which prints them) and
// tests/sim/paper_fidelity_test.cc (which holds every row to its expected
// outcome), so both compute each row the same way.
//
// A point row is a hit within 15 % of the paper's value. A row the paper
// gives only as a range ("1.47-2.66x") is counted apart: a hit only inside
// [lo, hi] itself; its ratio is taken to the nearer end (1 inside). A
// speedup row (a ratio of two methods' times, 1 = no effect) whose simulated
// effect is null (within 2 % of 1) where the paper measured one of 5 % or
// more is a miss, however near its ratio.
//
// Paper values are typed in from ../shared/papers/*.txt with the table and
// row cited beside each in paper_rows.cc.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace moetrace::fidelity {

// The row's value under another setting of one of its assumptions (a choice
// about how a paper ran its baseline or its load that the paper does not
// state), so a reader sees what the assumption buys.
struct Alternate {
  std::string assumption;  // the key of Row::assumptions it replaces, e.g. "zipf-skew"
  std::string setting;     // the other setting, in words: "Zipf skew 1.0"
  double sim = 0;
  std::optional<bool> ordering;
};

// An assumption a row rests on: a key (for Alternate and the summary) and
// the assumed setting in words.
struct Assumption {
  std::string key;
  std::string setting;
};

struct Row {
  std::string id;  // stable key, "<paper>/<table>/<case>/<quantity>"
  std::string paper, where, quantity;
  double paper_lo = 0, paper_hi = 0;  // equal unless the paper gives a range
  double sim = 0;
  bool speedup = false;               // a ratio of two methods' times or throughputs
  std::optional<bool> ordering;       // the paper's ordering holds in simulation
  std::string note;
  std::vector<Assumption> assumptions;
  std::vector<Alternate> alternates;  // one per assumption, at its other setting
  bool simulated = true;              // false: the row could not be simulated (note says why)
  // The paper value this row compares with set a constant of the model (a
  // side measurement the preset is calibrated from): printed, never counted.
  bool calibration = false;

  bool range() const { return paper_hi != paper_lo; }
  double ratio() const { return ratio_of(sim); }
  bool null_effect() const { return null_effect_of(sim); }
  bool within() const { return within_of(sim); }
  // The same, for another simulated value of the row (an alternate's).
  double ratio_of(double value) const;
  bool null_effect_of(double value) const;
  bool within_of(double value) const;
  // "yes", "no", "no (null effect)", "n/a" or "calibration input".
  std::string hit_text() const;
  // This row as it would be under `assumption`'s other setting (itself when
  // it does not rest on that assumption).
  Row under_alternate(const std::string& assumption) const;
};

// The counts of the summary line.
struct Summary {
  int points = 0, points_within = 0;
  int ranges = 0, ranges_inside = 0;
  int ordering_rows = 0, ordered = 0;
  int null_effects = 0;
  int not_simulated = 0;
  int calibration = 0;  // calibration inputs, not counted
};
Summary summarize(const std::vector<Row>& rows);

// ppmoe Table 2 (throughput), Table 3 and Sec. 4.4 (forward-time shares).
// The shares are read from simulated traces written under `trace_dir`
// (a fresh temporary folder, removed afterwards, when empty).
std::vector<Row> ppmoe_rows(const std::string& trace_dir = {});

// pipemoe Table VI, Fig. 4, Sec. V-C and Table VII under one of the paper's
// hardware models: "pipemoe-2080ti-ib100" (the released solver.py's
// constants), "pipemoe-fig6" (the paper's Fig. 6 fits), or either with
// kInterferenceSuffix (computation and all-to-all slowing each other while
// they overlap; illustrative factors, a sensitivity run).
inline constexpr const char* kInterferenceSuffix = "+interference";
std::vector<Row> pipemoe_rows(const std::string& cost_model);

// A configuration of pipemoe's Table IV grid (Sec. V-C) in the paper's
// symbols: P GPUs, B, L, H, M, and l experts a GPU.
struct PipeMoeGridPoint {
  int P, B, L, H, M, l;
};
// Every point of the grid, P varying slowest and l fastest.
std::vector<PipeMoeGridPoint> pipemoe_table4_grid();

// mpipemoe Sec. V-C and V-D: speedups over FasterMoE, memory reductions.
std::vector<Row> mpipemoe_rows();

// pro-prophet Fig. 10, Tables IV and V, Fig. 16. Every row is labelled with
// the assumptions it rests on and carries its value at their other settings.
std::vector<Row> pro_prophet_rows();

}  // namespace moetrace::fidelity
