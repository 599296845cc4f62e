#include "moetrace/analyzer/kernel_sequences.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "moetrace/schema/error.h"
#include "moetrace/schema/schema.h"

namespace moetrace::analyzer {

namespace {

// The PyTorch profiler's (libkineto's) words for CUPTI's copy and memory kinds.
std::string_view kineto_copy_kind(std::uint8_t k) {
  const auto name = schema::copy_kind_abbreviation(static_cast<schema::CopyKind>(k));
  return name.empty() ? "<unknown>" : name;
}

std::string_view kineto_memory_kind(std::uint8_t k) {
  const auto name = schema::kineto_memory_kind_name(static_cast<schema::MemoryKind>(k));
  return name.empty() ? "Unknown" : name;
}

// A CPU event of the rank in the call stacks: a range or a runtime call.
struct Node {
  std::int64_t start = 0, end = 0, thread = 0;
  std::int32_t index = 0;  // into Trace::nvtx (range) or Trace::api_calls
  bool range = false;
  std::int32_t parent = -1;  // into the rank's nodes
  std::int32_t depth = -1;
};

// Enclosing order on one thread: by start, the longer first, a range before
// a call of the same times (the call is made inside the range).
bool stack_order(const Node& a, const Node& b) {
  return std::tuple(a.start, -a.end, !a.range, a.index) < std::tuple(b.start, -b.end, !b.range, b.index);
}

// Whether `outer` (opened before `inner` in stack order) still encloses it.
// A zero-length event at another's end is inside it, as HTA orders them.
bool encloses(const Node& outer, const Node& inner) {
  if (outer.end > inner.start) return true;
  return outer.end == inner.start && inner.end == inner.start && outer.end > outer.start;
}

class CallStacks {
 public:
  CallStacks(const Trace& t, RankId rank) : t_(t) {
    for (std::size_t i = 0; i < t.nvtx.size(); ++i) {
      const auto& n = t.nvtx[i];
      if (n.rank == rank && n.end_ns >= n.start_ns)
        nodes_.push_back({n.start_ns, n.end_ns, n.thread_id, static_cast<std::int32_t>(i), true});
    }
    for (std::size_t i = 0; i < t.api_calls.size(); ++i) {
      const auto& c = t.api_calls[i];
      if (c.rank == rank)
        nodes_.push_back({c.start_ns, std::max(c.end_ns, c.start_ns), c.thread_id, static_cast<std::int32_t>(i), false});
    }
    std::sort(nodes_.begin(), nodes_.end(), [](const Node& a, const Node& b) {
      return a.thread != b.thread ? a.thread < b.thread : stack_order(a, b);
    });
    std::vector<std::int32_t> stack;
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (i > 0 && nodes_[i].thread != nodes_[i - 1].thread) stack.clear();
      while (!stack.empty() && !encloses(nodes_[static_cast<std::size_t>(stack.back())], nodes_[i])) stack.pop_back();
      nodes_[i].parent = stack.empty() ? -1 : stack.back();
      stack.push_back(static_cast<std::int32_t>(i));
    }
    linked_ = link_backward_thread();
    for (std::size_t i = 0; i < nodes_.size(); ++i) depth(static_cast<std::int32_t>(i));
  }

  const std::vector<Node>& nodes() const { return nodes_; }
  bool backward_linked() const { return linked_; }
  std::string_view name(const Node& n) const {
    return n.range ? t_.str(t_.nvtx[static_cast<std::size_t>(n.index)].name)
                   : t_.str(t_.api_calls[static_cast<std::size_t>(n.index)].name);
  }
  // The ancestor of node `i` at `depth` (itself where it is that deep); -1: none.
  std::int32_t ancestor_at(std::int32_t i, std::int32_t depth) const {
    while (i >= 0 && nodes_[static_cast<std::size_t>(i)].depth > depth) i = nodes_[static_cast<std::size_t>(i)].parent;
    return i >= 0 && nodes_[static_cast<std::size_t>(i)].depth == depth ? i : -1;
  }

