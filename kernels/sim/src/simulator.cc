#include "moetrace/sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <queue>
#include <set>
#include <string_view>
#include <unordered_map>

#include "moetrace/plan/flops.h"
#include "moetrace/schema/error.h"

namespace moetrace::sim {

using plan::Collective;
using plan::CollectiveKind;
using plan::Op;
using plan::Plan;

int launches(const Op& op) {
  if (std::holds_alternative<plan::FfnForward>(op.data)) return 2;
  if (std::holds_alternative<plan::FfnBackward>(op.data)) return 4;
  if (std::holds_alternative<plan::FfnRecompute>(op.data)) return 1;
  if (std::holds_alternative<plan::GateBackward>(op.data)) return 2;
  return 1;
}

namespace {

// The GEMM startups an op pays on the GPU (pipemoe Eq. 14: 2 forward, 4
// backward, mpipemoe Table II): its launches, but none for an expert
// batched with the one before it (FfnForward::batched). Host issue still
// counts every op's launches: it is fitted per op kind from traces, which
// do not tell batched experts apart.
int gemm_startups(const Op& op) {
  if (const auto* f = std::get_if<plan::FfnForward>(&op.data); f != nullptr && f->batched) return 0;
  if (const auto* b = std::get_if<plan::FfnBackward>(&op.data); b != nullptr && b->batched) return 0;
  return launches(op);
}

enum class WorkClass : std::uint8_t { kCompute = 0, kComm = 1, kCopy = 2 };

WorkClass work_class(const Op& op) {
  if (op.collective()) return WorkClass::kComm;
  const Category c = op.category();
  if (is_communication(c)) return WorkClass::kComm;
  if (c == Category::kMemcpy || std::holds_alternative<plan::Copy>(op.data)) return WorkClass::kCopy;
  return WorkClass::kCompute;
}

std::int64_t view_bytes(const Plan& plan, const plan::View& v) {
  if (!v.buffer.valid() || static_cast<std::size_t>(v.buffer.value) >= plan.buffers.size()) return 0;
  return v.rows * plan.buffer(v.buffer).row_bytes();
}

double copy_seconds(const Plan& plan, const Op& op, const CostModel& m) {
  std::int64_t bytes = op.bytes;
  if (const auto* c = std::get_if<plan::Copy>(&op.data); c != nullptr && bytes <= 0) bytes = view_bytes(plan, c->src);
  const schema::CopyKind kind = plan::copy_direction(plan, op).kind;
  const LinearCost& c = kind == schema::CopyKind::kDeviceToDevice ? m.copy_d2d
                        : kind == schema::CopyKind::kDeviceToHost ? m.copy_d2h
                                                                  : m.copy_h2d;  // host to device or host
  return c.at(static_cast<double>(bytes));
}

// The bytes an expert FFN op's GEMMs read and write (plan flops.h); 0 for
// every other op. M and H from the expert's parameters ([W1; W2^T]: 2M x
// H), its rows from its FLOPs (the builders count them by flops.h from the
// rows; a timing-only plan keeps no row spans).
double gemm_operand_bytes(const Plan& plan, const Op& op) {
  BufferId params;
  double (*bytes)(std::int64_t, std::int64_t, std::int64_t, int) = nullptr;
  double (*flops)(std::int64_t, std::int64_t, std::int64_t) = nullptr;
  if (const auto* f = std::get_if<plan::FfnForward>(&op.data)) {
    params = f->params;
    bytes = plan::ffn_forward_bytes;
    flops = plan::ffn_forward_flops;
  } else if (const auto* b = std::get_if<plan::FfnBackward>(&op.data)) {
    params = b->params;
    bytes = plan::ffn_backward_bytes;
    flops = plan::ffn_backward_flops;
  } else if (const auto* r = std::get_if<plan::FfnRecompute>(&op.data)) {
    params = r->params;
    bytes = plan::ffn_recompute_bytes;
    flops = plan::ffn_recompute_flops;
  }
  if (!bytes || !params.valid() || static_cast<std::size_t>(params.value) >= plan.buffers.size() || op.flops <= 0)
    return 0;
  const plan::Buffer& w = plan.buffer(params);
  const std::int64_t m = w.rows / 2, h = w.cols;
  const double per_row = flops(1, m, h);
  if (!(per_row > 0)) return 0;
  return bytes(std::llround(op.flops / per_row), m, h, w.elem_bytes);
}

// Its startups, then the longer of its FLOPs and its GEMM operands' bytes
// (a roofline; the operands where the cost model rates them), plus the
// bytes of a memory-bound op.
double compute_seconds(const Plan& plan, const Op& op, const CostModel& m) {
  const ComputeCost& c = m.compute_cost(op.kind);
  const double flops_s = op.flops * c.seconds_per_flop;
  const double memory_s = c.gemm_seconds_per_byte > 0 ? gemm_operand_bytes(plan, op) * c.gemm_seconds_per_byte : 0;
  return gemm_startups(op) * c.alpha_s + std::max(flops_s, memory_s) +
         static_cast<double>(std::max<std::int64_t>(op.bytes, 0)) * c.seconds_per_byte;
}

// Bytes a member of an all-to-all-v sends and receives.
std::pair<std::int64_t, std::int64_t> all_to_all_traffic(const Op& op, const CostModel& m) {
  const Collective& c = *op.collective();
  if (c.sends.empty() && c.recvs.empty()) return {op.bytes, op.bytes};
  std::int64_t send = 0, recv = 0;
  for (const auto& t : c.sends)
    if (m.all_to_all_counts_local || t.peer != op.rank) send += t.bytes;
  for (const auto& t : c.recvs)
    if (m.all_to_all_counts_local || t.peer != op.rank) recv += t.bytes;
  return {send, recv};
}

// The message size of a non-all-to-all collective seen from one member.
// Broadcast and reduce are pipelined (NCCL rings/trees): they take as long as
// one copy of the message crossing a link, however many ranks receive it, so
// their volume is the largest single transfer, not the root's total. This
// makes pro-prophet Eq. 4/5 exact for n = 0 (an expert sent to every device).
std::int64_t collective_op_bytes(const Plan& plan, const Op& op) {
  const Collective& c = *op.collective();
  if (c.kind == CollectiveKind::kBroadcast || c.kind == CollectiveKind::kReduce) {
    std::int64_t b = 0;
    for (const auto& t : c.sends) b = std::max(b, t.bytes);
    for (const auto& t : c.recvs) b = std::max(b, t.bytes);
    return b > 0 ? b : op.bytes;
  }
  if (op.bytes > 0) return op.bytes;
  if (c.kind == CollectiveKind::kAllReduce) return view_bytes(plan, c.inout);
  std::int64_t b = 0;
  for (const auto& t : c.sends) b += t.bytes;
  if (b == 0)
    for (const auto& t : c.recvs) b += t.bytes;
  return b;
}

}  // namespace

double collective_volume(const Plan& plan, const std::vector<const Op*>& members, const CostModel& m) {
  if (members.empty()) return 0;
  const Collective& c = *members.front()->collective();
  double volume = 0;
  for (const Op* op : members) {
    if (c.kind == CollectiveKind::kAllToAllV) {
      // pro-prophet Eq. 1: the all-to-all lasts as long as its busiest rank.
      const auto [send, recv] = all_to_all_traffic(*op, m);
      const std::int64_t v = m.all_to_all_volume == AllToAllVolume::kMaxRecv   ? recv
                              : m.all_to_all_volume == AllToAllVolume::kMaxSend ? send
                                                                                : std::max(send, recv);
      volume = std::max(volume, static_cast<double>(v));
    } else {
      volume = std::max(volume, static_cast<double>(collective_op_bytes(plan, *op)));
    }
  }
  return volume;
}

namespace {

double collective_seconds(const Plan& plan, const std::vector<const Op*>& members, const CostModel& m) {
  const Collective& c = *members.front()->collective();
  const double volume = collective_volume(plan, members, m);
  const int P = static_cast<int>(std::max(c.group.size(), members.size()));
  if (P <= 1) {
    // A collective of one rank moves nothing over a link: an all-to-all or a
    // send to itself is a device copy, a reduction over one rank is a no-op.
    if (c.kind == CollectiveKind::kAllToAllV || c.kind == CollectiveKind::kSendRecv)
      return volume > 0 ? m.copy_d2d.at(volume) : 0.0;
    return 0.0;
  }
  LinearCost cost = m.collective(c.kind).at(P);  // pipemoe Eq. 16
  // A step of an exchange split by peer groups (FasterMoE's smart schedule)
  // pays its share of the 1-factor all-to-all's P - 1 startups (pipemoe
  // Table II).
  if (c.kind == CollectiveKind::kAllToAllV && c.exchange_peers > 0 && c.exchange_peers < P - 1)
    cost.alpha_s *= static_cast<double>(c.exchange_peers) / (P - 1);
  return cost.at(volume);
}

}  // namespace

double nominal_seconds(const Plan& plan, const Op& op, const CostModel& m) {
  if (const Collective* c = op.collective()) {
    std::vector<const Op*> members;
    for (const auto& o : plan.ops)
      if (const auto* oc = o.collective(); oc && oc->id == c->id) members.push_back(&o);
    return collective_seconds(plan, members, m);
  }
  switch (work_class(op)) {
    case WorkClass::kCopy: return copy_seconds(plan, op, m);
    case WorkClass::kComm:
      // A communication op without collective data: a point-to-point transfer.
      return m.collective(CollectiveKind::kSendRecv).at(2).at(static_cast<double>(op.bytes));
    case WorkClass::kCompute: break;
  }
  return compute_seconds(plan, op, m);
}

namespace {

// Smallest of a multiset of rates with few distinct values (the factors a
// collective's participants see).
class MinRate {
 public:
  void add(double r) {
    for (auto& [v, n] : counts_)
      if (v == r) {
        ++n;
        return;
      }
    counts_.emplace_back(r, 1);
  }
  void remove(double r) {
    for (std::size_t i = 0; i < counts_.size(); ++i)
      if (counts_[i].first == r) {
        if (--counts_[i].second == 0) {
          counts_[i] = counts_.back();
          counts_.pop_back();
        }
        return;
      }
  }
  double min() const {
    double m = 1e300;
    for (const auto& [v, n] : counts_) m = std::min(m, v);
    return m;
  }
  void clear() { counts_.clear(); }

