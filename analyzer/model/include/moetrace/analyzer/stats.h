// Medians as the analyses take them. The three differ only where the count
// is even, and each caller says which it means:
// - median: the mean of the two middle values (the fitted models' host
//   issue times, cost_model.h);
// - upper_median: the higher middle value, a measured value (the clock
//   alignment's robust fit, clock_align.h);
// - lower_median: the lower middle value, a measured value (the replay's
//   launch latencies and queue gaps, exec_graph.h).
#pragma once

#include <cstdint>
#include <vector>

namespace moetrace::analyzer {

// `v` must not be empty.
double median(std::vector<double> v);
// 0 where `v` is empty.
double upper_median(std::vector<double> v);
// 0 where `v` is empty; reorders `v`.
std::int64_t lower_median(std::vector<std::int64_t>& v);

}  // namespace moetrace::analyzer
