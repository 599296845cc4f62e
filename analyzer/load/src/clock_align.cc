#include "moetrace/analyzer/clock_align.h"
#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/stats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include <fmt/format.h>


namespace moetrace::analyzer {
namespace {

std::uint64_t mix(std::uint64_t h, std::int64_t v) {
  std::uint64_t z = h ^ (static_cast<std::uint64_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool collective_category(Category c) { return c == Category::kAllToAll || c == Category::kAllReduce; }

struct Line {
  double a = 0, b = 0;  // d = a + b x
  double uncertainty = -1;
  int n = 0, rejected = 0;
  std::vector<char> keep;  // robust_fit: the points the line was fitted on
};

// Least squares of d on x over the kept points; the drift only where it is
// significant (see clock_align.h).
Line least_squares(const std::vector<std::pair<double, double>>& pts, const std::vector<char>& keep) {
  Line l;
  double sx = 0, sy = 0;
  for (std::size_t i = 0; i < pts.size(); ++i)
    if (keep[i]) {
      sx += pts[i].first;
      sy += pts[i].second;
      ++l.n;
    }
  if (l.n == 0) return l;
  const double n = l.n, mx = sx / n, my = sy / n;
  double sxx = 0, sxy = 0, span = 0;
  for (std::size_t i = 0; i < pts.size(); ++i)
    if (keep[i]) {
      const double dx = pts[i].first - mx;
      sxx += dx * dx;
      sxy += dx * (pts[i].second - my);
      span = std::max(span, std::fabs(dx));
    }
  auto rss = [&](double a, double b) {
    double s = 0;
    for (std::size_t i = 0; i < pts.size(); ++i)
      if (keep[i]) {
        const double r = pts[i].second - a - b * pts[i].first;
        s += r * r;
      }
    return s;
  };
  if (l.n >= 3 && sxx > 0) {
    const double b = sxy / sxx, a = my - b * mx;
    const double s2 = rss(a, b) / (n - 2);
    const double se_b = std::sqrt(s2 / sxx);
    if (std::fabs(b) > 2 * se_b) {
      l.a = a;
      l.b = b;
      l.uncertainty = std::sqrt(s2 / n + se_b * se_b * span * span);
      return l;
    }
  }
  l.a = my;
  l.uncertainty = l.n >= 2 ? std::sqrt(rss(my, 0) / (n - 1) / n) : -1;
  return l;
}

Line robust_fit(const std::vector<std::pair<double, double>>& pts) {
  std::vector<char> keep(pts.size(), 1);
  // First against the median (a drift only widens the spread, so nothing
  // but outliers lies beyond 4 robust deviations), then against the fit.
  std::vector<double> d;
  for (const auto& p : pts) d.push_back(p.second);
  double a = upper_median(d), b = 0;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<double> res(pts.size());
    for (std::size_t i = 0; i < pts.size(); ++i) res[i] = std::fabs(pts[i].second - a - b * pts[i].first);
    const double scale = 1.4826 * upper_median(res);
    const double limit = 4 * std::max(scale, 100.0);  // 100 ns: below that, clock resolution
    for (std::size_t i = 0; i < pts.size(); ++i) keep[i] = res[i] <= limit;
    const Line l = least_squares(pts, keep);
    if (l.n == 0) break;
    a = l.a;
    b = l.b;
  }
  Line l = least_squares(pts, keep);
  l.rejected = static_cast<int>(pts.size()) - l.n;
  l.keep = std::move(keep);
  return l;
}

}  // namespace

std::vector<CollectiveCall> collective_calls(const Trace& trace) {
  std::vector<CollectiveCall> calls;
  std::vector<std::int64_t> ready(trace.ops.size(), -1);
  for (const auto& d : trace.op_deps) {
    const int op = trace.op_index(d.op), dep = trace.op_index(d.dep);
    if (op < 0 || dep < 0) continue;
    const auto& o = trace.ops[static_cast<std::size_t>(op)];
    const auto& p = trace.ops[static_cast<std::size_t>(dep)];
    if (o.rank == p.rank) ready[static_cast<std::size_t>(op)] = std::max(ready[static_cast<std::size_t>(op)], p.end_ns);
  }
  // A trace that records its NCCL calls (the collectives table: imported
  // from Kineto or nsys) pairs them by what it records; op ranges found by
  // MoE recognition in such a trace carry guessed coordinates.
  if (!trace.ops.empty() && trace.collectives.empty()) {
    // Counted first: grown call by call, the array was copied and its fresh
    // pages faulted in at each doubling (on a 10 M-event trace, over half of
    // this function's time).
    std::size_t n = 0;
    for (const auto& op : trace.ops) n += collective_category(op_category(op.kind)) ? 1 : 0;
    reserve_huge(calls, n);
    for (std::size_t i = 0; i < trace.ops.size(); ++i) {
      const auto& op = trace.ops[i];
      if (!collective_category(op_category(op.kind))) continue;
      CollectiveCall c;
      c.rank = op.rank.value;
      c.layer = op.layer;
      c.iteration = op.iteration;
      c.kind = op.kind;
      c.start_ns = op.start_ns;
      c.end_ns = op.end_ns;
      c.ready_ns = ready[i] >= 0 && ready[i] < op.start_ns ? ready[i] : op.start_ns;
      c.op = static_cast<std::int32_t>(i);
      std::uint64_t h = mix(1, static_cast<std::int64_t>(op.kind));
      for (std::int64_t v : {std::int64_t{op.layer}, std::int64_t{op.iteration}, std::int64_t{op.micro_batch},
                             std::int64_t{op.chunk}, static_cast<std::int64_t>(op.phase)})
        h = mix(h, v);
      c.key = h;
      calls.push_back(c);
    }
  } else {
    // The collectives rows by (rank, correlation id): Kineto's description of
    // the NCCL kernel (process group, sequence number, name, sizes).
    std::unordered_map<std::uint64_t, const Collective*> described;
    for (const auto& c : trace.collectives)
      if (c.correlation_id != 0) described.emplace(mix(mix(4, c.rank.value), c.correlation_id), &c);
    for (std::size_t ai = 0; ai < trace.activities.size(); ++ai) {
      const auto& a = trace.activities[ai];
      if (a.type != ActivityType::kKernel) continue;
      const Collective* d = nullptr;
      if (a.correlation_id != 0)
        if (auto it = described.find(mix(mix(4, a.rank.value), a.correlation_id)); it != described.end()) d = it->second;
      if (!d && !collective_category(classify_activity(trace, a))) continue;
      CollectiveCall c;
      c.rank = a.rank.value;
      c.start_ns = c.ready_ns = a.start_ns;
      c.end_ns = a.end_ns;
      c.pairing = CollectiveCall::Pairing::kOrder;
      c.activity = static_cast<std::int64_t>(ai);
      if (a.op >= 0 && static_cast<std::size_t>(a.op) < trace.ops.size()) {
        const auto& op = trace.ops[static_cast<std::size_t>(a.op)];
        c.layer = op.layer;
        c.iteration = op.iteration;
        c.kind = op.kind;
        const auto r = ready[static_cast<std::size_t>(a.op)];
        if (r >= 0 && r < a.start_ns) c.ready_ns = r;
      }
      if (!d) {
        // By the name itself, not its string id: the id is the file's own
        // (a run's files analysed one by one must pair alike).
        c.key = mix(2, static_cast<std::int64_t>(std::hash<std::string_view>{}(trace.str(a.name))));
      } else {
        const std::string_view group_name = d->process_group;
        const std::string_view pg = group_name.substr(0, group_name.find(' '));
        if (d->seq >= 0 && !pg.empty()) {
          c.pairing = CollectiveCall::Pairing::kSequence;
          c.key = mix(mix(5, static_cast<std::int64_t>(std::hash<std::string_view>{}(pg))), d->seq);
        } else {
          const std::string& group = d->group_ranks.empty() ? d->process_group : d->group_ranks;
          c.key = mix(mix(mix(6, static_cast<std::int64_t>(std::hash<std::string>{}(group))),
                          static_cast<std::int64_t>(std::hash<std::string>{}(d->name))),
                      d->in_nelems);
        }
      }
      calls.push_back(c);
    }
  }
  // The n-th call of equal coordinates on a rank is the n-th instance. Often
  // in order already (each rank's collectives on one stream): no sort then,
  // nor its buffer of every call.
  const auto by_rank_start = [](const CollectiveCall& a, const CollectiveCall& b) {
    return std::tie(a.rank, a.start_ns) < std::tie(b.rank, b.start_ns);
  };
  if (!std::is_sorted(calls.begin(), calls.end(), by_rank_start))
    std::stable_sort(calls.begin(), calls.end(), by_rank_start);
  std::unordered_map<std::uint64_t, std::int64_t> seen;
  std::int32_t rank = -1;
  for (auto& c : calls) {
    if (c.rank != rank) {
      seen.clear();
      rank = c.rank;
    }
    c.base = c.key;
    c.order = seen[c.key]++;
    c.key = mix(c.key, c.order);
  }
  std::sort(calls.begin(), calls.end(),
            [](const CollectiveCall& a, const CollectiveCall& b) { return std::tie(a.key, a.rank) < std::tie(b.key, b.rank); });
  return calls;
}

namespace {

using Pairing = CollectiveCall::Pairing;

// One rank's calls by key, and its order-paired calls by (base, order).
struct RankCalls {
  std::unordered_map<std::uint64_t, const CollectiveCall*> by_key;
  std::map<std::pair<std::uint64_t, std::int64_t>, const CollectiveCall*> by_order;
};

struct Fit {
  Line line;
  int matched = 0;
  double spread = -1;
  std::string refused;
};

// The fit of the rank's end differences against the reference and whether it
// passes the consistency gates (clock_align.h). `shift`: order-paired calls
// are matched with the reference's call `shift` places later.
Fit fit_rank(const RankCalls& mine, const RankCalls& ref, std::int64_t t0, int shift, std::uint8_t* kinds) {
  std::vector<std::pair<double, double>> pts;
  auto add = [&](const CollectiveCall& c, const CollectiveCall& r) {
    pts.emplace_back(static_cast<double>(r.end_ns - t0), static_cast<double>(c.end_ns - r.end_ns));
    if (kinds) *kinds |= static_cast<std::uint8_t>(1u << static_cast<unsigned>(c.pairing));
  };
  for (const auto& [key, c] : mine.by_key) {
    if (c->pairing == Pairing::kOrder && shift != 0) {
      if (auto f = ref.by_order.find({c->base, c->order + shift}); f != ref.by_order.end()) add(*c, *f->second);
    } else if (auto f = ref.by_key.find(key); f != ref.by_key.end()) {
      add(*c, *f->second);
    }
  }
  Fit fit;
  fit.matched = static_cast<int>(pts.size());
  if (pts.empty()) return fit;
  std::sort(pts.begin(), pts.end());
  fit.line = robust_fit(pts);
  const Line& l = fit.line;
  if (l.n >= 2) {
    double rss = 0;
    for (std::size_t i = 0; i < pts.size(); ++i)
      if (l.keep[i]) {
        const double r = pts[i].second - l.a - l.b * pts[i].first;
        rss += r * r;
      }
    fit.spread = std::sqrt(rss / std::max(1, l.n - (l.b != 0 ? 2 : 1)));
  }
  // The largest correction over the instances fitted (the offset itself
  // where no drift is kept).
  double largest = 0;
  for (std::size_t i = 0; i < pts.size(); ++i)
    if (l.keep[i]) largest = std::max(largest, std::fabs(l.a + l.b * pts[i].first));
  if (l.n < kMinClockCollectives)
    fit.refused = fit.matched == 1 ? "one collective shared with the reference: the spread of its clock offsets is unknown"
                  : l.n < 2        ? "no two shared collectives agree on a clock offset"
                                   : fmt::format("only {} shared collectives agree on a clock offset, fewer than the "
                                                 "{} a correction needs",
                                                 l.n, kMinClockCollectives);
  else if (2 * l.n <= fit.matched)
    fit.refused = fmt::format("only {} of {} shared collectives agree on a clock offset", l.n, fit.matched);
  else if (fit.spread > kMaxClockSpreadNs)
    fit.refused = fmt::format("the collectives' clock offsets spread {:.0f} us, above {:.0f} us", fit.spread / 1e3,
                              kMaxClockSpreadNs / 1e3);
  else if (largest < l.uncertainty)
    fit.refused = fmt::format("the offset found, {:+.3f} us, is smaller than its uncertainty ({:.3f} us, from {} "
                              "collectives): the clocks agree as far as the collectives tell, so nothing is corrected",
                              l.a / 1e3, l.uncertainty / 1e3, l.n);
  return fit;
}

}  // namespace

ClockAlignment estimate_clock_alignment(const Trace& trace) {
  return estimate_clock_alignment(collective_calls(trace), trace.rank_ids(), trace.run.start_ns);
}

ClockAlignment estimate_clock_alignment(const std::vector<CollectiveCall>& calls, const std::vector<RankId>& ranks,
                                        std::int64_t run_start_ns) {
  ClockAlignment out;
  std::map<std::int32_t, RankCalls> by_rank;
  for (const auto& c : calls) {
    auto& rc = by_rank[c.rank];
    rc.by_key.emplace(c.key, &c);
    if (c.pairing == Pairing::kOrder) rc.by_order.emplace(std::pair{c.base, c.order}, &c);
  }
  if (ranks.empty()) return out;
  out.reference_rank = by_rank.empty() ? ranks.front().value : by_rank.begin()->first;
  const auto& ref = by_rank[out.reference_rank];
  out.t0_ns = INT64_MAX;
  for (const auto& [key, c] : ref.by_key) out.t0_ns = std::min(out.t0_ns, c->end_ns);
  if (ref.by_key.empty()) out.t0_ns = run_start_ns;
  for (RankId r : ranks) {
    RankClock rc;
    rc.rank = r.value;
    if (r.value == out.reference_rank) {
      rc.estimated = !ref.by_key.empty();
      rc.collectives = static_cast<int>(ref.by_key.size());
      rc.uncertainty_ns = rc.spread_ns = 0;
      out.ranks.push_back(rc);
      continue;
    }
    const auto it = by_rank.find(r.value);
    if (it == by_rank.end()) {
      rc.refused = "no collective";
      out.ranks.push_back(rc);
      continue;
    }
    std::uint8_t kinds = 0;
    const Fit fit = fit_rank(it->second, ref, out.t0_ns, 0, &kinds);
    if (fit.matched == 0) {
      rc.refused = fmt::format("no collective shared with rank {}", out.reference_rank);
      out.ranks.push_back(rc);
      continue;
    }
    const Line& l = fit.line;
    rc.estimated = l.n > 0;
    rc.collectives = l.n;
    rc.rejected = fit.matched - l.n;
    rc.offset_ns = l.a;
    rc.drift_ppm = l.b * 1e6;
    rc.uncertainty_ns = l.uncertainty;
    rc.spread_ns = fit.spread;
    rc.refused = fit.refused;
    for (auto [bit, name] : {std::pair{Pairing::kCoordinates, "coordinates"}, std::pair{Pairing::kSequence, "sequence"},
                             std::pair{Pairing::kOrder, "order"}})
      if (kinds & (1u << static_cast<unsigned>(bit))) rc.pairing += (rc.pairing.empty() ? "" : "+") + std::string(name);
    // Paired by order: the pairing one off must not fit as well elsewhere.
    if (rc.refused.empty() && (kinds & (1u << static_cast<unsigned>(Pairing::kOrder))))
      for (int shift : {1, -1}) {
        const Fit other = fit_rank(it->second, ref, out.t0_ns, shift, nullptr);
        if (!other.refused.empty() || other.line.n < kMinClockCollectives) continue;
        const double apart = std::fabs(other.line.a - l.a);
        if (apart > 4 * std::max({fit.spread, other.spread, 1e3})) {
          rc.refused = fmt::format(
              "ambiguous pairing: matching each collective with the {} one of its kind fits as well, at offset "
              "{:+.3f} us",
              shift > 0 ? "next" : "previous", other.line.a / 1e3);
          break;
        }
      }
    out.ranks.push_back(rc);
  }
  return out;
}

namespace {

// Each usable rank's correction: t = t_ref + a + b (t_ref - t0), so
// t_ref = t - (a + b (t - t0)) / (1 + b).
class ClockFix {
 public:
  explicit ClockFix(const ClockAlignment& a) : t0_(a.t0_ns) {
    for (const auto& r : a.ranks)
      if (r.usable() && (r.offset_ns != 0 || r.drift_ppm != 0))
        fix_.emplace(r.rank, std::pair{r.offset_ns, r.drift_ppm * 1e-6});
  }
  bool empty() const { return fix_.empty(); }
  const std::pair<double, double>* of(RankId rank) const { return of(rank.value); }
  const std::pair<double, double>* of(std::int32_t rank) const {
    const auto it = fix_.find(rank);
    return it != fix_.end() ? &it->second : nullptr;
  }
  void move(const std::pair<double, double>& f, std::int64_t& t) const {
    const double u = static_cast<double>(t - t0_);
    t -= std::llround((f.first + f.second * u) / (1 + f.second));
  }
  void move_opt(const std::pair<double, double>& f, std::int64_t& t) const {
    if (t >= 0) move(f, t);
  }

