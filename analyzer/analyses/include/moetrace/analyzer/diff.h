// `moetrace diff BASE NEW`: two traces compared metric by metric, and
// thresholds that turn the comparison into a CI gate.
//
// Metrics (unit in brackets; shares are fractions of the named time):
//   whole run
//     iteration_time [ns]        mean iteration time per rank
//     moe_time [ns]              mean MoE-layer time per rank and iteration (all layers)
//     moe_share                  MoE-layer time / iteration time
//     a2a_share, allreduce_share all-to-all / all-reduce time / MoE-layer time
//     a2a_share_of_iteration, allreduce_share_of_iteration   ... / iteration time
//     expert_share, gating_share, idle_share                  ... / MoE-layer time
//     hidden_fraction            communication overlapped by computation / communication
//     exposed_comm_time [ns]     communication not hidden, per rank and iteration
//     peak_memory [bytes]        largest device memory of any rank
//     bubble [byte_ns]           memory_bubble_bytes_ns, all ranks
//     bubble_fraction            bubble / allocated byte-time
//     balance_degree [tokens]    std of tokens per device, actual placement (mean over layers and iterations)
//     balance_degree_home [tokens], rb, expert_max_over_mean, device_max_over_mean, expert_cv
//     imbalance_time [ns]        slowest rank's MoE-layer time minus the mean (mean over layers and iterations)
//     locality_cosine            cosine similarity of consecutive iterations' load (mean over layers)
//     prediction_error           relative L1 error of predicting j+1's load by j's (mean over layers)
//   whole run from each rank's first to last activity, all ranks summed (also
//   for traces without op ranges, such as imports):
//     run_time [ns]              mean span per rank
//     run_a2a_share, run_allreduce_share, run_comm_share, run_expert_share,
//     run_idle_share             ... / span
//     run_hidden_fraction        communication overlapped by computation / communication
//   per MoE layer L: layerL.<m> with <m> one of time [ns] (mean per rank and
//     iteration, fwd+bwd), a2a_share, allreduce_share, expert_share,
//     gating_share, idle_share, hidden_fraction, balance_degree,
//     expert_max_over_mean, device_max_over_mean, imbalance_time [ns],
//     locality_cosine, bubble [byte_ns], activation_memory [bytes] (the
//     layer's activation buffers alive at once, max over ranks)
//   per op kind K (e.g. dispatch_all_to_all): op.K.time [ns] mean GPU time of
//     one op, op.K.total [ns] GPU time of all of them per rank and iteration,
//     op.K.count ops per rank and iteration
//
// Thresholds, `METRIC OP VALUE`, OP one of > >= < <=:
//   signed VALUE (+5%, -2pp, +100us, +0.05) bounds the change from BASE to NEW:
//     % relative to BASE's value, pp percentage points (0.01) of a fraction,
//     a time (ns, us, ms, s) or size (B, KiB, MiB, GiB, KB, MB, GB) suffix or
//     none: in the metric's unit;
//   unsigned VALUE (40%, 70GiB, 2ms, 1.3) bounds NEW's value itself (% = 0.01).
// Examples: "a2a_share > +5%", "layer2.time > +10%", "peak_memory > 70GiB",
// "hidden_fraction < -5pp", "op.expert_ffn.time > +50us". A threshold is
// violated when the comparison holds; one whose metric is missing from
// either trace is reported as violated too (a gate must not pass blindly).
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct Metric {
  std::string name;
  std::string unit;  // "ns", "fraction", "bytes", "byte_ns", "tokens", "ratio", "count"
  double value = 0;
};

// The metrics of one trace, global first, then per layer, then per op kind.
std::vector<Metric> diff_metrics(const Trace& trace, const Analyses& a);

// Unit of a metric name, or empty when the name is not a metric.
std::string metric_unit(std::string_view name);

struct Threshold {
  enum class Op { kGreater, kGreaterEqual, kLess, kLessEqual };
  enum class Mode { kNewValue, kAbsoluteChange, kRelativeChange };
  std::string expression;  // as given
  std::string metric;
  Op op = Op::kGreater;
  Mode mode = Mode::kNewValue;
  double value = 0;  // in the metric's unit; kRelativeChange: a fraction of BASE
};

// Parses "a2a_share > +5%"; throws moetrace::ConfigError with one line naming
// the problem (unknown metric, bad operator, unit that does not fit).
Threshold parse_threshold(std::string_view expression);

struct DiffEntry {
  std::string name, unit;
  std::optional<double> base, next;
  std::optional<double> change() const {
    return base && next ? std::optional<double>(*next - *base) : std::nullopt;
  }
  // (new - base) / |base|; nullopt where a value is missing or base is 0 and new is not.
  std::optional<double> relative_change() const;
};

struct ThresholdResult {
  Threshold threshold;
  bool evaluated = false;  // both values present
  bool violated = false;
  std::string message;     // one line: "a2a_share > +5%: 0.4 -> 0.46 (+15.0%)"
};

struct TraceDiff {
  std::string base_path, new_path;
  std::vector<DiffEntry> entries;
  std::vector<ThresholdResult> thresholds;
  int violations() const;
};

TraceDiff diff_traces(const Trace& base, const Analyses& base_analyses, const Trace& next,
                      const Analyses& next_analyses, const std::vector<Threshold>& thresholds);

inline constexpr int kDiffVersion = 1;
nlohmann::json diff_json(const TraceDiff& d);
// A table of every metric (unchanged ones included with --all).
void write_diff_text(std::ostream& out, const TraceDiff& d, bool all = false);
std::string format_metric(double value, std::string_view unit);

}  // namespace moetrace::analyzer
