#include "moetrace/cuda/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "moetrace/schema/error.h"

namespace moetrace::cuda {
namespace {

std::size_t idx(OpId id) { return static_cast<std::size_t>(id.value); }
std::size_t idx(StreamId id) { return static_cast<std::size_t>(id.value); }
std::size_t idx(BufferId id) { return static_cast<std::size_t>(id.value); }

}  // namespace

std::vector<IssueStep> issue_order(const plan::Plan& plan, const RankFilter& runs,
                                   bool ordered_collectives) {
  const std::size_t n = plan.ops.size();
  const std::size_t S = plan.streams.size();
  std::vector<std::vector<OpId>> queue(S);
  std::vector<char> runs_op(n, 0);
  std::unordered_map<std::int64_t, std::vector<OpId>> members;
  std::size_t remaining = 0;
  for (const plan::Op& op : plan.ops) {
    if (idx(op.id) != static_cast<std::size_t>(&op - plan.ops.data()))
      throw Error(fmt::format("plan: op {} has id {} (ids must be dense)", op.name, op.id.value));
    if (!runs(op.rank)) continue;
    if (!op.stream.valid() || idx(op.stream) >= S)
      throw Error(fmt::format("plan: op {} has no valid stream", op.name));
    runs_op[idx(op.id)] = 1;
    queue[idx(op.stream)].push_back(op.id);
    if (const auto* c = op.collective()) members[c->id.value].push_back(op.id);
    ++remaining;
  }
  std::vector<std::size_t> head(S, 0);
  std::vector<char> issued(n, 0);
  // Collectives go out in plan order (their first op's index): the builders
  // emit a collective's ops together and in the same order for every rank,
  // so every process enqueues its collectives in one global order, which
  // NCCL needs (operations on a communicator, and sends/receives between a
  // pair of ranks, must be issued in the same order everywhere).
  std::vector<OpId> collective_ops;
  if (ordered_collectives)
    for (const plan::Op& op : plan.ops)
      if (runs_op[idx(op.id)] && op.collective() != nullptr) collective_ops.push_back(op.id);
  std::size_t next_collective = 0;
  auto deps_done = [&](const plan::Op& op) {
    for (OpId d : op.deps) {
      if (d.value < 0 || idx(d) >= n)
        throw Error(fmt::format("plan: op {} depends on a missing op {}", op.name, d.value));
      if (runs_op[idx(d)] && !issued[idx(d)]) return false;
    }
    return true;
  };
  auto at_head = [&](OpId id) {
    const plan::Op& op = plan.op(id);
    const auto& q = queue[idx(op.stream)];
    const std::size_t h = head[idx(op.stream)];
    return h < q.size() && q[h] == id;
  };

  std::vector<IssueStep> order;
  order.reserve(remaining);
  while (remaining > 0) {
    std::int64_t best_key = -1;
    IssueStep best;
    for (std::size_t s = 0; s < S; ++s) {
      if (head[s] >= queue[s].size()) continue;
      const OpId id = queue[s][head[s]];
      const plan::Op& op = plan.op(id);
      if (best_key >= 0 && id.value >= best_key) continue;
      if (!deps_done(op)) continue;
      if (const auto* c = op.collective()) {
        const auto& m = members[c->id.value];
        bool ready = true;
        std::int64_t key = id.value;
        for (OpId x : m) {
          if (!at_head(x) || !deps_done(plan.op(x))) {
            ready = false;
            break;
          }
          key = std::min(key, x.value);
        }
        while (next_collective < collective_ops.size() && issued[idx(collective_ops[next_collective])])
          ++next_collective;
        if (!ready) continue;
        if (ordered_collectives &&
            (next_collective >= collective_ops.size() || collective_ops[next_collective].value != key))
          continue;
        if (best_key < 0 || key < best_key) {
          best_key = key;
          best.ops = m;
          std::sort(best.ops.begin(), best.ops.end(), [&](OpId a, OpId b) {
            return plan.op(a).rank < plan.op(b).rank;
          });
          best.collective = true;
        }
      } else if (best_key < 0 || id.value < best_key) {
        best_key = id.value;
        best.ops = {id};
        best.collective = false;
      }
    }
    if (best_key < 0) {
      std::string heads;
      for (std::size_t s = 0; s < S && heads.size() < 400; ++s)
        if (head[s] < queue[s].size())
          heads += fmt::format(" {}:{}", plan.streams[s].name, plan.op(queue[s][head[s]]).name);
      throw Error(fmt::format(
          "plan cannot be issued: no stream head is ready ({} ops left; heads:{})", remaining, heads));
    }
    for (OpId x : best.ops) {
      issued[idx(x)] = 1;
      ++head[idx(plan.op(x).stream)];
      --remaining;
    }
    order.push_back(std::move(best));
  }
  return order;
}

WaitPlan plan_waits(const plan::Plan& plan, const std::vector<IssueStep>& order,
                    bool barrier_collectives) {
  const std::size_t n = plan.ops.size();
  WaitPlan w;
  w.waits.assign(n, {});
  w.needs_event.assign(n, false);
  // Dense indices over what this process executes: its streams (S) and ops,
  // so one rank of a large NCCL job keeps clocks of 3 streams, not 3 P.
  std::vector<std::int32_t> sid(plan.streams.size(), -1);
  std::vector<std::int32_t> oid(n, -1);
  std::int32_t S = 0, executed = 0;
  for (const IssueStep& step : order)
    for (OpId x : step.ops) {
      const std::size_t s = idx(plan.op(x).stream);
      if (sid[s] < 0) sid[s] = S++;
      oid[idx(x)] = executed++;
    }
  const auto SS = static_cast<std::size_t>(S);
  // pos[op]: 1-based position of op on its stream among executed ops.
  std::vector<std::int32_t> pos(n, 0);
  std::vector<std::int32_t> count(SS, 0);
  for (const IssueStep& step : order)
    for (OpId x : step.ops) pos[idx(x)] = ++count[static_cast<std::size_t>(sid[idx(plan.op(x).stream)])];
  std::vector<std::vector<std::int32_t>> clock(SS, std::vector<std::int32_t>(SS, 0));
  std::vector<std::int32_t> snapshot(static_cast<std::size_t>(executed) * SS, 0);
  auto join = [&](std::vector<std::int32_t>& into, const std::int32_t* other) {
    for (std::size_t s = 0; s < SS; ++s) into[s] = std::max(into[s], other[s]);
  };
  auto stream_of = [&](OpId x) { return static_cast<std::size_t>(sid[idx(plan.op(x).stream)]); };
  for (const IssueStep& step : order) {
    for (OpId x : step.ops) {
      const plan::Op& op = plan.op(x);
      const std::size_t s = stream_of(x);
      auto& c = clock[s];
      // Latest dependencies first: waiting on them often covers the earlier ones.
      std::vector<OpId> deps = op.deps;
      std::sort(deps.begin(), deps.end(), [](OpId a, OpId b) { return a.value > b.value; });
      for (OpId d : deps) {
        if (oid[idx(d)] < 0) continue;  // not executed by this process
        const std::size_t sd = stream_of(d);
        if (sd == s || c[sd] >= pos[idx(d)]) continue;
        w.waits[idx(x)].push_back(d);
        w.needs_event[idx(d)] = true;
        ++w.total_waits;
        join(c, &snapshot[static_cast<std::size_t>(oid[idx(d)]) * SS]);
      }
      c[s] = pos[idx(x)];
    }
    if (step.collective && barrier_collectives && step.ops.size() > 1) {
      std::vector<std::int32_t> all(SS, 0);
      for (OpId x : step.ops) join(all, clock[stream_of(x)].data());
      for (OpId x : step.ops) clock[stream_of(x)] = all;
    }
    for (OpId x : step.ops) {
      const auto& c = clock[stream_of(x)];
      std::copy(c.begin(), c.end(),
                snapshot.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(oid[idx(x)]) * SS));
    }
  }
  return w;
}