 private:
  std::vector<std::pair<double, int>> counts_;
};

struct Task {
  std::int64_t first_op = 0;
  std::size_t ops_begin = 0, ops_end = 0;    // into task_ops
  std::size_t ranks_begin = 0, ranks_end = 0;  // into task_ranks / slot_factor
  WorkClass cls = WorkClass::kCompute;
  bool needs_link = false;
  int eligible = 0;
  enum class State : std::uint8_t { kWaiting, kReady, kRunning, kDone } state = State::kWaiting;
  double work = 0;  // nominal seconds
  double done = 0;  // nominal seconds completed by last_t
  double last_t = 0;
  double rate = 0;
  double end_t = 0;
  double release_t = 0;  // the host has issued every op of the task (CostModel::host_issue)
  bool held = false;     // ready, waiting for release_t
  std::uint32_t version = 0;
  MinRate rates;  // multi-rank tasks: per-participant factors
};

struct Event {
  double t;
  std::int64_t first_op;
  int task;
  std::uint32_t version;
  bool release = false;  // the task's host issue ends (else: the task ends)
  bool operator>(const Event& o) const {
    return t != o.t ? t > o.t : first_op > o.first_op;
  }
};

struct RankState {
  std::vector<std::pair<int, int>> running;  // (task, slot in the task's rank list)
  std::array<int, 3> count{0, 0, 0};        // running tasks by WorkClass
  int link_holder = -1;                      // kSerial
  std::int64_t device_bytes = 0, host_bytes = 0;
  bool dirty = false;
};

class Engine {
 public:
  Engine(const Plan& plan, const CostModel& model, const SimOptions& options)
      : plan_(plan), m_(model), options_(options) {}