 private:
  std::int32_t depth(std::int32_t i) {
    auto& n = nodes_[static_cast<std::size_t>(i)];
    if (n.depth < 0) n.depth = n.parent < 0 ? 0 : depth(n.parent) + 1;
    return n.depth;
  }

  // HTA's CallGraph._connect_stacks: the one thread with ProfilerStep#
  // ranges (main) and the one other thread with autograd:: ranges (bwd).
  bool link_backward_thread() {
    std::set<std::int64_t> main, bwd;
    for (const auto& n : nodes_)
      if (n.range && name(n).starts_with("ProfilerStep#")) main.insert(n.thread);
    for (const auto& n : nodes_)
      if (n.range && !main.contains(n.thread) && name(n).find("autograd::") != std::string_view::npos)
        bwd.insert(n.thread);
    if (main.size() != 1 || bwd.size() != 1) return false;
    const auto main_thread = *main.begin(), bwd_thread = *bwd.begin();
    // The parents: the main thread's "## backward ##" ranges, else its steps.
    std::vector<std::int32_t> parents;
    for (const char* prefix : {"## backward ##", "ProfilerStep#"}) {
      for (std::size_t i = 0; i < nodes_.size(); ++i)
        if (nodes_[i].thread == main_thread && nodes_[i].range && name(nodes_[i]).starts_with(prefix))
          parents.push_back(static_cast<std::int32_t>(i));
      if (!parents.empty()) break;
    }
    bool linked = false;
    for (const auto p : parents) {
      const auto& parent = nodes_[static_cast<std::size_t>(p)];
      for (auto& n : nodes_)
        if (n.thread == bwd_thread && n.parent < 0 && n.start >= parent.start && n.end <= parent.end) {
          n.parent = p;
          linked = true;
        }
    }
    return linked;
  }

  const Trace& t_;
  std::vector<Node> nodes_;
  bool linked_ = false;
};


}  // namespace

std::string KernelSequence::pattern() const {
  std::string p = op;
  for (const auto& k : kernels) p.append("|").append(k);
  return p;
}

std::string gpu_event_pattern_name(const Trace& trace, const Activity& a) {
  switch (a.type) {
    case ActivityType::kMemcpy:
      return fmt::format("Memcpy {} ({} -> {})", kineto_copy_kind(a.copy_kind), kineto_memory_kind(a.src_kind),
                         kineto_memory_kind(a.dst_kind));
    case ActivityType::kMemset: return "Memset (Device)";
    case ActivityType::kKernel: break;
  }
  return std::string(trace.str(a.name));
}

std::int32_t kernel_sequence_rank(const Trace& t, const KernelSequenceOptions& o) {
  const auto ranks = t.rank_ids();
  if (o.rank) {
    if (std::find(ranks.begin(), ranks.end(), RankId(*o.rank)) == ranks.end()) {
      std::string have;
      for (const auto r : ranks) have += (have.empty() ? "" : ", ") + std::to_string(r.value);
      throw ConfigError(fmt::format("kernel sequences: rank {} is not in the trace (its ranks: {})", *o.rank,
                                    have.empty() ? std::string("none") : have));
    }
    return *o.rank;
  }
  if (ranks.empty()) return -1;
  return std::find(ranks.begin(), ranks.end(), RankId(0)) != ranks.end() ? 0 : ranks.front().value;
}

