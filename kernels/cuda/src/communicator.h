// The communicators behind one interface. The executor enqueues a
// collective (all its participating ops this process runs, plan rule 4) as:
//   begin(step) ; for each phase: [barrier(step) if phase > 0] ; launch(op, phase) for each op ; end(step)
// with every launch inside the op's NVTX/correlation scope, so the kernels a
// collective launches are attributed to the right rank's op.
//  - EmulatedCommunicator: all ranks in this process on one GPU; real copy /
//    reduce kernels between per-rank buffers on per-rank streams, paced by
//    the link model; participants synchronised by events (start and end
//    barriers, as a collective starts and ends together).
//  - NcclCommunicator: one process per GPU; all-to-all-v as grouped
//    ncclSend/ncclRecv, all-reduce (ncclCommSplit for sub-groups),
//    broadcast and reduce (Pro-Prophet Trans/Agg, FasterMoE shadows) as
//    grouped send/recv (plus a reduction kernel at the root), send/recv.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "moetrace/cuda/executor.h"
#include "moetrace/cuda/link_model.h"
#include "moetrace/plan/plan.h"

namespace moetrace::cuda {

// What a communicator needs from the executor.
class ExecContext {
 public:
  virtual ~ExecContext() = default;
  virtual const plan::Plan& plan() const = 0;
  virtual cudaStream_t stream(StreamId id) const = 0;
  virtual void* view_ptr(const plan::View& v) const = 0;
  virtual DType dtype(BufferId b) const = 0;
  virtual std::int64_t row_bytes(BufferId b) const = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* name() const = 0;
  virtual bool runs_rank(RankId r) const = 0;
  // Participants synchronise at the start and end of a collective (plan_waits).
  virtual bool barriers() const = 0;
  // Once, before the first collective (NCCL: sub-communicators).
  virtual void prepare(const ExecContext& ctx) = 0;
  virtual int phases(const plan::Collective& c) const = 0;
  virtual void begin(const ExecContext& ctx, const std::vector<const plan::Op*>& step) = 0;
  virtual void barrier(const ExecContext& ctx, const std::vector<const plan::Op*>& step) = 0;
  virtual void launch(const ExecContext& ctx, const plan::Op& op, int phase) = 0;
  virtual void end(const ExecContext& ctx, const std::vector<const plan::Op*>& step) = 0;
  // Why its collectives cannot be captured into a CUDA graph (one line), or
  // empty where they can.
  virtual std::string graph_capture_refusal() const { return {}; }
};

std::unique_ptr<Communicator> make_emulated_communicator(const plan::Plan& plan, const LinkModel& link);
// Joins the NCCL job described by `env` (unique id through `id_file`).
std::unique_ptr<Communicator> make_nccl_communicator(const plan::Plan& plan, const LaunchEnv& env,
                                                     const std::string& id_file,
                                                     std::chrono::milliseconds id_timeout);

}  // namespace moetrace::cuda