  SimResult run();

 private:
  void build_tasks();
  void build_graph();
  void plan_host_issue();
  void make_eligible(std::int64_t op);
  void op_ended(std::int64_t op);
  void start_ready();
  void start(int task);
  void finish(int task);
  double factor(const Task& t, int rank) const;
  void update_rates();
  void alloc(const Op& op, BufferId b);
  void release(const Op& op, BufferId b);
  std::size_t listed_buffer(const Op& op, BufferId b, std::string_view verb) const;
  [[noreturn]] void stall() const;

  const Plan& plan_;
  const CostModel& m_;
  const SimOptions& options_;
  SimResult r_;

  std::vector<Task> tasks_;
  std::vector<int> task_of_op_;
  std::vector<std::int64_t> task_ops_;
  std::vector<int> task_ranks_;
  std::vector<double> slot_factor_;
  std::vector<std::size_t> dep_begin_;       // dependents CSR
  std::vector<std::int64_t> dependents_;
  std::vector<int> pending_deps_;
  std::vector<std::size_t> stream_begin_;    // ops per stream, in plan order
  std::vector<std::int64_t> stream_ops_;
  std::vector<std::size_t> stream_head_;
  std::vector<RankState> ranks_;
  std::vector<int> dirty_;
  std::vector<int> ready_;
  std::set<std::pair<std::int64_t, int>> waiting_;  // kSerial: (first op, task)
  bool link_released_ = false;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  double now_ = 0;
  std::int64_t finished_ = 0;
};

void Engine::build_tasks() {
  const std::size_t n = plan_.ops.size();
  task_of_op_.assign(n, -1);
  std::unordered_map<std::int64_t, int> by_collective;
  std::vector<int> members_count;
  // At most one task per op; capacity never touched costs no memory.
  tasks_.reserve(n);
  members_count.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan_.ops[i];
    if (op.id.value != static_cast<std::int64_t>(i))
      throw Error(fmt::format("plan: ops[{}] has id {} (rule 1: ids are dense indices)", i, op.id.value));
    int t = -1;
    if (const Collective* c = op.collective()) {
      auto [it, inserted] = by_collective.try_emplace(c->id.value, static_cast<int>(tasks_.size()));
      t = it->second;
      if (inserted) {
        tasks_.emplace_back();
        members_count.push_back(0);
      }
    } else {
      t = static_cast<int>(tasks_.size());
      tasks_.emplace_back();
      members_count.push_back(0);
    }
    task_of_op_[i] = t;
    ++members_count[static_cast<std::size_t>(t)];
  }
  // Members CSR, in plan order; a task's first op is its earliest member.
  std::size_t pos = 0;
  for (std::size_t t = 0; t < tasks_.size(); ++t) {
    tasks_[t].ops_begin = tasks_[t].ops_end = pos;
    pos += static_cast<std::size_t>(members_count[t]);
  }
  task_ops_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    Task& t = tasks_[static_cast<std::size_t>(task_of_op_[i])];
    if (t.ops_end == t.ops_begin) t.first_op = static_cast<std::int64_t>(i);
    task_ops_[t.ops_end++] = static_cast<std::int64_t>(i);
  }
  // Participant ranks and nominal work.
  std::vector<const Op*> members;
  std::vector<std::size_t> rank_stamp(static_cast<std::size_t>(std::max(plan_.world_size, 0)), SIZE_MAX);
  for (std::size_t ti = 0; ti < tasks_.size(); ++ti) {
    Task& t = tasks_[ti];
    t.ranks_begin = task_ranks_.size();
    members.clear();
    for (std::size_t k = t.ops_begin; k < t.ops_end; ++k) {
      const Op& op = plan_.ops[static_cast<std::size_t>(task_ops_[k])];
      members.push_back(&op);
      if (op.rank.value < 0 || op.rank.value >= plan_.world_size)
        throw Error(fmt::format("plan: op {} ({}) is on rank {}, outside the world of {}", op.id.value,
                                op.name, op.rank.value, plan_.world_size));
      auto& stamp = rank_stamp[static_cast<std::size_t>(op.rank.value)];
      if (stamp != ti) {
        stamp = ti;
        task_ranks_.push_back(op.rank.value);
      }
    }
    t.ranks_end = task_ranks_.size();
    const Op& first = *members.front();
    t.cls = work_class(first);
    if (const Collective* c = first.collective()) {
      if (c->group.size() > 0 && members.size() != c->group.size())
        throw Error(fmt::format("plan: collective {} ({}) has {} ops for a group of {} ranks", c->id.value,
                                first.name, members.size(), c->group.size()));
      t.work = collective_seconds(plan_, members, m_);
    } else {
      t.work = nominal_seconds(plan_, first, m_);
    }
    t.needs_link = t.cls == WorkClass::kComm && m_.link_sharing == LinkSharing::kSerial &&
                   t.ranks_end - t.ranks_begin > 0;
    for (const Op* op : members) r_.nominal_s[static_cast<std::size_t>(op->id.value)] = t.work;
  }
  slot_factor_.assign(task_ranks_.size(), 0.0);
}

