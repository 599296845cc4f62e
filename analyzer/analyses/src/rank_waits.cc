#include "moetrace/analyzer/rank_waits.h"

#include <algorithm>
#include <map>

#include "moetrace/analyzer/clock_align.h"

namespace moetrace::analyzer {
namespace {

RankWait& slot(std::map<std::int32_t, RankWait>& m, std::int32_t rank) {
  auto& w = m[rank];
  w.rank = rank;
  return w;
}

std::vector<RankWait> sorted(const std::map<std::int32_t, RankWait>& m) {
  std::vector<RankWait> v;
  for (const auto& [r, w] : m) v.push_back(w);
  return v;
}

}  // namespace

RankWaitAnalysis compute_rank_waits(const Trace& trace) { return compute_rank_waits(collective_calls(trace)); }

RankWaitAnalysis compute_rank_waits(const std::vector<CollectiveCall>& calls) {
  RankWaitAnalysis out;
  std::map<std::int32_t, std::map<std::int32_t, RankWait>> by_layer;
  std::map<std::int32_t, std::int64_t> layer_instances;
  std::map<std::int32_t, RankWait> total;
  for (std::size_t i = 0; i < calls.size();) {
    std::size_t j = i;
    while (j < calls.size() && calls[j].key == calls[i].key) ++j;
    if (j - i >= 2) {
      out.has_collectives = true;
      // The instance's layer: its participants agree unless keys collided.
      const std::int32_t layer = calls[i].layer;
      std::size_t last = i;
      std::int64_t second = INT64_MIN;
      for (std::size_t k = i + 1; k < j; ++k)
        if (calls[k].ready_ns > calls[last].ready_ns) last = k;
      for (std::size_t k = i; k < j; ++k)
        if (k != last) second = std::max(second, calls[k].ready_ns);
      const std::int64_t latest = calls[last].ready_ns;
      auto& ranks = by_layer[layer];
      ++layer_instances[layer];
      for (std::size_t k = i; k < j; ++k) {
        const std::int64_t wait = latest - calls[k].ready_ns;
        for (auto* w : {&slot(ranks, calls[k].rank), &slot(total, calls[k].rank)}) {
          ++w->instances;
          w->wait_ns += wait;
          if (k == last && latest > second) {
            ++w->last;
            w->held_up_ns += latest - second;
          }
        }
      }
    }
    i = j;
  }
  for (auto& [layer, ranks] : by_layer) {
    LayerWaits l;
    l.layer = layer;
    l.instances = layer_instances[layer];
    l.ranks = sorted(ranks);
    for (const auto& w : l.ranks) {
      l.wait_ns += w.wait_ns;
      if (w.held_up_ns > l.holding_ns) {
        l.holding_ns = w.held_up_ns;
        l.holding_rank = w.rank;
        l.holding_last = w.last;
      }
    }
    out.layers.push_back(std::move(l));
  }
  out.ranks = sorted(total);
  return out;
}

}  // namespace moetrace::analyzer
