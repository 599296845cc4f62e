// Helpers of the simulator tests: windows of simulated ops, small configs.
#pragma once

#include <algorithm>
#include <functional>
#include <limits>

#include "moetrace/plan/plan.h"
#include "moetrace/sim/simulator.h"

namespace moetrace::sim::testing {

struct Window {
  double start = std::numeric_limits<double>::infinity();
  double end = -std::numeric_limits<double>::infinity();
  int ops = 0;
  double length() const { return end - start; }
};

// [first start, last end] of the ops that match.
inline Window window(const plan::Plan& plan, const SimResult& r,
                     const std::function<bool(const plan::Op&)>& match) {
  Window w;
  for (const auto& op : plan.ops) {
    if (!match(op)) continue;
    const auto i = static_cast<std::size_t>(op.id.value);
    w.start = std::min(w.start, r.start_s[i]);
    w.end = std::max(w.end, r.end_s[i]);
    ++w.ops;
  }
  return w;
}

// Relative difference |a - b| / |b|.
inline double rel(double a, double b) { return std::abs(a - b) / std::abs(b); }

}  // namespace moetrace::sim::testing
