// How the CUDA executor turns a plan into host-side issue order and
// cross-stream synchronisation, decided entirely on the CPU before anything
// is launched (and unit-tested without a GPU):
//  - issue_order: the sequence in which the host enqueues ops. Rule 3 of
//    plan.h (one stream runs its ops in plan order) and rule 4 (the ops of a
//    collective start together) mean a collective can only be enqueued once
//    every participating rank's stream has reached it, so the host walks the
//    streams like a scheduler and enqueues a collective's ops as one step.
//    With ordered_collectives (NCCL: one process per rank) collectives are
//    enqueued in plan order, so every process issues them in the same order.
//  - plan_waits: which cudaEvent each op waits on (cudaStreamWaitEvent)
//    before it starts. Every dependency on another stream becomes a wait
//    unless an earlier wait already implies it (vector clocks over streams),
//    so the number of events stays near the number of real cross-stream edges.
//  - plan_host_arena: pinned host buffers (mpipemoe's offloaded T_DI / T_M)
//    come from one pre-pinned arena; a region freed by one op and reused by
//    a later one makes the later one wait for the free (stream-ordered reuse,
//    what cudaMallocAsync does for device memory).
//  - graph_segments: with CUDA graphs, the issue order cut into one graph
//    per iteration.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moetrace/plan/plan.h"

namespace moetrace::cuda {

// The ranks this process executes: all of them for the emulated
// communicator, its own for NCCL.
using RankFilter = std::function<bool(RankId)>;

struct IssueStep {
  std::vector<OpId> ops;  // one op, or the participants of one collective (ascending rank)
  bool collective = false;
};

// Throws moetrace::Error where the plan cannot be issued (a cycle, or
// collectives issued in different orders on different ranks).
std::vector<IssueStep> issue_order(const plan::Plan& plan, const RankFilter& runs,
                                   bool ordered_collectives = false);

struct WaitPlan {
  // waits[op]: ops on other streams whose completion event op must wait for.
  std::vector<std::vector<OpId>> waits;
  // needs_event[op]: some later op waits on it (record an event after it).
  std::vector<bool> needs_event;
  std::int64_t total_waits = 0;
};

// `barrier_collectives`: the communicator synchronises all participants of a
// collective at its start and end (the emulated one does; with NCCL each
// process only knows its own stream), so after a collective every
// participant's stream knows what the others knew.
WaitPlan plan_waits(const plan::Plan& plan, const std::vector<IssueStep>& order,
                    bool barrier_collectives);

// CUDA graph mode (ExecutorOptions::cuda_graph): the issue order cut into
// graphs, each the consecutive steps of one iteration, captured and launched
// in turn on one stream. A step of ops without an iteration (-1) joins the
// graph open at it. A graph starts after the previous one has ended, so a
// wait on an op of an earlier graph is implied and not issued (an event
// recorded in one capture cannot be waited on in another).
struct GraphSegments {
  std::vector<std::size_t> first_step;  // [graph]: index of its first step; first_step[0] = 0
  std::vector<int> of_op;               // [op]: its graph, -1 for ops not issued here
  int count() const { return static_cast<int>(first_step.size()); }
};
GraphSegments graph_segments(const plan::Plan& plan, const std::vector<IssueStep>& order);
// Why NCCL of `version` (ncclGetVersion's code, e.g. 22805) cannot have its
// collectives captured into a CUDA graph, one line; empty where it can
// (NCCL 2.9 and later support stream capture).
std::string nccl_graph_refusal(int version);

struct HostArenaPlan {
  std::vector<std::int64_t> offset;  // [buffer]: byte offset in the arena, -1 where not in it
  std::int64_t bytes = 0;            // arena size (peak of live pinned buffers)
  // reuse_waits[buffer]: buffers whose region this one reuses; its allocating
  // op waits for the event recorded after their freeing op.
  std::vector<std::vector<BufferId>> reuse_waits;
};

// How the device memory pool behind cudaMallocAsync (the transient buffers
// of every rank's streams) may reuse freed memory. Each reuse the driver
// allows either needs no wait or follows one the executor issued, never one
// of its own: with cudaMemPoolReuseAllowInternalDependencies the driver may
// hand a block freed on one rank's stream to another's allocation and make
// that stream wait for the free, a cross-stream dependency the plan does not
// have and the trace cannot show (it looks like a slow op). Without it, such
// an allocation takes fresh memory instead (the pool keeps what it has).
struct MemPoolPolicy {
  bool keep_freed_blocks = true;             // release threshold UINT64_MAX: no trimming mid-run
  bool follow_event_dependencies = true;     // reuse across a wait the executor issued
  bool allow_opportunistic = true;           // reuse of a free already complete: nothing to wait for
  bool allow_internal_dependencies = false;  // reuse by inserting a wait of the driver's own
};
MemPoolPolicy mem_pool_policy();

// Pinned-host buffers of the executed ranks; `bytes_of` gives each buffer's
// size as allocated (after the dtype choice). First fit, 256-byte aligned.
HostArenaPlan plan_host_arena(const plan::Plan& plan, const std::vector<IssueStep>& order,
                              const RankFilter& runs,
                              const std::function<std::int64_t(const plan::Buffer&)>& bytes_of);

}  // namespace moetrace::cuda
