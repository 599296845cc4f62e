// Where the time of each rank goes, per MoE layer x iteration x phase.
//
// Definitions (also in docs/analyses.md):
// - An op's time is the union of the GPU activities attributed to it (kernels,
//   copies; see projection) or, where none are, its own [start, end) range.
// - The MoE-layer window of (rank, layer, iteration, phase) is the union over
//   micro-batches of the span from the first to the last MoE op of that layer
//   on that rank; its length is the "MoE-layer time".
// - category_ns[c]: time during which at least one of the layer's ops of
//   category c ran (union over streams); exclusive_ns[c]: time during which c
//   was the only category of the layer's ops running.
// - Communication is hidden where it overlaps computation of any op on the
//   same rank, exposed elsewhere; idle is window time in which nothing at all
//   ran on the rank; outside is window time in which other work ran but none
//   of the split's ops (busy + outside + idle = window).
// - all-to-all share = category_ns[all_to_all] / window; likewise all-reduce.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

using CategoryNs = std::array<std::int64_t, kNumCategories>;

inline double ratio(std::int64_t num, std::int64_t den) {
  return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0;
}

struct TimeSplit {
  std::int64_t window_ns = 0;
  CategoryNs category_ns{};
  CategoryNs exclusive_ns{};
  std::int64_t busy_ns = 0;  // union of every op counted in this split
  std::int64_t idle_ns = 0;
  std::int64_t comm_ns = 0, comm_hidden_ns = 0, comm_exposed_ns = 0;
  // MoE-layer rows: time in which this split's own work ran at the same time
  // as other work of the rank (another layer instance, chunk or phase, or
  // work outside MoE layers): what an overlapped schedule (DualPipe-style
  // chunks) runs side by side. 0 for other splits.
  std::int64_t overlap_ns = 0;

  // Window time in which none of this split's ops ran but other GPU work on
  // the rank did (ops of other layers, non-MoE ops, unattributed kernels):
  // busy + outside + idle = window.
  std::int64_t outside_ns() const { return std::max<std::int64_t>(0, window_ns - busy_ns - idle_ns); }
  std::int64_t at(Category c) const { return category_ns[static_cast<std::size_t>(c)]; }
  double share(Category c) const { return ratio(at(c), window_ns); }
  double all_to_all_share() const { return share(Category::kAllToAll); }
  double all_reduce_share() const { return share(Category::kAllReduce); }
  double hidden_fraction() const { return ratio(comm_hidden_ns, comm_ns); }
  double overlap_share() const { return ratio(overlap_ns, busy_ns); }
  TimeSplit& operator+=(const TimeSplit& o);
};

struct LayerRow {
  std::int32_t rank = 0, layer = 0, iteration = 0;
  Phase phase = Phase::kForward;
  TimeSplit t;
};

struct IterationRow {
  std::int32_t rank = 0, iteration = 0;
  TimeSplit t;                   // window: the iteration on this rank
  std::int64_t moe_layer_ns = 0; // time in which some MoE layer's window is open (union)
  double moe_share() const { return ratio(moe_layer_ns, t.window_ns); }
};

// One MoE layer over all ranks, iterations and both phases.
struct LayerSummary {
  std::int32_t layer = 0;
  int ranks = 0, iterations = 0;
  TimeSplit total;                     // sums; shares of sums
  TimeSplit forward, backward;
  // Per rank and iteration: the union of the layer's windows (forward,
  // backward, every micro-batch), so never more than the iteration's window
  // where the phases overlap.
  std::int64_t mean_window_ns = 0;
  std::int64_t max_window_ns = 0;      // slowest rank-iteration
  std::int32_t slowest_rank = -1;
};

// The window of the per-rank rows (Breakdown::ranks), `report --window`.
// The profiler steps are the trace's iterations (ProfilerStep#N, our own
// iteration ranges); a GPU activity belongs to the step of the op that
// launched it (an activity no op claims, to none).
enum class RankWindow : std::uint8_t {
  kSpan = 0,          // every GPU activity: the rank's first start to its last end
  kSteps = 1,         // the activities of the steps: their first start to last end
  kStepsButLast = 2,  // without the rank's last step: HTA's default (its parser drops the last ProfilerStep)
  // HTA's default exactly: kStepsButLast on ranks with two or more
  // ProfilerStep ranges, kSpan elsewhere (HTA analyses a trace with fewer
  // than two steps whole, and knows no iterations but ProfilerSteps).
  kHta = 3,
};
std::string_view rank_window_name(RankWindow w);         // "span", "steps", "steps-but-last", "hta"
std::string rank_window_description(RankWindow w);       // for reports
std::optional<RankWindow> parse_rank_window(std::string_view name);

