#include "moetrace/plan/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "moetrace/schema/error.h"

namespace moetrace::plan {
namespace {

// Reachability over dependencies plus stream order (rule 3), with stamped
// visit marks so that many bounded walks cost no allocation.
class Reach {
 public:
  explicit Reach(const Plan& plan) : pred_(plan.ops.size()), succ_(plan.ops.size()), stamp_(plan.ops.size(), 0) {
    std::vector<std::int64_t> last_on_stream(plan.streams.size(), -1);
    for (std::size_t i = 0; i < plan.ops.size(); ++i) {
      const Op& op = plan.ops[i];
      for (OpId d : op.deps)
        if (d.value >= 0 && d.value < static_cast<std::int64_t>(i)) pred_[i].push_back(d.value);
      const auto s = static_cast<std::size_t>(op.stream.value);
      if (s < last_on_stream.size()) {
        if (last_on_stream[s] >= 0) pred_[i].push_back(last_on_stream[s]);
        last_on_stream[s] = static_cast<std::int64_t>(i);
      }
      for (std::int64_t p : pred_[i]) succ_[static_cast<std::size_t>(p)].push_back(static_cast<std::int64_t>(i));
    }
  }
  // Marks the ancestors of `from` (inclusive) with index >= floor.
  void mark_ancestors(std::int64_t from, std::int64_t floor) { walk(pred_, from, [&](std::int64_t x) { return x >= floor; }); }
  // Marks the descendants of `from` (inclusive) with index <= ceiling.
  void mark_descendants(std::int64_t from, std::int64_t ceiling) { walk(succ_, from, [&](std::int64_t x) { return x <= ceiling; }); }
  bool marked(std::int64_t x) const { return stamp_[static_cast<std::size_t>(x)] == current_; }
  // Whether op x is op y or must finish before it starts.
  bool precedes(std::int64_t x, std::int64_t y) {
    if (x == y) return true;
    if (x > y) return false;
    mark_ancestors(y, x);
    return marked(x);
  }