void Engine::build_graph() {
  const std::size_t n = plan_.ops.size();
  pending_deps_.assign(n, 0);
  dep_begin_.assign(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i)
    for (OpId d : plan_.ops[i].deps) {
      if (d.value < 0 || d.value >= static_cast<std::int64_t>(i))
        throw Error(fmt::format("plan: op {} ({}) depends on op {}, which does not precede it (rule 2)", i,
                                plan_.ops[i].name, d.value));
      ++dep_begin_[static_cast<std::size_t>(d.value) + 1];
      ++pending_deps_[i];
    }
  for (std::size_t i = 0; i < n; ++i) dep_begin_[i + 1] += dep_begin_[i];
  dependents_.resize(dep_begin_[n]);
  std::vector<std::size_t> fill(dep_begin_.begin(), dep_begin_.end() - 1);
  for (std::size_t i = 0; i < n; ++i)
    for (OpId d : plan_.ops[i].deps) dependents_[fill[static_cast<std::size_t>(d.value)]++] = static_cast<std::int64_t>(i);

  const std::size_t ns = plan_.streams.size();
  stream_begin_.assign(ns + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const auto s = plan_.ops[i].stream.value;
    if (s < 0 || static_cast<std::size_t>(s) >= ns)
      throw Error(fmt::format("plan: op {} ({}) is on stream {}, which the plan does not list", i,
                              plan_.ops[i].name, s));
    if (plan_.stream(plan_.ops[i].stream).rank != plan_.ops[i].rank)
      throw Error(fmt::format("plan: op {} ({}) is on rank {} but its stream belongs to rank {}", i,
                              plan_.ops[i].name, plan_.ops[i].rank.value,
                              plan_.stream(plan_.ops[i].stream).rank.value));
    ++stream_begin_[static_cast<std::size_t>(s) + 1];
  }
  for (std::size_t s = 0; s < ns; ++s) stream_begin_[s + 1] += stream_begin_[s];
  stream_ops_.resize(n);
  stream_head_.assign(stream_begin_.begin(), stream_begin_.end() - 1);
  std::vector<std::size_t> sfill = stream_head_;
  for (std::size_t i = 0; i < n; ++i)
    stream_ops_[sfill[static_cast<std::size_t>(plan_.ops[i].stream.value)]++] = static_cast<std::int64_t>(i);
}