struct BreakdownOptions {
  RankWindow rank_window = RankWindow::kSpan;
};

// The PyTorch profiler steps (ProfilerStep#N ranges) of the ranks that record
// two or more, and which work a window other than the span keeps there, as
// HTA selects it when it loads a trace (hta/common/trace.py,
// _filter_irrelevant_gpu_kernels): a CPU call (and the GPU work it launched)
// by the call's start, before the last step's start (steps-but-last), or
// from the first step's start to the last one's end (steps; HTA's
// include_last_profiler_step=True keeps calls before the first step too).
class ProfilerSteps {
 public:
  ProfilerSteps() = default;  // none
  explicit ProfilerSteps(const Trace& trace);
  // Whether `rank` records two or more steps (else no window applies).
  bool has_steps(std::int32_t rank) const { return steps_.contains(rank); }
  // Whether a call of `rank` starting at `start_ns` is in `window`; true
  // where the window is the span or the rank has no steps.
  bool keeps(std::int32_t rank, std::int64_t start_ns, RankWindow window) const;

 private:
  struct Steps {
    int count = 0;
    std::int64_t first_start = INT64_MAX, last_start = INT64_MIN, last_end = INT64_MIN;
  };
  std::map<std::int32_t, Steps> steps_;  // ranks with two or more steps
};

struct RankSummary {
  std::int32_t rank = 0;
  TimeSplit t;                         // window: Breakdown::rank_window's (or the queried window)
  std::int64_t unattributed_ns = 0;    // activity that no op range claims
  std::int64_t events = 0;             // activities, and ops without any, that touch the window
};

struct Breakdown {
  std::vector<LayerRow> rows;           // sorted by (layer, iteration, phase, rank)
  std::vector<IterationRow> iterations; // sorted by (iteration, rank)
  std::vector<LayerSummary> layers;     // sorted by layer
  std::vector<RankSummary> ranks;
  RankWindow rank_window = RankWindow::kSpan;  // of `ranks`
  TimeSplit iteration_total;            // sum over iteration rows
  TimeSplit moe_total;                  // sum over MoE-layer rows
  std::int64_t moe_union_ns = 0;        // sum over iteration rows of moe_layer_ns
  bool has_op_ranges = false;           // false: kernels classified by name only
  // Each MoE layer's window per (layer, rank, iteration): the union of its
  // rows' windows (phases, micro-batches); `layers` summarises them.
  struct LayerWindow {
    std::int32_t layer = 0, rank = 0, iteration = 0;
    std::int64_t ns = 0;
  };
  std::vector<LayerWindow> layer_windows;  // sorted by (layer, rank, iteration)

  double all_to_all_share_of_iteration() const { return iteration_total.all_to_all_share(); }
  double all_reduce_share_of_iteration() const { return iteration_total.all_reduce_share(); }
  double all_to_all_share_of_moe() const { return moe_total.all_to_all_share(); }
  double all_reduce_share_of_moe() const { return moe_total.all_reduce_share(); }
  // Share of the iteration in which some MoE layer is active (overlapping
  // layer windows count once, so this never exceeds 1).
  double moe_share_of_iteration() const { return ratio(moe_union_ns, iteration_total.window_ns); }
  // Every MoE layer ran forward only (inference, evaluation): no layer has a
  // backward window. False without MoE layers.
  bool forward_only() const {
    return !layers.empty() &&
           std::all_of(layers.begin(), layers.end(), [](const LayerSummary& l) { return l.backward.window_ns == 0; });
  }
};

Breakdown compute_breakdown(const Trace& trace, const BreakdownOptions& options = {});

// The breakdowns of traces of disjoint ranks (files of one run, each
// analysed alone) as compute_breakdown() of their union: rows, iteration
// rows, rank rows and layer windows joined in their orders, the totals and
// the layer summaries computed again. Consumes `parts`.
Breakdown merge_breakdowns(std::vector<Breakdown> parts);

// Where the time of each rank went inside [t0, t1): the split of RankSummary
// (every op's time labelled with its category, activity no op claims
// classified by classify_activity; communication hidden where it overlaps
// computation on the rank) restricted to the window. Every rank of the trace
// has a row, also where nothing of it ran in the window.
struct WindowBreakdown {
  std::int64_t t0_ns = 0, t1_ns = 0;
  std::vector<RankSummary> ranks;  // by rank; t.window_ns = t1 - t0
  RankSummary total;               // sums over the ranks (rank -1; window: ranks x length)
  std::int64_t length() const { return t1_ns - t0_ns; }
};
// The bounds may come in either order.
WindowBreakdown breakdown_in_window(const Trace& trace, std::int64_t t0_ns, std::int64_t t1_ns);

// classify_activity: trace.h.

}  // namespace moetrace::analyzer
