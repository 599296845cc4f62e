// The discrete-event executor of plans (kernels/plan/.../plan.h) under a cost
// model (cost_model.h). It follows the plan's execution rules 1-6: streams
// run their ops one at a time in plan order, an op starts once it heads its
// stream and its deps have ended, the ops of a collective start together,
// buffers are allocated when the op that lists them in alloc_before starts and
// released when the op that lists them in free_after ends.
//
// Time advances from event to event. Every running task (an op, or all ops of
// one collective) has a nominal duration from the cost model and progresses
// at a rate that the other work on its ranks sets (interference factors,
// fair link sharing, SM sharing); a collective progresses at the rate of its
// slowest participant, so all its ops end together. At one instant, every
// end is processed before anything starts, so a buffer freed at t is free for
// an allocation at t; tasks that become ready at the same instant start in
// plan order (which is how the serial link gives dispatches priority).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "moetrace/plan/plan.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::sim {

struct SimOptions {
  // Fraction of ops finished, in [0, 1]; called now and then.
  std::function<void(double)> progress;
  // Called as each op ends, in the order they end (ops of a collective in
  // plan order), with its simulated start and end in seconds.
  std::function<void(const plan::Op& op, double start_s, double end_s)> op_ended;
};

// Peak memory of one rank (device memory; pinned host memory separately).
struct RankMemory {
  std::int64_t persistent_bytes = 0;  // buffers alive for the whole plan (model states)
  std::int64_t peak_bytes = 0;        // device bytes at the peak, persistent included
  double peak_time_s = 0;             // first time the peak was reached
  std::int64_t peak_host_bytes = 0;
};

struct SimResult {
  std::vector<double> start_s, end_s;  // [op]: simulated times in seconds from 0
  std::vector<double> nominal_s;       // [op]: duration alone on an idle rank
  // [op]: when the rank's host began and ended issuing it (seconds); empty
  // where the cost model has no host issue term.
  std::vector<double> issue_start_s, issue_end_s;
  std::vector<double> alloc_s, free_s; // [buffer]: -1 where the plan never touches it
  std::vector<RankMemory> memory;      // [rank]
  double makespan_s = 0;
  std::int64_t tasks = 0;              // ops, counting each collective once

  double duration_s(OpId op) const {
    const auto i = static_cast<std::size_t>(op.value);
    return end_s[i] - start_s[i];
  }
};

// Runs the plan. Throws moetrace::Error where the plan breaks the execution
// rules in a way that stalls it (a cycle, a collective whose ops are not
// issued in the same order on every rank, a dep on a later op).
SimResult simulate(const plan::Plan& plan, const CostModel& model, const SimOptions& options = {});

// What the cost model charges for an op alone, with no interference and a
// free link (a collective op: the whole collective). Exposed for tests and
// the what-if views.
double nominal_seconds(const plan::Plan& plan, const plan::Op& op, const CostModel& model);

// The volume that sets a collective's time (bytes), per the model's
// all-to-all rule: for all-to-all-v the busiest rank's traffic, otherwise the
// op's bytes. `members` are the collective's ops, one per participant.
double collective_volume(const plan::Plan& plan, const std::vector<const plan::Op*>& members,
                         const CostModel& model);

// Number of GEMMs (kernel launches) of a compute op: FFN forward 2,
// backward 4, recompute 1 (mpipemoe Table II), gate backward 2. Host issue
// counts them; the GPU charges alpha for each, except on an expert batched
// with the one before it (plan::FfnForward::batched), which pays none.
int launches(const plan::Op& op);

}  // namespace moetrace::sim