// Rule 3 (and 4): an op whose deps have ended and that heads its stream can
// start; its task starts once all its ops can.
void Engine::make_eligible(std::int64_t op) {
  const int ti = task_of_op_[static_cast<std::size_t>(op)];
  Task& t = tasks_[static_cast<std::size_t>(ti)];
  if (++t.eligible == static_cast<int>(t.ops_end - t.ops_begin)) {
    t.state = Task::State::kReady;
    if (t.release_t > now_) {
      // Not issued yet: it becomes ready when the host has issued it.
      t.held = true;
      events_.push(Event{t.release_t, t.first_op, ti, t.version, true});
    } else {
      ready_.push_back(ti);
    }
  }
}

// Host issue (cost_model.h): each rank's host thread issues its ops in plan
// order, one after the other; a task is released when the host has issued
// all of its ops (a collective: on every participant). The issue times are
// kept for the trace (its ops' launch intervals).
void Engine::plan_host_issue() {
  if (m_.host_issue.empty()) return;
  const std::size_t n = plan_.ops.size();
  r_.issue_start_s.assign(n, 0);
  r_.issue_end_s.assign(n, 0);
  std::vector<double> host(static_cast<std::size_t>(std::max(plan_.world_size, 0)), 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan_.ops[i];
    const int L = launches(op);  // at least 1
    double& clock = host[static_cast<std::size_t>(op.rank.value)];
    r_.issue_start_s[i] = clock;
    if (auto it = m_.host_issue.find(op.kind); it != m_.host_issue.end()) clock += it->second.at(L);
    r_.issue_end_s[i] = clock;
    // Its L launches go out evenly over the issue interval, and each of
    // its L equal parts of GPU work follows its launch: the op ends no
    // earlier than the last launch plus one part. Released at the issue's
    // end less the other L - 1 parts (never before the issue begins), it
    // ends there when the GPU keeps up, later when it does not.
    const double others = r_.nominal_s[i] * static_cast<double>(L - 1) / static_cast<double>(L);
    Task& t = tasks_[static_cast<std::size_t>(task_of_op_[i])];
    t.release_t = std::max(t.release_t, std::max(r_.issue_start_s[i], clock - others));
  }
}

void Engine::op_ended(std::int64_t op) {
  const Op& o = plan_.ops[static_cast<std::size_t>(op)];
  const auto s = static_cast<std::size_t>(o.stream.value);
  ++stream_head_[s];
  if (stream_head_[s] < stream_begin_[s + 1]) {
    const std::int64_t next = stream_ops_[stream_head_[s]];
    if (pending_deps_[static_cast<std::size_t>(next)] == 0) make_eligible(next);
  }
  for (std::size_t k = dep_begin_[static_cast<std::size_t>(op)]; k < dep_begin_[static_cast<std::size_t>(op) + 1]; ++k) {
    const std::int64_t d = dependents_[k];
    if (--pending_deps_[static_cast<std::size_t>(d)] == 0) {
      const auto ds = static_cast<std::size_t>(plan_.ops[static_cast<std::size_t>(d)].stream.value);
      if (stream_head_[ds] < stream_begin_[ds + 1] && stream_ops_[stream_head_[ds]] == d) make_eligible(d);
    }
  }
}

