// `moetrace replay`: a trace replayed from its execution graph
// (exec_graph.h) with the measured durations, beside the measured trace,
// per rank and iteration and per MoE layer; with what-ifs (whatif_graph.h)
// a third, predicted time.
//
// Times compared are the report's (breakdown.h): an iteration's window on a
// rank, and a MoE layer's window (the union of its phases and micro-batches
// on one rank in one iteration), computed the same way on the measured and
// on the replayed trace. A trace without iterations gets one row per rank:
// its span, from the first GPU start to the last GPU end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moetrace/analyzer/exec_graph.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct ReplayIterationRow {
  std::int32_t rank = 0, iteration = -1;  // -1: the rank's span (no iterations)
  std::int64_t measured_ns = 0, replayed_ns = 0;
  std::int64_t predicted_ns = -1;  // with what-ifs; -1: none
};

// One MoE layer, over its (rank, iteration) windows: the mean window.
struct ReplayLayerRow {
  std::int32_t layer = 0;
  std::int32_t windows = 0;  // (rank, iteration) pairs
  std::int64_t measured_ns = 0, replayed_ns = 0;
  std::int64_t predicted_ns = -1;
};

// Signed relative difference (b - a) / a; 0 where a is 0.
double relative_error(std::int64_t a, std::int64_t b);

struct ReplaySummary {
  std::vector<ReplayIterationRow> iterations;  // by (rank, iteration)
  std::vector<ReplayLayerRow> layers;          // by layer
  double max_iteration_error = 0;              // |replayed / measured - 1|, the worst iteration
  double max_layer_error = 0;                  // the same over layers
  // The graph's make-up (exec_graph.h).
  std::int64_t nodes = 0, edges = 0;
  std::array<std::int64_t, kNumExecEdgeKinds> edge_counts{};
  std::vector<RankLatencies> latencies;
  std::int64_t unexplained = 0, unexplained_ns = 0, unlaunched = 0, collective_instances = 0;
  // |replayed - measured| start of every GPU activity (a pure replay): the
  // median and the 99th percentile; the windows above can agree while work
  // inside them moved, these show it.
  std::int64_t start_shift_p50_ns = 0, start_shift_p99_ns = 0;
  // Points on or after a cycle (exec_graph.h evaluate_exec_graph): 0 for a
  // graph as built; the replay keeps their measured times.
  std::int64_t unresolved = 0;
  std::vector<std::string> missing;
};

// The measured trace against its replay (and a prediction, if given: a
// trace the same graph gave after what-ifs).
ReplaySummary compare_replay(const Trace& measured, const Trace& replayed, const ExecGraph& graph,
                             const Trace* predicted = nullptr, std::size_t unresolved = 0);

// The GPU activities' start shifts of a replay (`times` of the graph as
// built) into `s`.
void add_start_shifts(const Trace& trace, const ExecGraph& graph, const std::vector<std::int64_t>& times,
                      ReplaySummary& s);

// Builds the graph, replays it and compares.
ReplaySummary replay(const Trace& trace, const ExecGraphOptions& options = {});

}  // namespace moetrace::analyzer

#include <iosfwd>

#include <nlohmann/json.hpp>

namespace moetrace::analyzer {

// `moetrace replay`'s text and JSON (schemas/replay.schema.json). `what_ifs`:
// the what-ifs applied, one line each (empty: none).
void write_replay_text(std::ostream& out, const Trace& trace, const ReplaySummary& s,
                       const std::vector<std::string>& what_ifs = {});
nlohmann::json replay_json(const Trace& trace, const ReplaySummary& s, const std::vector<std::string>& what_ifs = {});

}  // namespace moetrace::analyzer
