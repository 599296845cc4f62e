// One process per GPU, NCCL 2.28. The unique id travels through a file
// (launch_env.h) written by rank 0. All-to-all-v is a group of ncclSend /
// ncclRecv (NCCL's own alltoall needs equal counts); broadcast and reduce,
// whose groups change with every Pro-Prophet placement, are grouped
// send/recv on the world communicator instead of one ncclCommSplit per
// placement; all-reduce uses ncclAllReduce on the world or on a split
// communicator per distinct group (few: tensor-parallel groups).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "check.h"
#include "communicator.h"
#include "kernels.h"
#include "moetrace/cuda/schedule.h"
#include "moetrace/schema/error.h"

namespace moetrace::cuda {
namespace {

ncclDataType_t nccl_type(DType t) { return t == DType::kBf16 ? ncclBfloat16 : ncclFloat32; }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const plan::Plan& plan, const LaunchEnv& env, const std::string& id_file,
                   std::chrono::milliseconds id_timeout)
      : env_(env), id_file_(id_file) {
    if (plan.world_size != env.world_size)
      throw ConfigError(fmt::format("the plan has {} ranks but the launcher started {} processes",
                                    plan.world_size, env.world_size));
    ncclUniqueId id{};
    if (env.world_size == 1) {
      MOETRACE_NCCL_CHECK(ncclGetUniqueId(&id));
    } else {
      if (id_file_.empty())
        throw ConfigError(fmt::format(
            "NCCL with {} ranks needs a unique-id file every rank can read: set --nccl-id-file or "
            "MOETRACE_NCCL_ID_FILE",
            env.world_size));
      check_unique_id_job(env);
      if (env.rank == 0) {
        MOETRACE_NCCL_CHECK(ncclGetUniqueId(&id));
        std::vector<std::uint8_t> bytes(sizeof id.internal);
        std::memcpy(bytes.data(), id.internal, bytes.size());
        write_unique_id_file(id_file_, env.job_id, bytes);
        wrote_id_ = true;
      } else {
        const auto bytes = read_unique_id_file(id_file_, env.job_id, sizeof id.internal,
                                               IdFileWait{id_timeout, std::chrono::milliseconds(20)});
        std::memcpy(id.internal, bytes.data(), bytes.size());
      }
    }
    MOETRACE_NCCL_CHECK(ncclCommInitRank(&world_, env.world_size, id, env.rank));
    // Init is collective: every rank has read the id by now, so the file goes
    // at once rather than at exit (a crash later must not leave it behind).
    remove_id_file();
  }

  ~NcclCommunicator() override {
    if (scratch_ != nullptr) cudaFree(scratch_);
    for (auto& [group, comm] : groups_) ncclCommDestroy(comm);
    if (world_ != nullptr) ncclCommDestroy(world_);
    remove_id_file();
  }

  const char* name() const override { return "nccl"; }
  bool runs_rank(RankId r) const override { return r.value == env_.rank; }
  bool barriers() const override { return false; }

  void prepare(const ExecContext& ctx) override {
    // Every rank walks the same plan, so all call ncclCommSplit for the same
    // groups in the same order (it is collective over the world).
    for (const plan::Op& op : ctx.plan().ops) {
      const plan::Collective* c = op.collective();
      if (c == nullptr || c->kind != plan::CollectiveKind::kAllReduce) continue;
      if (static_cast<int>(c->group.size()) == env_.world_size) continue;
      std::vector<int> g;
      for (RankId r : c->group) g.push_back(r.value);
      if (groups_.count(g) != 0 || std::find(order_.begin(), order_.end(), g) != order_.end()) continue;
      order_.push_back(g);
    }
    for (const auto& g : order_) {
      const bool member = std::find(g.begin(), g.end(), env_.rank) != g.end();
      ncclComm_t comm = nullptr;
      MOETRACE_NCCL_CHECK(ncclCommSplit(world_, member ? 0 : NCCL_SPLIT_NOCOLOR, env_.rank, &comm, nullptr));
      if (member) groups_[g] = comm;
    }
    MOETRACE_CUDA_CHECK(cudaMalloc(&scratch_, 256));
    MOETRACE_CUDA_CHECK(cudaMemset(scratch_, 0, 256));
  }