HostArenaPlan plan_host_arena(const plan::Plan& plan, const std::vector<IssueStep>& order,
                              const RankFilter& runs,
                              const std::function<std::int64_t(const plan::Buffer&)>& bytes_of) {
  constexpr std::int64_t kAlign = 256;
  HostArenaPlan out;
  out.offset.assign(plan.buffers.size(), -1);
  out.reuse_waits.assign(plan.buffers.size(), {});
  std::map<std::int64_t, std::pair<std::int64_t, BufferId>> live;  // offset -> (end, buffer)
  struct Retired {
    BufferId id;
    std::int64_t begin, end;
  };
  std::vector<Retired> retired;
  std::int64_t top = 0;

  auto pinned = [&](const plan::Buffer& b) {
    return b.memory == schema::MemoryKind::kPinnedHost && runs(b.rank);
  };
  auto allocate = [&](const plan::Buffer& b) {
    const std::int64_t size = (std::max<std::int64_t>(bytes_of(b), 1) + kAlign - 1) / kAlign * kAlign;
    std::int64_t at = 0;
    bool found = false;
    for (const auto& [begin, v] : live) {
      if (begin - at >= size) {
        found = true;
        break;
      }
      at = v.first;
    }
    if (!found) at = std::max(at, std::int64_t{0});
    live[at] = {at + size, b.id};
    top = std::max(top, at + size);
    out.offset[idx(b.id)] = at;
    // Regions last used by freed buffers: wait for them, and trim them.
    std::vector<Retired> keep;
    for (const Retired& r : retired) {
      if (r.end <= at || r.begin >= at + size) {
        keep.push_back(r);
        continue;
      }
      auto& waits = out.reuse_waits[idx(b.id)];
      if (std::find(waits.begin(), waits.end(), r.id) == waits.end()) waits.push_back(r.id);
      if (r.begin < at) keep.push_back({r.id, r.begin, at});
      if (r.end > at + size) keep.push_back({r.id, at + size, r.end});
    }
    retired = std::move(keep);
  };
  auto release = [&](const plan::Buffer& b) {
    const std::int64_t at = out.offset[idx(b.id)];
    auto it = live.find(at);
    if (at < 0 || it == live.end()) return;
    retired.push_back({b.id, at, it->second.first});
    live.erase(it);
  };

  for (const plan::Buffer& b : plan.buffers)
    if (b.persistent && pinned(b)) allocate(b);
  // The executor allocates for every op of a step, runs the step, then frees.
  for (const IssueStep& step : order) {
    for (OpId x : step.ops)
      for (BufferId b : plan.op(x).alloc_before)
        if (pinned(plan.buffer(b))) allocate(plan.buffer(b));
    for (OpId x : step.ops)
      for (BufferId b : plan.op(x).free_after)
        if (pinned(plan.buffer(b))) release(plan.buffer(b));
  }
  out.bytes = top;
  return out;
}

MemPoolPolicy mem_pool_policy() { return MemPoolPolicy{}; }

GraphSegments graph_segments(const plan::Plan& plan, const std::vector<IssueStep>& order) {
  GraphSegments g;
  g.of_op.assign(plan.ops.size(), -1);
  int iteration = -1;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int it = plan.op(order[i].ops.front()).coords.iteration;
    if (g.first_step.empty() || (it >= 0 && iteration >= 0 && it != iteration)) g.first_step.push_back(i);
    if (it >= 0) iteration = it;
    for (OpId x : order[i].ops) g.of_op.at(static_cast<std::size_t>(x.value)) = g.count() - 1;
  }
  return g;
}

std::string nccl_graph_refusal(int version) {
  constexpr int kFirstCapturable = 20900;  // NCCL 2.9: collectives inside stream capture
  if (version >= kFirstCapturable) return {};
  return fmt::format("CUDA graph mode needs NCCL 2.9 or later to capture collectives (this is NCCL {}.{}.{})",
                     version / 10000, version / 100 % 100, version % 100);
}

}  // namespace moetrace::cuda