// The index of buffer `b`, which `op` allocates or frees (`verb`); an error
// where the plan does not list it.
std::size_t Engine::listed_buffer(const Op& op, BufferId b, std::string_view verb) const {
  const auto i = static_cast<std::size_t>(b.value);
  if (i >= plan_.buffers.size())
    throw Error(fmt::format("plan: op {} ({}) {} buffer {}, which the plan does not list", op.id.value, op.name, verb,
                            b.value));
  return i;
}

void Engine::alloc(const Op& op, BufferId b) {
  const auto i = listed_buffer(op, b, "allocates");
  const plan::Buffer& buf = plan_.buffers[i];
  if (buf.persistent) return;
  if (r_.alloc_s[i] >= 0)
    throw Error(fmt::format("plan: buffer {} ({}) is allocated twice (again by op {}, {})", b.value,
                            buf.name, op.id.value, op.name));
  r_.alloc_s[i] = now_;
  RankState& rs = ranks_[static_cast<std::size_t>(buf.rank.value)];
  RankMemory& mem = r_.memory[static_cast<std::size_t>(buf.rank.value)];
  if (buf.memory == schema::MemoryKind::kDevice) {
    rs.device_bytes += buf.bytes();
    if (rs.device_bytes > mem.peak_bytes) {
      mem.peak_bytes = rs.device_bytes;
      mem.peak_time_s = now_;
    }
  } else {
    rs.host_bytes += buf.bytes();
    mem.peak_host_bytes = std::max(mem.peak_host_bytes, rs.host_bytes);
  }
}

void Engine::release(const Op& op, BufferId b) {
  const auto i = listed_buffer(op, b, "frees");
  const plan::Buffer& buf = plan_.buffers[i];
  if (buf.persistent) return;
  if (r_.alloc_s[i] < 0 || r_.free_s[i] >= 0)
    throw Error(fmt::format("plan: buffer {} ({}) is freed by op {} ({}) without a live allocation",
                            b.value, buf.name, op.id.value, op.name));
  r_.free_s[i] = now_;
  RankState& rs = ranks_[static_cast<std::size_t>(buf.rank.value)];
  (buf.memory == schema::MemoryKind::kDevice ? rs.device_bytes : rs.host_bytes) -= buf.bytes();
}

void Engine::start(int ti) {
  Task& t = tasks_[static_cast<std::size_t>(ti)];
  t.state = Task::State::kRunning;
  t.done = 0;
  t.last_t = now_;
  t.rate = 0;
  t.rates.clear();
  for (std::size_t k = t.ops_begin; k < t.ops_end; ++k) {
    const auto op = static_cast<std::size_t>(task_ops_[k]);
    r_.start_s[op] = now_;
    const Op& o = plan_.ops[op];
    for (BufferId b : o.alloc_before) alloc(o, b);
  }
  for (std::size_t s = t.ranks_begin; s < t.ranks_end; ++s) {
    RankState& rs = ranks_[static_cast<std::size_t>(task_ranks_[s])];
    rs.running.emplace_back(ti, static_cast<int>(s));
    ++rs.count[static_cast<std::size_t>(t.cls)];
    if (t.needs_link) rs.link_holder = ti;
    if (!rs.dirty) {
      rs.dirty = true;
      dirty_.push_back(task_ranks_[s]);
    }
    slot_factor_[s] = 0;  // set by update_rates
  }
}

void Engine::finish(int ti) {
  Task& t = tasks_[static_cast<std::size_t>(ti)];
  t.state = Task::State::kDone;
  ++finished_;
  for (std::size_t s = t.ranks_begin; s < t.ranks_end; ++s) {
    RankState& rs = ranks_[static_cast<std::size_t>(task_ranks_[s])];
    for (std::size_t k = 0; k < rs.running.size(); ++k)
      if (rs.running[k].first == ti) {
        rs.running[k] = rs.running.back();
        rs.running.pop_back();
        break;
      }
    --rs.count[static_cast<std::size_t>(t.cls)];
    if (t.needs_link && rs.link_holder == ti) {
      rs.link_holder = -1;
      link_released_ = true;
    }
    if (!rs.dirty) {
      rs.dirty = true;
      dirty_.push_back(task_ranks_[s]);
    }
  }
  for (std::size_t k = t.ops_begin; k < t.ops_end; ++k) {
    const auto op = static_cast<std::size_t>(task_ops_[k]);
    r_.end_s[op] = now_;
    const Op& o = plan_.ops[op];
    for (BufferId b : o.free_after) release(o, b);
    if (options_.op_ended) options_.op_ended(o, r_.start_s[op], now_);
  }
  for (std::size_t k = t.ops_begin; k < t.ops_end; ++k) op_ended(task_ops_[k]);
}