 private:
  std::int64_t t0_;
  std::unordered_map<std::int32_t, std::pair<double, double>> fix_;  // rank -> (offset, drift)
};

}  // namespace

void apply_clock_alignment(Trace& trace, ClockAlignment& a) {
  const ClockFix fix(a);
  a.applied = true;
  if (fix.empty()) return;
  for (auto& x : trace.activities)
    if (const auto* f = fix.of(x.rank)) fix.move(*f, x.start_ns), fix.move(*f, x.end_ns);
  for (auto& x : trace.ops)
    if (const auto* f = fix.of(x.rank)) {
      fix.move(*f, x.start_ns);
      fix.move(*f, x.end_ns);
      fix.move_opt(*f, x.launch_start_ns);
      fix.move_opt(*f, x.launch_end_ns);
    }
  for (auto& x : trace.api_calls)
    if (const auto* f = fix.of(x.rank)) fix.move(*f, x.start_ns), fix.move(*f, x.end_ns);
  for (auto& x : trace.nvtx)
    if (const auto* f = fix.of(x.rank)) fix.move(*f, x.start_ns), fix.move_opt(*f, x.end_ns);
  for (auto& x : trace.memory_events)
    if (const auto* f = fix.of(x.rank)) fix.move(*f, x.ts_ns);
  for (auto& x : trace.buffers)
    if (const auto* f = fix.of(x.rank)) fix.move_opt(*f, x.alloc_ns), fix.move_opt(*f, x.free_ns);
  for (auto& x : trace.collectives)
    if (const auto* f = fix.of(x.rank)) fix.move(*f, x.start_ns), fix.move(*f, x.end_ns);
}

void apply_clock_alignment(std::vector<CollectiveCall>& calls, const ClockAlignment& a) {
  const ClockFix fix(a);
  for (auto& c : calls)
    if (const auto* f = fix.of(c.rank)) fix.move(*f, c.start_ns), fix.move(*f, c.end_ns), fix.move(*f, c.ready_ns);
}

}  // namespace moetrace::analyzer
