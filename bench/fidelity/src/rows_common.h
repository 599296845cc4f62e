// Pieces shared by the row builders of bench/fidelity (paper_rows.cc,
// pro_prophet_rows.cc): the row list, and a run specification simulated
// with its iteration times.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moetrace/fidelity/paper_rows.h"
#include "moetrace/plan/plan.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"

namespace moetrace::fidelity::detail {

// ---------------------------------------------------------------------------
// Building rows

struct RowList {
  std::vector<Row> rows;

  Row& add(std::string id, std::string paper, std::string where, std::string quantity, double paper_value,
           double sim, bool speedup, std::optional<bool> ordering = std::nullopt, std::string note = {}) {
    return add_range(std::move(id), std::move(paper), std::move(where), std::move(quantity), paper_value,
                     paper_value, sim, speedup, ordering, std::move(note));
  }
  Row& add_range(std::string id, std::string paper, std::string where, std::string quantity, double lo, double hi,
                 double sim, bool speedup, std::optional<bool> ordering = std::nullopt, std::string note = {}) {
    Row r;
    r.id = std::move(id);
    r.paper = std::move(paper);
    r.where = std::move(where);
    r.quantity = std::move(quantity);
    r.paper_lo = lo;
    r.paper_hi = hi;
    r.sim = sim;
    r.speedup = speedup;
    r.ordering = ordering;
    r.note = std::move(note);
    rows.push_back(std::move(r));
    return rows.back();
  }
  void add_not_simulated(std::string id, std::string paper, std::string where, std::string quantity,
                         double paper_value, bool speedup, std::string why) {
    Row& r = add(std::move(id), std::move(paper), std::move(where), std::move(quantity), paper_value, 0, speedup,
                 std::nullopt, std::move(why));
    r.simulated = false;
  }
};

// ---------------------------------------------------------------------------
// Running a spec

struct Run {
  plan::Plan plan;
  sim::SimResult result;
  // Per iteration: the span from the previous iteration's last op end (0 for
  // the first) to this iteration's last op end, over all ranks.
  std::vector<double> iteration_s;
  std::int64_t peak_bytes = 0;  // device memory, the highest rank

  // The mean iteration time from iteration `from` on (steady state: the
  // first iteration of Pro-Prophet has no earlier distribution to plan on).
  double iteration_time(int from = 0) const {
    double sum = 0;
    int n = 0;
    for (std::size_t j = static_cast<std::size_t>(std::max(0, from)); j < iteration_s.size(); ++j, ++n)
      sum += iteration_s[j];
    return n > 0 ? sum / n : 0;
  }
};

// Simulates `spec` with its cost model: times per iteration and the peak.
Run simulate(const sim::RunSpec& spec);

inline sim::RunSpec preset(const std::string& name) { return sim::run_preset(name); }

}  // namespace moetrace::fidelity::detail