void Engine::start_ready() {
  if (ready_.empty() && !(link_released_ && !waiting_.empty())) return;
  std::vector<std::pair<std::int64_t, int>> candidates;
  candidates.reserve(ready_.size() + (link_released_ ? waiting_.size() : 0));
  for (int ti : ready_) candidates.emplace_back(tasks_[static_cast<std::size_t>(ti)].first_op, ti);
  ready_.clear();
  if (link_released_) candidates.insert(candidates.end(), waiting_.begin(), waiting_.end());
  link_released_ = false;
  std::sort(candidates.begin(), candidates.end());
  for (const auto& [first, ti] : candidates) {
    Task& t = tasks_[static_cast<std::size_t>(ti)];
    if (t.needs_link) {
      bool free = true;
      for (std::size_t s = t.ranks_begin; s < t.ranks_end && free; ++s)
        free = ranks_[static_cast<std::size_t>(task_ranks_[s])].link_holder < 0;
      if (!free) {
        waiting_.emplace(first, ti);  // no-op where it already waits
        continue;
      }
      waiting_.erase({first, ti});
    }
    start(ti);
  }
}

// Speed factor of a running task on one of its ranks (mpipemoe Sec. II-C),
// with the rank's link and SMs shared among concurrent ops where the model
// says so.
double Engine::factor(const Task& t, int rank) const {
  const RankState& rs = ranks_[static_cast<std::size_t>(rank)];
  const auto& f = m_.interference;
  const int comp = rs.count[0] - (t.cls == WorkClass::kCompute);
  const int comm = rs.count[1] - (t.cls == WorkClass::kComm);
  const int copy = rs.count[2] - (t.cls == WorkClass::kCopy);
  switch (t.cls) {
    case WorkClass::kCompute: {
      double x = comm > 0 && copy > 0 ? f.sigma_all : comm > 0 ? f.sigma_comm : copy > 0 ? f.sigma_mem : 1.0;
      if (m_.share_compute) x /= comp + 1;
      return x;
    }
    case WorkClass::kComm: {
      double x = comp > 0 && copy > 0 ? f.mu_all : comp > 0 ? f.mu_comp : copy > 0 ? f.mu_mem : 1.0;
      if (m_.link_sharing == LinkSharing::kFairShare) x /= comm + 1;
      return x;
    }
    case WorkClass::kCopy: {
      const double x = comp > 0 && comm > 0 ? f.eta_all : comp > 0 ? f.eta_comp : comm > 0 ? f.eta_comm : 1.0;
      return x / (copy + 1);
    }
  }
  return 1.0;
}

void Engine::update_rates() {
  static thread_local std::vector<int> changed;
  changed.clear();
  for (int rank : dirty_) {
    RankState& rs = ranks_[static_cast<std::size_t>(rank)];
    rs.dirty = false;
    for (const auto& [ti, slot] : rs.running) {
      Task& t = tasks_[static_cast<std::size_t>(ti)];
      const double f = factor(t, rank);
      double& old = slot_factor_[static_cast<std::size_t>(slot)];
      if (f == old) continue;
      if (t.ranks_end - t.ranks_begin > 1) {
        if (old > 0) t.rates.remove(old);
        t.rates.add(f);
      }
      old = f;
      changed.push_back(ti);
    }
  }
  dirty_.clear();
  for (int ti : changed) {
    Task& t = tasks_[static_cast<std::size_t>(ti)];
    const double rate = t.ranks_end - t.ranks_begin > 1 ? t.rates.min() : slot_factor_[t.ranks_begin];
    if (rate == t.rate) continue;  // also dedupes tasks listed twice
    if (t.rate > 0) t.done += t.rate * (now_ - t.last_t);
    t.last_t = now_;
    t.rate = rate;
    const double left = std::max(0.0, t.work - t.done);
    // A task that never changed rate ends at start + work exactly, so the
    // closed forms of the papers come out exact, not within rounding.
    t.end_t = t.done == 0 && rate == 1.0 ? t.last_t + t.work : now_ + left / rate;
    ++t.version;
    events_.push({t.end_t, t.first_op, ti, t.version});
  }
}