KernelSequenceAnalysis frequent_kernel_sequences(const Trace& trace, const KernelSequenceOptions& options) {
  if (options.operator_name.empty()) throw ConfigError("kernel sequences: the operator name is empty");
  if (options.min_pattern_len < 0)
    throw ConfigError(fmt::format("kernel sequences: min_pattern_len {} is negative", options.min_pattern_len));
  KernelSequenceAnalysis out;
  out.options = options;
  out.rank = kernel_sequence_rank(trace, options);
  if (out.rank < 0) return out;
  const RankId rank(out.rank);
  const CallStacks stacks(trace, rank);
  out.backward_linked = stacks.backward_linked();
  const auto& nodes = stacks.nodes();

  std::vector<std::int32_t> candidates;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].range && stacks.name(nodes[i]).find(options.operator_name) != std::string_view::npos)
      candidates.push_back(static_cast<std::int32_t>(i));
  out.candidates = static_cast<std::int64_t>(candidates.size());
  if (candidates.empty()) return out;
  out.depth = INT32_MAX;
  for (const auto c : candidates) out.depth = std::min(out.depth, nodes[static_cast<std::size_t>(c)].depth);
  std::map<std::int32_t, std::vector<std::size_t>> events;  // root node -> its GPU events (activity indices)
  for (const auto c : candidates)
    if (nodes[static_cast<std::size_t>(c)].depth == out.depth) events[c];
  out.roots = static_cast<std::int64_t>(events.size());

  // Each GPU event of the rank to the root above its launching call.
  std::vector<std::int32_t> node_of_call(trace.api_calls.size(), -1);
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (!nodes[i].range) node_of_call[static_cast<std::size_t>(nodes[i].index)] = static_cast<std::int32_t>(i);
  const ProfilerSteps steps = options.window == RankWindow::kSpan ? ProfilerSteps() : ProfilerSteps(trace);
  for (std::size_t i = 0; i < trace.activities.size(); ++i) {
    const auto& a = trace.activities[i];
    if (a.rank != rank) continue;
    const ApiCall* call = trace.launching_call(a);
    if (!call || !steps.keeps(out.rank, call->start_ns, options.window)) continue;
    const auto node = node_of_call[static_cast<std::size_t>(call - trace.api_calls.data())];
    const auto root = stacks.ancestor_at(node, out.depth);
    if (const auto it = events.find(root); it != events.end()) it->second.push_back(i);
  }

  struct Acc {
    std::int64_t count = 0, gpu_ns = 0, cpu_ns = 0;
  };
  std::map<std::vector<std::string>, Acc> patterns;  // op name, then the events' names
  for (auto& [root, acts] : events) {
    if (acts.size() < static_cast<std::size_t>(options.min_pattern_len)) {
      ++out.short_roots;
      continue;
    }
    std::sort(acts.begin(), acts.end(), [&](std::size_t x, std::size_t y) {
      const auto& a = trace.activities[x];
      const auto& b = trace.activities[y];
      return std::tuple(a.start_ns, a.launched_by, a.stream, x) < std::tuple(b.start_ns, b.launched_by, b.stream, y);
    });
    const auto& r = nodes[static_cast<std::size_t>(root)];
    std::vector<std::string> key{std::string(stacks.name(r))};
    Acc add{1, 0, r.end - r.start};
    for (const auto i : acts) {
      key.push_back(gpu_event_pattern_name(trace, trace.activities[i]));
      add.gpu_ns += trace.activities[i].duration();
    }
    auto& acc = patterns[std::move(key)];
    acc.count += add.count;
    acc.gpu_ns += add.gpu_ns;
    acc.cpu_ns += add.cpu_ns;
  }
  out.patterns = static_cast<std::int64_t>(patterns.size());
  std::vector<std::pair<std::string, KernelSequence>> sorted;  // (HTA's pattern, sequence)
  for (auto& [key, acc] : patterns) {
    KernelSequence s;
    s.op = key.front();
    s.kernels.assign(key.begin() + 1, key.end());
    s.count = acc.count;
    s.gpu_kernel_duration_ns = acc.gpu_ns;
    s.cpu_op_duration_ns = acc.cpu_ns;
    sorted.emplace_back(s.pattern(), std::move(s));
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second.count != b.second.count ? a.second.count > b.second.count : a.first < b.first;
  });
  if (options.top_k > 0 && sorted.size() > options.top_k) sorted.resize(options.top_k);
  for (auto& [pattern, s] : sorted) out.sequences.push_back(std::move(s));
  return out;
}

}  // namespace moetrace::analyzer
