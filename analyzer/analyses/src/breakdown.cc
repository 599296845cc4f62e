#include "moetrace/analyzer/breakdown.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <tuple>

#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/interval.h"
#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/name_memo.h"
#include "op_intervals.h"

namespace moetrace::analyzer {

TimeSplit& TimeSplit::operator+=(const TimeSplit& o) {
  window_ns += o.window_ns;
  for (int c = 0; c < kNumCategories; ++c) {
    category_ns[static_cast<std::size_t>(c)] += o.category_ns[static_cast<std::size_t>(c)];
    exclusive_ns[static_cast<std::size_t>(c)] += o.exclusive_ns[static_cast<std::size_t>(c)];
  }
  busy_ns += o.busy_ns;
  idle_ns += o.idle_ns;
  comm_ns += o.comm_ns;
  comm_hidden_ns += o.comm_hidden_ns;
  comm_exposed_ns += o.comm_exposed_ns;
  overlap_ns += o.overlap_ns;
  return *this;
}

namespace {

struct RankSets {
  IntervalSet compute;  // computation of any op or unattributed kernel
  IntervalSet all;      // anything at all
};

// Fills `t` from the given ops within the window set `windows`.
// Only what lies inside the windows counts, so that every share of a window
// is at most 1 (an iteration's windows partition the rank's time; its work
// may run on past its window's end, into the next one's).
void split_time(const Trace& trace, const OpIntervals& oi, const std::vector<std::uint32_t>& ops,
                const IntervalSet& windows, const RankSets& rank, TimeSplit& t) {
  std::vector<LabelledInterval> labelled;
  std::vector<Interval> comm;
  const auto ws = windows.intervals();
  for (auto o : ops) {
    const auto c = op_category(trace.ops[o].kind);
    for (const auto i : oi.of(o)) {
      // The windows are sorted and disjoint: the pieces of i inside them.
      auto w = std::upper_bound(ws.begin(), ws.end(), i.start, [](std::int64_t x, const Interval& v) { return x < v.end; });
      for (; w != ws.end() && w->start < i.end; ++w) {
        const Interval piece{std::max(i.start, w->start), std::min(i.end, w->end)};
        if (piece.end <= piece.start) continue;
        labelled.push_back({piece.start, piece.end, static_cast<std::uint32_t>(c)});
        if (is_communication(c)) comm.push_back(piece);
      }
    }
  }
  const auto cov = Coverage::sweep(std::move(labelled));
  t.window_ns = windows.length();
  for (int c = 0; c < kNumCategories; ++c) {
    t.category_ns[static_cast<std::size_t>(c)] = cov.active(static_cast<std::uint32_t>(c));
    t.exclusive_ns[static_cast<std::size_t>(c)] = cov.exclusive(static_cast<std::uint32_t>(c));
  }
  t.busy_ns = cov.any(~0u);
  const auto comm_set = IntervalSet::from(std::move(comm));
  t.comm_ns = comm_set.length();
  t.comm_hidden_ns = comm_set.intersect(rank.compute).length();
  t.comm_exposed_ns = t.comm_ns - t.comm_hidden_ns;
  t.idle_ns = windows.subtract(rank.all).length();
}

Interval envelope(const OpIntervals& oi, const std::vector<std::uint32_t>& ops) {
  Interval e{INT64_MAX, INT64_MIN};
  for (auto o : ops)
    for (const auto i : oi.of(o)) {
      e.start = std::min(e.start, i.start);
      e.end = std::max(e.end, i.end);
    }
  return e.start <= e.end ? e : Interval{};
}

// A rank's GPU time: every op's intervals labelled with its category, and
// the activity no op claims, classified (one interval per activity, and one
// per op without any).
struct RankTime {
  std::vector<LabelledInterval> labelled;
  std::vector<Interval> unattributed;
};

RankTime rank_time(const Trace& trace, const OpIntervals& oi, const RankRows& rows, std::size_t slot) {
  RankTime rt;
  std::size_t n = 0, unattributed = 0;
  for (const auto o : rows.ops(slot)) n += oi.of(o).size();
  for (const auto a : rows.activities(slot)) unattributed += trace.activities[a].op < 0 ? 1 : 0;
  rt.labelled.reserve(n + unattributed);
  rt.unattributed.reserve(unattributed);
  for (const auto o : rows.ops(slot)) {
    const auto c = static_cast<std::uint32_t>(op_category(trace.ops[o].kind));
    for (const auto i : oi.of(o)) rt.labelled.push_back({i.start, i.end, c});
  }
  for (const auto i : rows.activities(slot)) {
    const auto& a = trace.activities[i];
    if (a.op >= 0) continue;
    rt.labelled.push_back({a.start_ns, a.end_ns, static_cast<std::uint32_t>(classify_activity(trace, a))});
    rt.unattributed.push_back({a.start_ns, a.end_ns});
  }
  return rt;
}

// The GPU work of a rank's profiler steps, without its last step where
// `but_last`. Where the rank records two or more ProfilerStep ranges (PyTorch
// profiler traces), as HTA selects it (hta/common/trace.py,
// _filter_irrelevant_gpu_kernels): the activities whose launching call
// started before the last step's start (but_last), or from the first
// step's start to the last one's end; an activity without a launching call
// belongs to no step. Otherwise by the op's iteration: the ops of the
// iterations (iteration >= 0), without the rank's last one (but_last);
// activity no op claims belongs to no step.
RankTime rank_time_in_steps(const Trace& trace, const OpIntervals& oi, const RankRows& rows, std::size_t slot,
                            const ProfilerSteps& steps, bool but_last) {
  RankTime rt;
  const auto rank = rows.rank(slot);
  if (steps.has_steps(rank)) {
    const RankWindow window = but_last ? RankWindow::kStepsButLast : RankWindow::kSteps;
    for (const auto i : rows.activities(slot)) {
      const auto& a = trace.activities[i];
      const ApiCall* call = trace.launching_call(a);
      if (!call || !steps.keeps(rank, call->start_ns, window)) continue;
      const auto c = a.op >= 0 ? op_category(trace.ops[static_cast<std::size_t>(a.op)].kind) : classify_activity(trace, a);
      rt.labelled.push_back({a.start_ns, a.end_ns, static_cast<std::uint32_t>(c)});
    }
    return rt;
  }
  std::int32_t last = 0;  // the rank's last iteration
  for (const auto o : rows.ops(slot)) last = std::max(last, trace.ops[o].iteration);
  for (const auto o : rows.ops(slot)) {
    const auto& op = trace.ops[o];
    if (op.iteration < 0 || (but_last && op.iteration == last)) continue;
    const auto c = static_cast<std::uint32_t>(op_category(op.kind));
    for (const auto i : oi.of(o)) rt.labelled.push_back({i.start, i.end, c});
  }
  return rt;
}

}  // namespace

ProfilerSteps::ProfilerSteps(const Trace& trace) {
  NameMemo is_step(trace, [](std::string_view name) { return name.find("ProfilerStep") != std::string_view::npos; });
  for (const auto& n : trace.nvtx)
    if (is_step.of(n.name)) {
      auto& s = steps_[n.rank.value];
      ++s.count;
      s.first_start = std::min(s.first_start, n.start_ns);
      s.last_start = std::max(s.last_start, n.start_ns);
      s.last_end = std::max(s.last_end, n.end_ns);
    }
  std::erase_if(steps_, [](const auto& kv) { return kv.second.count < 2; });
}

bool ProfilerSteps::keeps(std::int32_t rank, std::int64_t start_ns, RankWindow window) const {
  const auto it = steps_.find(rank);
  if (window == RankWindow::kSpan || it == steps_.end()) return true;
  const Steps& s = it->second;
  return window == RankWindow::kStepsButLast || window == RankWindow::kHta ? start_ns < s.last_start
                                             : start_ns >= s.first_start && start_ns <= s.last_end;
}

namespace {

// The first start to the last end of a rank's non-empty intervals.
Interval span_of(const RankTime& rt) {
  Interval e{INT64_MAX, INT64_MIN};
  for (const auto& l : rt.labelled)
    if (l.end > l.start) {
      e.start = std::min(e.start, l.start);
      e.end = std::max(e.end, l.end);
    }
  return e.start <= e.end ? e : Interval{};
}

// The split of a rank's time clipped to `w`; `sets` gets the rank's
// computation and all of its time in the window. The rank's intervals are
// clipped in place, then swept (no copy of them beside), and the sets'
// arrays sized once, counted first (grown interval by interval, each was
// copied at every doubling).
RankSummary rank_split(std::int32_t rank, RankTime rt, Interval w, RankSets& sets) {
  RankSummary rs;
  rs.rank = rank;
  auto clip = [&](std::int64_t s, std::int64_t e) { return Interval{std::max(s, w.start), std::min(e, w.end)}; };
  std::size_t kept = 0, computation = 0, communication = 0;
  auto& clipped = rt.labelled;
  for (const auto& l : rt.labelled) {
    if (l.start <= w.end && l.end >= w.start) ++rs.events;
    const auto i = clip(l.start, l.end);
    if (i.end <= i.start) continue;
    const auto c = static_cast<Category>(l.label);
    clipped[kept++] = {i.start, i.end, l.label};
    computation += is_computation(c) ? 1 : 0;
    communication += is_communication(c) ? 1 : 0;
  }
  clipped.resize(kept);
  // The rank's sets, each merged before the next is made, then the sweep:
  // the sets' arrays (16 bytes an interval each, fewer once merged) and the
  // sweep's (32) never all at once beside the intervals.
  auto set_of = [&](std::size_t count, auto keep) {
    std::vector<Interval> v;
    v.reserve(count);
    for (const auto& l : clipped)
      if (keep(static_cast<Category>(l.label))) v.push_back({l.start, l.end});
    return IntervalSet::from(std::move(v));
  };
  sets.all = set_of(kept, [](Category) { return true; });
  sets.compute = set_of(computation, is_computation);
  const auto comm_set = set_of(communication, is_communication);
  std::vector<Interval> unattributed;
  unattributed.reserve(rt.unattributed.size());
  for (const auto& u : rt.unattributed) unattributed.push_back(clip(u.start, u.end));
  std::vector<Interval>().swap(rt.unattributed);
  const auto cov = Coverage::sweep(std::move(clipped));
  rs.t.window_ns = w.length();
  for (int c = 0; c < kNumCategories; ++c) {
    rs.t.category_ns[static_cast<std::size_t>(c)] = cov.active(static_cast<std::uint32_t>(c));
    rs.t.exclusive_ns[static_cast<std::size_t>(c)] = cov.exclusive(static_cast<std::uint32_t>(c));
  }
  rs.t.busy_ns = sets.all.length();
  rs.t.idle_ns = rs.t.window_ns - rs.t.busy_ns;
  rs.t.comm_ns = comm_set.length();
  rs.t.comm_hidden_ns = comm_set.intersect(sets.compute).length();
  rs.t.comm_exposed_ns = rs.t.comm_ns - rs.t.comm_hidden_ns;
  rs.unattributed_ns = IntervalSet::from(std::move(unattributed)).length();
  return rs;
}

void add_to(RankSummary& total, const RankSummary& r) {
  total.t += r.t;
  total.unattributed_ns += r.unattributed_ns;
  total.events += r.events;
}

// A rank's GPU intervals as the starts and ends of a sweep, each labelled
// with its MoE-layer row (-1: work of no row, or no op at all); the
// arrays kept from rank to rank (their pages faulted in once).
struct RowEdges {
  std::vector<LabelEdge> starts, ends;
};

// The rows of one rank (ranks.ops(slot)): its MoE-layer rows, iteration rows
// and layer windows appended to b, each in its own key order without the
// rank (compute_breakdown orders them across ranks); `sets` is the rank's
// computation and whole time (rank_split). One rank at a time, so that what
// groups the ops lives for one rank, not for every rank at once (a 10 M-event
// trace of 8 ranks: 122 k rows, 1.95 M ops).
void rank_rows(const Trace& trace, const OpIntervals& oi, const RankRows& ranks, std::size_t slot,
               const RankSets& sets, Breakdown& b, RowEdges& edges) {
  const auto rank = ranks.rank(slot);
  const auto rank_ops = ranks.ops(slot);
  // The ops by their place k in rank_ops: MoE-layer rows and iteration rows.
  std::map<std::tuple<std::int32_t, std::int32_t, Phase>, std::map<std::int32_t, std::vector<std::uint32_t>>>
      layer_ops;  // (layer, iteration, phase) -> micro-batch -> ops
  std::map<std::int32_t, std::vector<std::uint32_t>> iter_ops;  // iteration -> ops
  for (std::uint32_t k = 0; k < rank_ops.size(); ++k) {
    const auto& op = trace.ops[rank_ops[k]];
    if (op.iteration < 0) continue;
    iter_ops[op.iteration].push_back(k);
    if (op.layer >= 0 && op_kind_info(op.kind).moe_layer)
      layer_ops[{op.layer, op.iteration, op.phase}][op.micro_batch].push_back(k);
  }
  std::vector<std::uint32_t> ops;  // op indices of one row
  auto ops_of = [&](const std::vector<std::uint32_t>& places) -> const std::vector<std::uint32_t>& {
    ops.clear();
    for (const auto k : places) ops.push_back(rank_ops[k]);
    return ops;
  };

  // MoE-layer windows per iteration: their union is the iteration's MoE
  // time (layers can overlap, e.g. an offload of layer l running into layer
  // l+1, and must not be counted twice).
  std::map<std::int32_t, std::vector<Interval>> moe_windows_per_iter;
  // (layer, iteration) -> the windows of all its rows (phases).
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<Interval>> layer_windows;
  std::vector<std::int32_t> row_of(rank_ops.size(), -1);  // by place in rank_ops: its row in b.rows
  for (const auto& [key, by_mb] : layer_ops) {
    const auto& [layer, iteration, phase] = key;
    std::vector<Interval> windows;
    std::vector<std::uint32_t> row_ops;
    for (const auto& [mb, places] : by_mb) {
      windows.push_back(envelope(oi, ops_of(places)));
      row_ops.insert(row_ops.end(), ops.begin(), ops.end());
      for (const auto k : places) row_of[k] = static_cast<std::int32_t>(b.rows.size());
    }
    LayerRow row{rank, layer, iteration, phase, {}};
    auto window_set = IntervalSet::from(std::move(windows));
    auto& iter_windows = moe_windows_per_iter[iteration];
    auto& lw = layer_windows[{layer, iteration}];
    for (const auto& w : window_set.intervals()) {
      iter_windows.push_back(w);
      lw.push_back(w);
    }
    split_time(trace, oi, row_ops, window_set, sets, row.t);
    b.rows.push_back(row);
  }
  decltype(layer_ops)().swap(layer_ops);
  // Iteration windows partition the rank's time: iteration k's window runs
  // from the first GPU start of its work (never before the previous window's
  // start) to the next iteration's, the last one to its work's end. Work an
  // iteration launched counts to it, inside its window.
  std::vector<Interval> iter_window;  // in iter_ops' order
  {
    std::vector<Interval> envelopes;
    for (const auto& [iteration, places] : iter_ops) envelopes.push_back(envelope(oi, ops_of(places)));
    std::int64_t start = INT64_MIN;
    for (std::size_t k = 0; k < envelopes.size(); ++k) {
      const auto& e = envelopes[k];
      const bool empty = e.end <= e.start;
      start = std::max(start, empty ? start : e.start);
      std::int64_t end = empty ? start : e.end;
      if (k + 1 < envelopes.size()) {
        const auto& next = envelopes[k + 1];
        if (next.end > next.start) end = next.start;
      }
      if (start == INT64_MIN) start = end;
      end = std::max(end, start);
      iter_window.push_back({start, end});
      start = end;
    }
  }
  std::size_t k = 0;
  for (const auto& [iteration, places] : iter_ops) {
    const auto w = iter_window[k++];
    IterationRow row{rank, iteration, {},
                     IntervalSet::from(std::move(moe_windows_per_iter[iteration])).length_within(w)};
    split_time(trace, oi, ops_of(places), w.end > w.start ? IntervalSet::from({w}) : IntervalSet{}, sets, row.t);
    b.iterations.push_back(row);
  }
  for (const auto& [key, windows] : layer_windows)
    b.layer_windows.push_back({key.first, rank, key.second, IntervalSet::from(windows).length()});
  decltype(iter_ops)().swap(iter_ops);
  decltype(moe_windows_per_iter)().swap(moe_windows_per_iter);
  decltype(layer_windows)().swap(layer_windows);

  // Each row's overlap_ns: a sweep over every GPU interval of the rank
  // labelled with its row; in each stretch where two or more labels are
  // active, every active row's own work ran beside another's. The room of
  // each array reserved at once (one edge an interval): grown edge by edge,
  // it was copied and its fresh pages faulted in at each doubling.
  std::size_t bound = 0;
  for (const auto o : rank_ops) bound += oi.of(o).size();
  for (const auto a : ranks.activities(slot)) bound += trace.activities[a].op < 0 ? 1 : 0;
  reserve_huge_or_reuse(edges.starts, bound);
  reserve_huge_or_reuse(edges.ends, bound);
  auto add = [&](std::int64_t s, std::int64_t e, std::int32_t row) {
    if (e <= s) return;
    edges.starts.push_back({s, row});
    edges.ends.push_back({e, row});
  };
  for (std::size_t p = 0; p < rank_ops.size(); ++p)
    for (const auto i : oi.of(rank_ops[p])) add(i.start, i.end, row_of[p]);
  for (const auto i : ranks.activities(slot))
    if (const auto& a = trace.activities[i]; a.op < 0) add(a.start_ns, a.end_ns, -1);
  for_each_shared_stretch(edges.starts, edges.ends, [&](std::int32_t row, std::int64_t ns) {
    if (row >= 0) b.rows[static_cast<std::size_t>(row)].t.overlap_ns += ns;
  });
}

// v reordered by `less` (a strict order on its elements): the permutation
// sorted, then followed cycle by cycle, each element moved once (rows of a
// few hundred bytes, not swapped at every step of a sort).
template <class T, class Less>
void order_by(std::vector<T>& v, Less less) {
  std::vector<std::uint32_t> at(v.size());  // at[i]: the element that goes to place i
  for (std::uint32_t i = 0; i < at.size(); ++i) at[i] = i;
  std::sort(at.begin(), at.end(), [&](std::uint32_t x, std::uint32_t y) { return less(v[x], v[y]); });
  constexpr auto kDone = UINT32_MAX;
  for (std::size_t i = 0; i < at.size(); ++i) {
    if (at[i] == kDone || at[i] == i) continue;
    T held = std::move(v[i]);
    std::size_t place = i;
    while (at[place] != i) {
      const auto from = at[place];
      v[place] = std::move(v[from]);
      at[place] = kDone;
      place = from;
    }
    v[place] = std::move(held);
    at[place] = kDone;
  }
}

}  // namespace

WindowBreakdown breakdown_in_window(const Trace& trace, std::int64_t t0, std::int64_t t1) {
  WindowBreakdown out;
  out.t0_ns = std::min(t0, t1);
  out.t1_ns = std::max(t0, t1);
  out.total.rank = -1;
  const OpIntervals oi(trace);
  const RankRows rows(trace);
  for (std::size_t slot = 0; slot < rows.size(); ++slot) {
    RankSets sets;
    out.ranks.push_back(rank_split(rows.rank(slot), rank_time(trace, oi, rows, slot), {out.t0_ns, out.t1_ns}, sets));
    add_to(out.total, out.ranks.back());
  }
  return out;
}

std::string_view rank_window_name(RankWindow w) {
  switch (w) {
    case RankWindow::kSteps: return "steps";
    case RankWindow::kStepsButLast: return "steps-but-last";
    case RankWindow::kHta: return "hta";
    case RankWindow::kSpan: break;
  }
  return "span";
}

std::string rank_window_description(RankWindow w) {
  switch (w) {
    case RankWindow::kSteps:
      return "the GPU work of the profiler steps (iterations), from its first start to its last end on each rank";
    case RankWindow::kStepsButLast:
      return "the GPU work of the profiler steps (iterations) but the last, from its first start to its last end "
             "on each rank (HTA's default window)";
    case RankWindow::kHta:
      return "HTA's default window: on ranks with two or more ProfilerStep ranges, the GPU work launched before the "
             "last step's start; elsewhere the rank's whole span (HTA analyses a trace with fewer steps whole)";
    case RankWindow::kSpan: break;
  }
  return "each rank's whole span, from its first GPU start to its last GPU end";
}

std::optional<RankWindow> parse_rank_window(std::string_view name) {
  for (auto w : {RankWindow::kSpan, RankWindow::kSteps, RankWindow::kStepsButLast, RankWindow::kHta})
    if (rank_window_name(w) == name) return w;
  return std::nullopt;
}

namespace {

// The totals and the per-layer summaries of a breakdown's rows, iteration
// rows and layer windows.
void summarize(Breakdown& b) {
  b.moe_total = {};
  b.iteration_total = {};
  b.moe_union_ns = 0;
  for (const auto& row : b.rows) b.moe_total += row.t;
  for (const auto& row : b.iterations) {
    b.iteration_total += row.t;
    b.moe_union_ns += row.moe_layer_ns;
  }
  std::map<std::int32_t, LayerSummary> layers;
  for (const auto& row : b.rows) {
    auto& s = layers[row.layer];
    s.layer = row.layer;
    s.total += row.t;
    (is_backward(row.phase) ? s.backward : s.forward) += row.t;
  }
  // Windows by layer, in (rank, iteration) order.
  std::map<std::int32_t, std::vector<const Breakdown::LayerWindow*>> windows;
  for (const auto& w : b.layer_windows) windows[w.layer].push_back(&w);
  b.layers.clear();
  for (auto& [layer, s] : layers) {
    std::set<std::int32_t> ranks, iters;
    std::int64_t sum = 0;
    const auto& m = windows[layer];
    for (const auto* w : m) {
      sum += w->ns;
      ranks.insert(w->rank);
      iters.insert(w->iteration);
      if (w->ns > s.max_window_ns) {
        s.max_window_ns = w->ns;
        s.slowest_rank = w->rank;
      }
    }
    s.ranks = static_cast<int>(ranks.size());
    s.iterations = static_cast<int>(iters.size());
    s.mean_window_ns = m.empty() ? 0 : sum / static_cast<std::int64_t>(m.size());
    b.layers.push_back(s);
  }
}

}  // namespace

Breakdown merge_breakdowns(std::vector<Breakdown> parts) {
  Breakdown b;
  if (parts.empty()) return b;
  b.rank_window = parts.front().rank_window;
  for (auto& p : parts) {
    b.has_op_ranges = b.has_op_ranges || p.has_op_ranges;
    b.rows.insert(b.rows.end(), p.rows.begin(), p.rows.end());
    b.iterations.insert(b.iterations.end(), p.iterations.begin(), p.iterations.end());
    b.ranks.insert(b.ranks.end(), p.ranks.begin(), p.ranks.end());
    b.layer_windows.insert(b.layer_windows.end(), p.layer_windows.begin(), p.layer_windows.end());
    p = Breakdown();
  }
  std::stable_sort(b.rows.begin(), b.rows.end(), [](const LayerRow& x, const LayerRow& y) {
    return std::tie(x.layer, x.iteration, x.phase, x.rank) < std::tie(y.layer, y.iteration, y.phase, y.rank);
  });
  std::stable_sort(b.iterations.begin(), b.iterations.end(), [](const IterationRow& x, const IterationRow& y) {
    return std::tie(x.iteration, x.rank) < std::tie(y.iteration, y.rank);
  });
  std::stable_sort(b.ranks.begin(), b.ranks.end(),
                   [](const RankSummary& x, const RankSummary& y) { return x.rank < y.rank; });
  std::stable_sort(b.layer_windows.begin(), b.layer_windows.end(),
                   [](const Breakdown::LayerWindow& x, const Breakdown::LayerWindow& y) {
                     return std::tie(x.layer, x.rank, x.iteration) < std::tie(y.layer, y.rank, y.iteration);
                   });
  summarize(b);
  return b;
}

Breakdown compute_breakdown(const Trace& trace, const BreakdownOptions& options) {
  Breakdown b;
  b.has_op_ranges = !trace.ops.empty();
  b.rank_window = options.rank_window;
  const OpIntervals oi(trace);

  // Per rank: its whole-run split (works without op ranges too), and with
  // the rank-wide sets it gives, its MoE-layer and iteration rows.
  const RankRows rows(trace);
  RowEdges edges;
  for (std::size_t slot = 0; slot < rows.size(); ++slot) {
    RankSets sets;
    if (auto rt = rank_time(trace, oi, rows, slot); !rt.labelled.empty()) {
      const auto span = span_of(rt);
      b.ranks.push_back(rank_split(rows.rank(slot), std::move(rt), span, sets));
    }
    rank_rows(trace, oi, rows, slot, sets, b, edges);
  }
  edges = RowEdges();
  // Ordered across ranks, as the rows are read: by (layer, iteration, phase,
  // rank), iterations by (iteration, rank), windows by (layer, rank,
  // iteration); each key is one row's.
  order_by(b.rows, [](const LayerRow& x, const LayerRow& y) {
    return std::tie(x.layer, x.iteration, x.phase, x.rank) < std::tie(y.layer, y.iteration, y.phase, y.rank);
  });
  order_by(b.iterations, [](const IterationRow& x, const IterationRow& y) {
    return std::tie(x.iteration, x.rank) < std::tie(y.iteration, y.rank);
  });
  order_by(b.layer_windows, [](const Breakdown::LayerWindow& x, const Breakdown::LayerWindow& y) {
    return std::tie(x.layer, x.rank, x.iteration) < std::tie(y.layer, y.rank, y.iteration);
  });
  // Another window of the per-rank rows: the steps' work alone.
  if (options.rank_window != RankWindow::kSpan) {
    const ProfilerSteps steps(trace);
    // HTA's: ranks with profiler steps without the last; the others keep their span.
    const bool hta = options.rank_window == RankWindow::kHta;
    if (hta) std::erase_if(b.ranks, [&](const RankSummary& rs) { return steps.has_steps(rs.rank); });
    else b.ranks.clear();
    for (std::size_t slot = 0; slot < rows.size(); ++slot) {
      const auto r = rows.rank(slot);
      if (hta && !steps.has_steps(r)) continue;
      auto rt =
          rank_time_in_steps(trace, oi, rows, slot, steps, hta || options.rank_window == RankWindow::kStepsButLast);
      if (rt.labelled.empty()) continue;
      RankSets unused;
      const auto span = span_of(rt);
      b.ranks.push_back(rank_split(r, std::move(rt), span, unused));
    }
    if (hta)
      std::sort(b.ranks.begin(), b.ranks.end(),
                [](const RankSummary& x, const RankSummary& y) { return x.rank < y.rank; });
  }
  summarize(b);
  return b;
}

}  // namespace moetrace::analyzer