 private:
  template <class Keep>
  void walk(const std::vector<std::vector<std::int64_t>>& edges, std::int64_t from, Keep keep) {
    ++current_;
    stack_.assign(1, from);
    stamp_[static_cast<std::size_t>(from)] = current_;
    while (!stack_.empty()) {
      const std::int64_t x = stack_.back();
      stack_.pop_back();
      for (std::int64_t n : edges[static_cast<std::size_t>(x)])
        if (keep(n) && stamp_[static_cast<std::size_t>(n)] != current_) {
          stamp_[static_cast<std::size_t>(n)] = current_;
          stack_.push_back(n);
        }
    }
  }
  std::vector<std::vector<std::int64_t>> pred_, succ_;
  std::vector<std::uint32_t> stamp_;
  std::uint32_t current_ = 0;
  std::vector<std::int64_t> stack_;
};

void check_view(const Plan& plan, const Op& op, const View& v, const char* what,
                std::vector<std::string>& out) {
  if (!v.buffer.valid()) return;
  if (v.buffer.value >= static_cast<std::int64_t>(plan.buffers.size())) {
    out.push_back(fmt::format("op {} ({}): {} names buffer {} that does not exist", op.id.value, op.name, what, v.buffer.value));
    return;
  }
  const Buffer& b = plan.buffer(v.buffer);
  if (v.row < 0 || v.rows < 0 || v.row + v.rows > b.rows)
    out.push_back(fmt::format("op {} ({}): {} rows [{}, {}) outside buffer {} of {} rows", op.id.value,
                              op.name, what, v.row, v.row + v.rows, b.name, b.rows));
}

void check_collectives(const Plan& plan, std::vector<std::string>& out) {
  std::map<std::int64_t, std::vector<const Op*>> groups;
  for (const Op& op : plan.ops)
    if (const Collective* c = op.collective()) groups[c->id.value].push_back(&op);
  for (const auto& [id, ops] : groups) {
    const Collective& first = *ops.front()->collective();
    std::vector<RankId> ranks;
    for (const Op* op : ops) {
      const Collective& c = *op->collective();
      if (c.kind != first.kind || c.group != first.group || c.root != first.root)
        out.push_back(fmt::format("collective {}: op {} ({}) disagrees on kind, group or root", id, op->id.value, op->name));
      ranks.push_back(op->rank);
    }
    std::sort(ranks.begin(), ranks.end());
    std::vector<RankId> group = first.group;
    std::sort(group.begin(), group.end());
    if (ranks != group) {
      out.push_back(fmt::format("collective {} ({}): {} participant ops for a group of {} ranks", id,
                                ops.front()->name, ops.size(), group.size()));
      continue;
    }
    // An init-capture, not [&]: clang before 16 cannot capture structured bindings.
    auto op_of = [&group_ops = ops](RankId r) -> const Op* {
      for (const Op* op : group_ops)
        if (op->rank == r) return op;
      return nullptr;
    };
    auto find = [](const std::vector<PeerTransfer>& v, RankId peer) -> const PeerTransfer* {
      for (const auto& t : v)
        if (t.peer == peer) return &t;
      return nullptr;
    };
    const bool paired = first.kind == CollectiveKind::kAllToAllV || first.kind == CollectiveKind::kBroadcast ||
                        first.kind == CollectiveKind::kReduce || first.kind == CollectiveKind::kSendRecv;
    if (paired && first.moves_data) {
      for (const Op* op : ops)
        for (const auto& s : op->collective()->sends) {
          const Op* peer = op_of(s.peer);
          const PeerTransfer* r = peer ? find(peer->collective()->recvs, op->rank) : nullptr;
          if (!r) {
            out.push_back(fmt::format("collective {} ({}): rank {} sends to rank {}, which expects nothing",
                                      id, op->name, op->rank.value, s.peer.value));
            continue;
          }
          if (r->view.rows != s.view.rows || r->bytes != s.bytes)
            out.push_back(fmt::format("collective {} ({}): rank {} sends {} rows to rank {}, which receives {}",
                                      id, op->name, op->rank.value, s.view.rows, s.peer.value, r->view.rows));
        }
      for (const Op* op : ops)
        for (const auto& r : op->collective()->recvs) {
          const Op* peer = op_of(r.peer);
          if (!peer || !find(peer->collective()->sends, op->rank))
            out.push_back(fmt::format("collective {} ({}): rank {} receives from rank {}, which sends nothing",
                                      id, op->name, op->rank.value, r.peer.value));
        }
    }
    if (first.kind == CollectiveKind::kAllReduce && first.moves_data) {
      const Op* a = ops.front();
      const Buffer& ba = plan.buffer(a->collective()->inout.buffer);
      for (const Op* op : ops) {
        const Buffer& bo = plan.buffer(op->collective()->inout.buffer);
        if (op->collective()->inout.rows != a->collective()->inout.rows || bo.cols != ba.cols)
          out.push_back(fmt::format("collective {} ({}): all-reduce views differ in shape", id, op->name));
      }
    }
    if ((first.kind == CollectiveKind::kBroadcast || first.kind == CollectiveKind::kReduce) &&
        !std::binary_search(group.begin(), group.end(), first.root))
      out.push_back(fmt::format("collective {} ({}): root {} is not in the group", id, ops.front()->name, first.root.value));
  }
}

}  // namespace

std::vector<std::string> check_plan(const Plan& plan) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < plan.streams.size(); ++i)
    if (plan.streams[i].id.value != static_cast<std::int32_t>(i)) out.push_back(fmt::format("stream {} has id {}", i, plan.streams[i].id.value));
  for (std::size_t i = 0; i < plan.buffers.size(); ++i)
    if (plan.buffers[i].id.value != static_cast<std::int64_t>(i)) out.push_back(fmt::format("buffer {} has id {}", i, plan.buffers[i].id.value));
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    if (op.id.value != static_cast<std::int64_t>(i)) out.push_back(fmt::format("op {} has id {}", i, op.id.value));
    if (op.stream.value < 0 || op.stream.value >= static_cast<std::int32_t>(plan.streams.size()) ||
        plan.stream(op.stream).rank != op.rank)
      out.push_back(fmt::format("op {} ({}): stream {} is not a stream of rank {}", i, op.name, op.stream.value, op.rank.value));
    for (OpId d : op.deps)
      if (d.value < 0 || d.value >= static_cast<std::int64_t>(i))
        out.push_back(fmt::format("op {} ({}): dependency {} is not an earlier op", i, op.name, d.value));
    for (const auto& acc : op.buffers) {
      if (acc.buffer.value < 0 || acc.buffer.value >= static_cast<std::int64_t>(plan.buffers.size())) {
        out.push_back(fmt::format("op {} ({}): touches buffer {} that does not exist", i, op.name, acc.buffer.value));
        continue;
      }
      if (plan.buffer(acc.buffer).rank != op.rank)
        out.push_back(fmt::format("op {} ({}): touches buffer {} of rank {}", i, op.name,
                                  plan.buffer(acc.buffer).name, plan.buffer(acc.buffer).rank.value));
    }
    std::visit(
        [&](const auto& d) {
          using T = std::decay_t<decltype(d)>;
          if constexpr (std::is_same_v<T, Collective>) {
            for (const auto& s : d.sends) check_view(plan, op, s.view, "send", out);
            for (const auto& r : d.recvs) check_view(plan, op, r.view, "recv", out);
            if (d.kind == CollectiveKind::kAllReduce) check_view(plan, op, d.inout, "all-reduce view", out);
          } else if constexpr (std::is_same_v<T, Copy>) {
            check_view(plan, op, d.src, "copy source", out);
            check_view(plan, op, d.dst, "copy destination", out);
            if (d.src.rows != d.dst.rows || plan.buffer(d.src.buffer).cols != plan.buffer(d.dst.buffer).cols)
              out.push_back(fmt::format("op {} ({}): copy between different shapes", i, op.name));
          } else if constexpr (std::is_same_v<T, Permute>) {
            check_view(plan, op, d.x, "permute input", out);
            check_view(plan, op, d.out, "permute output", out);
            if (d.out.rows != d.layout.total_rows())
              out.push_back(fmt::format("op {} ({}): permute output has {} rows, layout {}", i, op.name, d.out.rows, d.layout.total_rows()));
          } else if constexpr (std::is_same_v<T, FfnForward> || std::is_same_v<T, FfnBackward> ||
                               std::is_same_v<T, FfnRecompute>) {
            const Buffer& in = plan.buffer(d.input);
            for (const auto& r : d.rows)
              if (r.begin < 0 || r.count < 0 || r.begin + r.count > in.rows)
                out.push_back(fmt::format("op {} ({}): rows [{}, {}) outside {} rows", i, op.name, r.begin, r.begin + r.count, in.rows));
          }
        },
        op.data);
  }
  check_collectives(plan, out);

  // Allocation and release (rule 5).
  struct Life {
    std::vector<std::int64_t> touch, alloc, free;
  };
  std::vector<Life> life(plan.buffers.size());
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    for (const auto& acc : op.buffers)
      if (acc.buffer.value >= 0 && acc.buffer.value < static_cast<std::int64_t>(plan.buffers.size()))
        life[static_cast<std::size_t>(acc.buffer.value)].touch.push_back(static_cast<std::int64_t>(i));
    for (BufferId b : op.alloc_before) life[static_cast<std::size_t>(b.value)].alloc.push_back(static_cast<std::int64_t>(i));
    for (BufferId b : op.free_after) life[static_cast<std::size_t>(b.value)].free.push_back(static_cast<std::int64_t>(i));
  }
  Reach reach(plan);
  for (std::size_t bi = 0; bi < plan.buffers.size(); ++bi) {
    const Buffer& b = plan.buffers[bi];
    const Life& l = life[bi];
    if (b.persistent) {
      if (!l.alloc.empty() || !l.free.empty())
        out.push_back(fmt::format("persistent buffer {} is allocated or freed by an op", b.name));
      continue;
    }
    if (l.touch.empty() && l.alloc.empty() && l.free.empty()) continue;
    if (l.alloc.size() != 1 || l.free.size() != 1) {
      out.push_back(fmt::format("buffer {} (rank {}) is allocated {} times and freed {} times", b.name, b.rank.value,
                                l.alloc.size(), l.free.size()));
      continue;
    }
    const std::int64_t a = l.alloc.front(), f = l.free.front();
    reach.mark_descendants(a, f);
    for (std::int64_t t : l.touch)
      if (!reach.marked(t))
        out.push_back(fmt::format("buffer {} (rank {}): op {} ({}) touches it without following its allocation by op {}",
                                  b.name, b.rank.value, t, plan.ops[static_cast<std::size_t>(t)].name, a));
    if (!reach.marked(f))
      out.push_back(fmt::format("buffer {} (rank {}) is freed by op {} that does not follow its allocation", b.name, b.rank.value, f));
    reach.mark_ancestors(f, a);
    for (std::int64_t t : l.touch)
      if (!reach.marked(t))
        out.push_back(fmt::format("buffer {} (rank {}): op {} ({}) touches it without preceding its release by op {}",
                                  b.name, b.rank.value, t, plan.ops[static_cast<std::size_t>(t)].name, f));
  }

  // Data hazards (rule 6): each access must follow the buffer's previous
  // write, and each write every read since that write. By transitivity every
  // pair of conflicting accesses is then ordered.
  struct Hazard {
    std::int64_t last_write = -1;
    std::vector<std::int64_t> reads;
  };
  std::vector<Hazard> hz(plan.buffers.size());
  std::size_t races = 0;
  for (std::size_t i = 0; i < plan.ops.size() && races < 20; ++i) {
    const Op& op = plan.ops[i];
    const auto me = static_cast<std::int64_t>(i);
    for (const auto& acc : op.buffers) {
      if (acc.buffer.value < 0 || acc.buffer.value >= static_cast<std::int64_t>(plan.buffers.size())) continue;
      Hazard& h = hz[static_cast<std::size_t>(acc.buffer.value)];
      auto require = [&](std::int64_t before, const char* what) {
        if (before < 0 || reach.precedes(before, me)) return;
        ++races;
        out.push_back(fmt::format("race on buffer {} (rank {}): op {} ({}) {} op {} ({}) without being ordered after it",
                                  plan.buffer(acc.buffer).name, op.rank.value, i, op.name, what, before,
                                  plan.ops[static_cast<std::size_t>(before)].name));
      };
      require(h.last_write, "accesses what was written by");
      if (acc.access == schema::Access::kRead) {
        h.reads.push_back(me);
      } else {
        for (std::int64_t r : h.reads) require(r, "overwrites what is read by");
        h.last_write = me;
        h.reads.clear();
      }
    }
  }
  return out;
}

void validate_plan(const Plan& plan) {
  const auto problems = check_plan(plan);
  if (!problems.empty())
    throw Error(fmt::format("plan {}: {} ({} problems)", plan.variant, problems.front(), problems.size()));
}

std::int64_t issue_order_peak_bytes(const Plan& plan, RankId rank,
                                    const std::function<bool(const Buffer&)>& filter) {
  std::int64_t live = 0;
  for (const Buffer& b : plan.buffers)
    if (b.persistent && b.rank == rank && filter(b)) live += b.bytes();
  std::int64_t peak = live;
  for (const Op& op : plan.ops) {
    for (BufferId id : op.alloc_before) {
      const Buffer& b = plan.buffer(id);
      if (b.rank == rank && filter(b)) live += b.bytes();
    }
    peak = std::max(peak, live);
    for (BufferId id : op.free_after) {
      const Buffer& b = plan.buffer(id);
      if (b.rank == rank && filter(b)) live -= b.bytes();
    }
  }
  return peak;
}

}  // namespace moetrace::plan
