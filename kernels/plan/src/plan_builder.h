// Appends ops to a plan and derives their dependencies from their buffer
// accesses, so builders state data flow and never hand-write hazards:
// read-after-write, write-after-read and write-after-write edges, the first
// access of a buffer as its allocation, and a free as a final write that
// waits for every earlier access.
#pragma once

#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "moetrace/plan/plan.h"

namespace moetrace::plan::detail {

struct OpArgs {
  OpKind kind = OpKind::kOtherOp;
  std::string name;
  RankId rank;
  StreamId stream;
  Coords coords;
  double flops = 0;
  std::int64_t bytes = 0;
  OpData data = TimingOnly{};
  std::vector<BufferAccess> extra_access;  // ordering of timing-only ops
  std::vector<OpId> extra_deps;
  std::vector<BufferId> free;              // released after this op
};

class PlanBuilder {
 public:
  PlanBuilder(std::string variant, int world_size);
  ~PlanBuilder();
  PlanBuilder(const PlanBuilder&) = delete;
  PlanBuilder& operator=(const PlanBuilder&) = delete;

  Plan& plan() { return plan_; }
  // The rank's stream of this role and name suffix ("" for the default one),
  // created on first use.
  StreamId stream(RankId rank, StreamRole role, std::string_view suffix = {});
  BufferId add_buffer(Buffer b);
  Buffer& buffer(BufferId id) { return plan_.buffers[static_cast<std::size_t>(id.value)]; }
  CollectiveId next_collective() { return CollectiveId(next_collective_++); }

  // Appends an op; its deps are the hazards of its accesses (data_accesses
  // plus extra_access) and of its frees, plus extra_deps.
  OpId add(OpArgs args);
  bool touched(BufferId b) const { return state(b).allocated; }
  bool freed(BufferId b) const { return state(b).freed; }

  // Room for this many ops and buffers in all; the pages of the new room are
  // faulted in on another thread meanwhile (a plan of 1024 ranks is ~600 MB).
  void reserve(std::size_t ops, std::size_t buffers);

  Plan finish();

 private:
  // What add() needs of a buffer: kept apart from the (cold) Buffer, whose
  // cache miss per access would dominate the building of large plans.
  struct Hazard {
    OpId last_writer;
    std::vector<OpId> readers;  // since last_writer
    RankId rank;
    bool allocated = false;
    bool freed = false;
    bool persistent = false;
    bool bound = false;  // binding.kind != kNone
  };
  const Hazard& state(BufferId b) const { return hazards_[static_cast<std::size_t>(b.value)]; }

  Plan plan_;
  std::vector<Hazard> hazards_;
  std::int64_t next_collective_ = 0;
  std::thread prefault_;
};

}  // namespace moetrace::plan::detail