  int phases(const plan::Collective&) const override { return 1; }
  std::string graph_capture_refusal() const override {
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess) return "CUDA graph mode: cannot read NCCL's version";
    return nccl_graph_refusal(version);
  }
  void begin(const ExecContext&, const std::vector<const plan::Op*>&) override {}
  void barrier(const ExecContext&, const std::vector<const plan::Op*>&) override {}
  void end(const ExecContext&, const std::vector<const plan::Op*>&) override {}

  void launch(const ExecContext& ctx, const plan::Op& op, int) override {
    const plan::Collective& c = *op.collective();
    const cudaStream_t s = ctx.stream(op.stream);
    auto bytes = [&](const plan::View& v) { return static_cast<std::size_t>(v.rows * ctx.row_bytes(v.buffer)); };
    switch (c.kind) {
      case plan::CollectiveKind::kAllToAllV:
      case plan::CollectiveKind::kBroadcast:
      case plan::CollectiveKind::kSendRecv: {
        MOETRACE_NCCL_CHECK(ncclGroupStart());
        for (const auto& t : c.sends)
          if (bytes(t.view) > 0)
            MOETRACE_NCCL_CHECK(ncclSend(ctx.view_ptr(t.view), bytes(t.view), ncclInt8, t.peer.value, world_, s));
        for (const auto& t : c.recvs)
          if (bytes(t.view) > 0)
            MOETRACE_NCCL_CHECK(ncclRecv(ctx.view_ptr(t.view), bytes(t.view), ncclInt8, t.peer.value, world_, s));
        MOETRACE_NCCL_CHECK(ncclGroupEnd());
        return;
      }
      case plan::CollectiveKind::kAllReduce: {
        ncclComm_t comm = world_;
        if (static_cast<int>(c.group.size()) != env_.world_size) {
          std::vector<int> g;
          for (RankId r : c.group) g.push_back(r.value);
          auto it = groups_.find(g);
          if (it == groups_.end())
            throw Error(fmt::format("NCCL communicator: no communicator for the group of op {}", op.name));
          comm = it->second;
        }
        if (!c.moves_data) {
          // Timing-only: the participants synchronise, as the plan says.
          MOETRACE_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm, s));
          return;
        }
        const DType t = ctx.dtype(c.inout.buffer);
        void* p = ctx.view_ptr(c.inout);
        MOETRACE_NCCL_CHECK(ncclAllReduce(p, p, bytes(c.inout) / static_cast<std::size_t>(dtype_bytes(t)),
                                          nccl_type(t), ncclSum, comm, s));
        return;
      }
      case plan::CollectiveKind::kReduce: {
        if (op.rank != c.root) {
          MOETRACE_NCCL_CHECK(ncclGroupStart());
          for (const auto& t : c.sends)
            if (bytes(t.view) > 0)
              MOETRACE_NCCL_CHECK(ncclSend(ctx.view_ptr(t.view), bytes(t.view), ncclInt8, t.peer.value, world_, s));
          MOETRACE_NCCL_CHECK(ncclGroupEnd());
          return;
        }
        // The root receives every contribution into a scratch, then adds it.
        std::vector<void*> tmp(c.recvs.size(), nullptr);
        for (std::size_t i = 0; i < c.recvs.size(); ++i)
          if (bytes(c.recvs[i].view) > 0) MOETRACE_CUDA_CHECK(cudaMallocAsync(&tmp[i], bytes(c.recvs[i].view), s));
        MOETRACE_NCCL_CHECK(ncclGroupStart());
        for (std::size_t i = 0; i < c.recvs.size(); ++i)
          if (tmp[i] != nullptr)
            MOETRACE_NCCL_CHECK(ncclRecv(tmp[i], bytes(c.recvs[i].view), ncclInt8, c.recvs[i].peer.value, world_, s));
        MOETRACE_NCCL_CHECK(ncclGroupEnd());
        PaceParams unpaced;
        unpaced.piece_bytes = 1 << 20;
        unpaced.blocks = 32;
        for (std::size_t i = 0; i < c.recvs.size(); ++i) {
          if (tmp[i] == nullptr) continue;
          const plan::View& v = c.recvs[i].view;
          const DType t = ctx.dtype(v.buffer);
          kernels::SourceBatch srcs;
          srcs.n = 2;
          srcs.src[0] = ctx.view_ptr(v);
          srcs.src[1] = tmp[i];
          kernels::paced_reduce(s, t, srcs, ctx.view_ptr(v), static_cast<std::int64_t>(bytes(v)) / dtype_bytes(t),
                                unpaced);
          MOETRACE_CUDA_CHECK(cudaFreeAsync(tmp[i], s));
        }
        return;
      }
    }
  }

 private:
  void remove_id_file() {
    if (!wrote_id_) return;
    std::error_code ec;
    std::filesystem::remove(id_file_, ec);
    wrote_id_ = false;
  }

  LaunchEnv env_;
  std::string id_file_;
  bool wrote_id_ = false;
  ncclComm_t world_ = nullptr;
  std::vector<std::vector<int>> order_;
  std::map<std::vector<int>, ncclComm_t> groups_;
  void* scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const plan::Plan& plan, const LaunchEnv& env,
                                                     const std::string& id_file,
                                                     std::chrono::milliseconds id_timeout) {
  return std::make_unique<NcclCommunicator>(plan, env, id_file, id_timeout);
}

}  // namespace moetrace::cuda
