#include "moetrace/analyzer/clock_align.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "moetrace/analyzer/breakdown.h"

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
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

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
  double a = median(d), b = 0;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<double> res(pts.size());
    for (std::size_t i = 0; i < pts.size(); ++i) res[i] = std::fabs(pts[i].second - a - b * pts[i].first);
    const double scale = 1.4826 * median(res);
    const double limit = 4 * std::max(scale, 100.0);  // 100 ns: below that, clock resolution
    for (std::size_t i = 0; i < pts.size(); ++i) keep[i] = res[i] <= limit;
    const Line l = least_squares(pts, keep);
    if (l.n == 0) break;
    a = l.a;
    b = l.b;
  }
  Line l = least_squares(pts, keep);
  l.rejected = static_cast<int>(pts.size()) - l.n;
  return l;
}

}  // namespace

std::vector<CollectiveCall> collective_calls(const Trace& trace) {
  std::vector<CollectiveCall> calls;
  if (!trace.ops.empty()) {
    std::vector<std::int64_t> ready(trace.ops.size(), -1);
    for (const auto& d : trace.op_deps) {
      const int op = trace.op_index(d.op), dep = trace.op_index(d.dep);
      if (op < 0 || dep < 0) continue;
      const auto& o = trace.ops[static_cast<std::size_t>(op)];
      const auto& p = trace.ops[static_cast<std::size_t>(dep)];
      if (o.rank == p.rank) ready[static_cast<std::size_t>(op)] = std::max(ready[static_cast<std::size_t>(op)], p.end_ns);
    }
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
      std::uint64_t h = mix(1, static_cast<std::int64_t>(op.kind));
      for (std::int64_t v : {std::int64_t{op.layer}, std::int64_t{op.iteration}, std::int64_t{op.micro_batch},
                             std::int64_t{op.chunk}, static_cast<std::int64_t>(op.phase)})
        h = mix(h, v);
      c.key = h;
      calls.push_back(c);
    }
  } else {
    for (const auto& a : trace.activities) {
      if (a.type != ActivityType::kKernel || !collective_category(classify_activity(trace, a))) continue;
      CollectiveCall c;
      c.rank = a.rank.value;
      c.start_ns = c.ready_ns = a.start_ns;
      c.end_ns = a.end_ns;
      c.key = mix(2, a.name.value);
      calls.push_back(c);
    }
  }
  // The n-th call of equal coordinates on a rank is the n-th instance.
  std::stable_sort(calls.begin(), calls.end(), [](const CollectiveCall& a, const CollectiveCall& b) {
    return std::tie(a.rank, a.start_ns) < std::tie(b.rank, b.start_ns);
  });
  std::unordered_map<std::uint64_t, std::int64_t> seen;
  std::int32_t rank = -1;
  for (auto& c : calls) {
    if (c.rank != rank) {
      seen.clear();
      rank = c.rank;
    }
    c.key = mix(c.key, seen[c.key]++);
  }
  std::sort(calls.begin(), calls.end(),
            [](const CollectiveCall& a, const CollectiveCall& b) { return std::tie(a.key, a.rank) < std::tie(b.key, b.rank); });
  return calls;
}

ClockAlignment estimate_clock_alignment(const Trace& trace) {
  ClockAlignment out;
  const auto calls = collective_calls(trace);
  std::map<std::int32_t, std::unordered_map<std::uint64_t, std::int64_t>> ends;
  for (const auto& c : calls) ends[c.rank].emplace(c.key, c.end_ns);
  const auto ranks = trace.rank_ids();
  if (ranks.empty()) return out;
  out.reference_rank = ends.empty() ? ranks.front().value : ends.begin()->first;
  const auto& ref = ends[out.reference_rank];
  out.t0_ns = INT64_MAX;
  for (const auto& [key, end] : ref) out.t0_ns = std::min(out.t0_ns, end);
  if (ref.empty()) out.t0_ns = trace.run.start_ns;
  for (RankId r : ranks) {
    RankClock rc;
    rc.rank = r.value;
    if (r.value == out.reference_rank) {
      rc.estimated = !ref.empty();
      rc.collectives = static_cast<int>(ref.size());
      rc.uncertainty_ns = 0;
      out.ranks.push_back(rc);
      continue;
    }
    std::vector<std::pair<double, double>> pts;
    if (auto it = ends.find(r.value); it != ends.end())
      for (const auto& [key, end] : it->second)
        if (auto f = ref.find(key); f != ref.end())
          pts.emplace_back(static_cast<double>(f->second - out.t0_ns), static_cast<double>(end - f->second));
    if (!pts.empty()) {
      std::sort(pts.begin(), pts.end());
      const Line l = robust_fit(pts);
      rc.estimated = l.n > 0;
      rc.collectives = l.n;
      rc.rejected = l.rejected;
      rc.offset_ns = l.a;
      rc.drift_ppm = l.b * 1e6;
      rc.uncertainty_ns = l.uncertainty;
    }
    out.ranks.push_back(rc);
  }
  return out;
}

void apply_clock_alignment(Trace& trace, ClockAlignment& a) {
  std::unordered_map<std::int32_t, std::pair<double, double>> fix;  // rank -> (offset, drift)
  for (const auto& r : a.ranks)
    if (r.usable() && (r.offset_ns != 0 || r.drift_ppm != 0)) fix.emplace(r.rank, std::pair{r.offset_ns, r.drift_ppm * 1e-6});
  a.applied = true;
  if (fix.empty()) return;
  const std::int64_t t0 = a.t0_ns;
  // t = t_ref + a + b (t_ref - t0)  =>  t_ref = t - (a + b (t - t0)) / (1 + b)
  auto shift = [&](RankId rank) -> const std::pair<double, double>* {
    const auto it = fix.find(rank.value);
    return it != fix.end() ? &it->second : nullptr;
  };
  auto move = [t0](const std::pair<double, double>& f, std::int64_t& t) {
    const double u = static_cast<double>(t - t0);
    t -= std::llround((f.first + f.second * u) / (1 + f.second));
  };
  auto move_opt = [&](const std::pair<double, double>& f, std::int64_t& t) {
    if (t >= 0) move(f, t);
  };
  for (auto& x : trace.activities)
    if (const auto* f = shift(x.rank)) move(*f, x.start_ns), move(*f, x.end_ns);
  for (auto& x : trace.ops)
    if (const auto* f = shift(x.rank)) {
      move(*f, x.start_ns);
      move(*f, x.end_ns);
      move_opt(*f, x.launch_start_ns);
      move_opt(*f, x.launch_end_ns);
    }
  for (auto& x : trace.api_calls)
    if (const auto* f = shift(x.rank)) move(*f, x.start_ns), move(*f, x.end_ns);
  for (auto& x : trace.nvtx)
    if (const auto* f = shift(x.rank)) move(*f, x.start_ns), move_opt(*f, x.end_ns);
  for (auto& x : trace.memory_events)
    if (const auto* f = shift(x.rank)) move(*f, x.ts_ns);
  for (auto& x : trace.buffers)
    if (const auto* f = shift(x.rank)) move_opt(*f, x.alloc_ns), move_opt(*f, x.free_ns);
  for (auto& x : trace.collectives)
    if (const auto* f = shift(x.rank)) move(*f, x.start_ns), move(*f, x.end_ns);
}

}  // namespace moetrace::analyzer