void Engine::stall() const {
  for (const auto& t : tasks_) {
    if (t.state == Task::State::kDone) continue;
    const Op& op = plan_.ops[static_cast<std::size_t>(t.first_op)];
    std::string why = "its deps or stream never free it";
    if (t.state == Task::State::kReady) why = "it waits for a network link forever";
    else if (t.eligible > 0) why = "not every rank of its collective reaches it (collectives issued in different orders?)";
    throw Error(fmt::format("plan stalls: op {} ({}) on rank {} never starts: {}", op.id.value, op.name,
                            op.rank.value, why));
  }
  throw Error("plan stalls");
}

SimResult Engine::run() {
  const std::size_t n = plan_.ops.size();
  r_.start_s.assign(n, -1);
  r_.end_s.assign(n, -1);
  r_.nominal_s.assign(n, 0);
  r_.alloc_s.assign(plan_.buffers.size(), -1);
  r_.free_s.assign(plan_.buffers.size(), -1);
  r_.memory.assign(static_cast<std::size_t>(std::max(plan_.world_size, 0)), RankMemory{});
  ranks_.assign(r_.memory.size(), RankState{});
  build_tasks();
  build_graph();
  plan_host_issue();
  r_.tasks = static_cast<std::int64_t>(tasks_.size());

  // Persistent buffers (model states, mpipemoe Eq. 1) live from the start.
  for (std::size_t i = 0; i < plan_.buffers.size(); ++i) {
    const auto& b = plan_.buffers[i];
    if (!b.persistent) continue;
    if (b.rank.value < 0 || b.rank.value >= plan_.world_size)
      throw Error(fmt::format("plan: buffer {} ({}) is on rank {}, outside the world of {}", i, b.name,
                              b.rank.value, plan_.world_size));
    r_.alloc_s[i] = 0;
    RankState& rs = ranks_[static_cast<std::size_t>(b.rank.value)];
    RankMemory& mem = r_.memory[static_cast<std::size_t>(b.rank.value)];
    if (b.memory == schema::MemoryKind::kDevice) {
      rs.device_bytes += b.bytes();
      mem.persistent_bytes += b.bytes();
      mem.peak_bytes = rs.device_bytes;
    } else {
      rs.host_bytes += b.bytes();
      mem.peak_host_bytes = rs.host_bytes;
    }
  }

  for (std::size_t s = 0; s + 1 < stream_begin_.size(); ++s)
    if (stream_begin_[s] < stream_begin_[s + 1]) {
      const std::int64_t op = stream_ops_[stream_begin_[s]];
      if (pending_deps_[static_cast<std::size_t>(op)] == 0) make_eligible(op);
    }
  start_ready();
  update_rates();

  const std::int64_t total = static_cast<std::int64_t>(tasks_.size());
  const std::int64_t report_every = std::max<std::int64_t>(1, total / 100);
  std::int64_t next_report = report_every;
  std::vector<std::pair<std::int64_t, int>> ended;
  std::vector<int> released;
  while (!events_.empty()) {
    const double t = events_.top().t;
    ended.clear();
    released.clear();
    while (!events_.empty() && events_.top().t == t) {
      const Event e = events_.top();
      events_.pop();
      Task& task = tasks_[static_cast<std::size_t>(e.task)];
      if (e.release) {
        if (task.held) {
          task.held = false;
          released.push_back(e.task);
        }
      } else if (task.state == Task::State::kRunning && task.version == e.version) {
        ended.emplace_back(e.first_op, e.task);
      }
    }
    if (ended.empty() && released.empty()) continue;
    now_ = t;
    std::sort(ended.begin(), ended.end());
    for (const auto& [first, ti] : ended) finish(ti);
    ready_.insert(ready_.end(), released.begin(), released.end());
    start_ready();
    update_rates();
    if (options_.progress && finished_ >= next_report) {
      options_.progress(static_cast<double>(finished_) / static_cast<double>(total));
      next_report = finished_ + report_every;
    }
  }
  if (finished_ != total) stall();

  r_.makespan_s = now_;
  for (std::size_t i = 0; i < plan_.buffers.size(); ++i)
    if (plan_.buffers[i].persistent) r_.free_s[i] = r_.makespan_s;
  if (options_.progress) options_.progress(1.0);
  return std::move(r_);
}

}  // namespace

SimResult simulate(const Plan& plan, const CostModel& model, const SimOptions& options) {
  model.validate();
  return Engine(plan, model, options).run();
}

}  // namespace moetrace::sim
