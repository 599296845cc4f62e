// MoE recognition, pass 1b: implicit layer and chunk instances of schedule
// parts.
#include "moe_recognition_internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace moetrace::analyzer::recognition_detail {

// 1b. Implicit layer and chunk instances from the nesting of host ranges.
// Schedules that overlap the chunks of several micro-batches name the
// parts of an MoE block (dispatch(F), mlp(B), ...) but neither layer nor
// micro-batch; the functions that run them do nest (Python function and
// module ranges, recorded with with_stack=True). A part's implicit layer
// instance is its highest enclosing range (on its thread) that holds at
// most one part of each kind and phase; the range above that one is its
// chunk. Parts inside a recognised layer or micro-batch range keep those.
void Recognizer::infer_containers() {
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> parts_by_thread;
  for (const auto& c : contexts_)
    if (c.a.role == RangeRole::kOp && c.a.kind && op_kind_info(*c.a.kind).moe_layer && !c.process)
      parts_by_thread[{c.rank, c.thread}].push_back(c.index);
  if (parts_by_thread.empty()) return;
  // Parents of the host ranges on those threads: sorted by (start, longer
  // first), a stack of the open ranges; a range's parent is the innermost
  // open range that contains it.
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<std::size_t>> ranges_by_thread;
  for (std::size_t i = 0; i < t_.nvtx.size(); ++i) {
    const auto& r = t_.nvtx[i];
    const auto key = std::pair{r.rank.value, r.thread_id};
    if (parts_by_thread.count(key)) ranges_by_thread[key].push_back(i);
  }
  std::vector<std::size_t> parent(t_.nvtx.size(), SIZE_MAX);  // per range: the range enclosing it
  auto end = [&](std::size_t i) { return end_of(t_.nvtx[i]); };
  for (auto& [key, list] : ranges_by_thread) {
    std::sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) {
      const auto& a = t_.nvtx[x];
      const auto& b = t_.nvtx[y];
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : end(x) != end(y) ? end(x) > end(y) : x < y;
    });
    std::vector<std::size_t> open;
    for (auto i : list) {
      while (!open.empty() && end(open.back()) <= t_.nvtx[i].start_ns) open.pop_back();
      if (!open.empty() && end(open.back()) >= end(i)) parent[i] = open.back();
      open.push_back(i);
    }
  }
  // Parts under every range: how many, and whether two share a kind and phase.
  std::vector<int> parts_in(t_.nvtx.size(), 0);
  std::vector<char> repeated(t_.nvtx.size(), 0);
  std::unordered_map<std::uint64_t, int> of_key;  // (range, kind, phase) -> parts
  for (const auto& [thread, parts] : parts_by_thread)
    for (auto ci : parts) {
      const auto& c = contexts_[ci];
      const std::uint64_t key = static_cast<std::uint64_t>(*c.a.kind) * 8 + (c.a.phase ? static_cast<std::uint64_t>(*c.a.phase) + 1 : 0);
      for (auto up = parent[c.range]; up != SIZE_MAX; up = parent[up]) {
        ++parts_in[up];
        if (++of_key[static_cast<std::uint64_t>(up) * 1024 + key] > 1) repeated[up] = 1;
      }
    }
  auto unique = [&](std::size_t range) { return repeated[range] == 0; };
  std::vector<char> recognised(t_.nvtx.size(), 0);  // ranges that are contexts already
  std::vector<char> structural(t_.nvtx.size(), 0);  // ... of a layer or micro-batch
  std::vector<char> iteration(t_.nvtx.size(), 0);   // ... of an iteration
  for (const auto& c : contexts_) {
    recognised[c.range] = 1;
    if (c.a.role == RangeRole::kLayer || c.a.role == RangeRole::kMicroBatch) structural[c.range] = 1;
    if (c.a.role == RangeRole::kIteration) iteration[c.range] = 1;
  }
  std::set<std::size_t> layers, chunks;
  for (const auto& [thread, parts] : parts_by_thread)
    for (auto ci : parts) {
      const auto& c = contexts_[ci];
      // A part inside a recognised layer or micro-batch range keeps those:
      // no implicit container (above a module's range lies the training
      // step, whose other work is not the layer's).
      bool placed = false;
      for (auto up = parent[c.range]; up != SIZE_MAX && !placed; up = parent[up]) placed = structural[up] != 0;
      if (placed) continue;
      // The highest enclosing range with one part of each kind and phase,
      // below the iteration's range.
      std::size_t top = SIZE_MAX;
      for (auto up = parent[c.range]; up != SIZE_MAX && unique(up) && !iteration[up]; up = parent[up]) top = up;
      // A layer instance holds several parts (one alone is a wrapper of that part).
      if (top != SIZE_MAX && parts_in[top] >= 2 && !recognised[top]) {
        layers.insert(top);
        ++s_.layers_by_nesting;
      }
      const auto chunk = top == SIZE_MAX ? parent[c.range] : parent[top];
      if (chunk != SIZE_MAX && !recognised[chunk]) chunks.insert(chunk);
    }
  // They join the contexts as layer and micro-batch ranges without numbers.
  auto add = [&](std::size_t range, RangeRole role) {
    Context c = context_of(range);
    c.a.role = role;
    add_context(c);
  };
  for (auto r : layers) add(r, RangeRole::kLayer);
  for (auto r : chunks)
    if (!layers.count(r)) add(r, RangeRole::kMicroBatch);
}

}  // namespace moetrace::analyzer::recognition_detail
