#include "moetrace/analyzer/pipeline_degree.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <map>

namespace moetrace::analyzer {

namespace {

// Each regime of pipemoe Sec. IV with the equation of its layer time.
struct RegimeTraits {
  std::string_view name, equation;
};
constexpr RegimeTraits kRegimes[] = {
    {"no_pipelining", "Eq. 19"},        // kNoPipelining
    {"communication_bound", "Eq. 25"},  // kCommunicationBound
    {"computation_bound", "Eq. 33"},    // kComputationBound
    {"link_bound", "Eq. 40"},           // kLinkBound
};

const RegimeTraits& traits(PipelineRegime r) {
  const auto i = static_cast<std::size_t>(r);
  return i < std::size(kRegimes) ? kRegimes[i] : kRegimes[0];
}

}  // namespace

std::string_view pipeline_regime_name(PipelineRegime r) { return traits(r).name; }

std::string_view pipeline_regime_equation(PipelineRegime r) { return traits(r).equation; }

bool pipemoe_q1(const PipelineTerms& t, int r) { return t.t_d(r) >= t.t_e(r); }

bool pipemoe_q2(const PipelineTerms& t, int r) {
  return 2.0 * (r - 1) * t.alpha_a + 2.0 * (r - 1) / r * t.comm_s < r * t.alpha_e + t.comp_s;
}

double pipemoe_eq19(const PipelineTerms& t) { return 2 * t.alpha_a + t.alpha_e + 2 * t.comm_s + t.comp_s; }

double pipemoe_eq25(const PipelineTerms& t, int r) { return 2.0 * r * t.alpha_a + 2 * t.comm_s; }

double pipemoe_eq33(const PipelineTerms& t, int r) {
  return 2 * t.alpha_a + t.comp_s + 2 * t.comm_s / r + t.alpha_e * r;
}

PipelineRegime pipemoe_regime(const PipelineTerms& t, int r) {
  if (r <= 1) return PipelineRegime::kNoPipelining;
  if (pipemoe_q1(t, r)) return PipelineRegime::kCommunicationBound;
  return pipemoe_q2(t, r) ? PipelineRegime::kComputationBound : PipelineRegime::kLinkBound;
}

double pipemoe_time(const PipelineTerms& t, int r) {
  switch (pipemoe_regime(t, r)) {
    case PipelineRegime::kNoPipelining: return pipemoe_eq19(t);
    case PipelineRegime::kCommunicationBound: return pipemoe_eq25(t, r);
    case PipelineRegime::kComputationBound: return pipemoe_eq33(t, r);
    case PipelineRegime::kLinkBound: return pipemoe_eq25(t, r);  // Eq. 40 = Eq. 25
  }
  return pipemoe_eq19(t);
}

namespace {

struct IntRange {
  int lo = 0, hi = 0;
};

// The maximal integer intervals of [lo, hi] where `pred` holds, given every
// real r at which pred may change its value (roots of the conditions). The
// predicate is evaluated only next to the breakpoints and once per gap
// between them: between two breakpoints its value is constant.
std::vector<IntRange> where(const std::function<bool(int)>& pred, int lo, int hi,
                            const std::vector<double>& breakpoints) {
  std::vector<int> pts = {lo, hi};
  for (double b : breakpoints) {
    if (!std::isfinite(b) || b < lo - 2.0 || b > hi + 2.0) continue;
    const int f = static_cast<int>(std::floor(b));
    for (int p = f - 1; p <= f + 2; ++p)
      if (p >= lo && p <= hi) pts.push_back(p);
  }
  std::sort(pts.begin(), pts.end());
  pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
  std::vector<IntRange> out;
  auto add = [&](int a, int b) {
    if (!out.empty() && out.back().hi + 1 == a) out.back().hi = b;
    else out.push_back({a, b});
  };
  for (std::size_t i = 0; i < pts.size(); ++i) {
    if (pred(pts[i])) add(pts[i], pts[i]);
    if (i + 1 < pts.size() && pts[i] + 1 < pts[i + 1] && pred(pts[i] + 1)) add(pts[i] + 1, pts[i + 1] - 1);
  }
  return out;
}

// Where Q1 (Eq. 21) changes: (alpha_a - alpha_e) r = beta_e n_e - beta_a n_d
// (Eq. 27; the side of the root that holds depends on the sign).
std::vector<double> q1_roots(const PipelineTerms& t) {
  const double a = t.alpha_a - t.alpha_e, d = t.comp_s - t.comm_s;
  if (a == 0) return {};
  return {d / a};
}

// Where Q2 (Eq. 30, times r > 0) changes: a r^2 + b r + c = 0 with
// a = 2 alpha_a - alpha_e, b = 2 beta_a n_d - 2 alpha_a - beta_e n_e,
// c = -2 beta_a n_d.
std::vector<double> q2_roots(const PipelineTerms& t) {
  const double a = 2 * t.alpha_a - t.alpha_e;
  const double b = 2 * t.comm_s - 2 * t.alpha_a - t.comp_s;
  const double c = -2 * t.comm_s;
  if (a == 0) {
    if (b == 0) return {};
    return {-c / b};
  }
  const double disc = b * b - 4 * a * c;
  if (disc < 0) return {};
  const double s = std::sqrt(disc);
  return {(-b - s) / (2 * a), (-b + s) / (2 * a)};
}

}  // namespace

Theorem1Result pipemoe_theorem1(const PipelineTerms& t, int r_max) {
  Theorem1Result out;
  out.t1 = pipemoe_eq19(t);
  out.t = out.t1;
  r_max = std::max(r_max, 1);
  if (r_max >= 2) {
    std::vector<double> roots = q1_roots(t);
    for (double x : q2_roots(t)) roots.push_back(x);
    // Case 1 (Eq. 25-28): f2 grows with r, so the smallest r >= 2 where Q1 holds.
    for (const auto& iv : where([&](int r) { return pipemoe_q1(t, r); }, 2, r_max, roots)) {
      out.case2 = {true, iv.lo, pipemoe_eq25(t, iv.lo)};
      break;
    }
    // Case 2 (Eq. 34-37): f3 = 2 alpha_a + beta_e n_e + 2 beta_a n_d / r +
    // alpha_e r is convex; on each feasible interval the integer minimum is
    // next to r* = sqrt(2 beta_a n_d / alpha_e), or at an end.
    const double r_star = t.alpha_e > 0 ? std::sqrt(2 * t.comm_s / t.alpha_e)
                                        : std::numeric_limits<double>::infinity();
    for (const auto& iv : where([&](int r) { return !pipemoe_q1(t, r) && pipemoe_q2(t, r); }, 2, r_max, roots)) {
      std::vector<int> cand = {iv.lo, iv.hi};
      if (std::isfinite(r_star)) {
        for (double x : {std::floor(r_star), std::ceil(r_star)})
          cand.push_back(static_cast<int>(std::clamp(x, static_cast<double>(iv.lo), static_cast<double>(iv.hi))));
      }
      std::sort(cand.begin(), cand.end());
      for (int r : cand) {
        const double v = pipemoe_eq33(t, r);
        if (!out.case3.feasible || v < out.case3.t) out.case3 = {true, r, v};
      }
    }
    // Case 3 (Eq. 41-44): f4 = 2 alpha_a r + 2 beta_a n_d grows with r.
    for (const auto& iv : where([&](int r) { return !pipemoe_q1(t, r) && !pipemoe_q2(t, r); }, 2, r_max, roots)) {
      out.case4 = {true, iv.lo, pipemoe_eq25(t, iv.lo)};
      break;
    }
  }
  // Eq. 45: r = 1 unless some case beats t1; among the cases the fastest
  // (ties: the smaller r).
  const PipelineCandidate* best = nullptr;
  for (const auto* c : {&out.case2, &out.case3, &out.case4}) {
    if (!c->feasible) continue;
    if (!best || c->t < best->t || (c->t == best->t && c->r < best->r)) best = c;
  }
  if (best && best->t < out.t1) {
    out.r = best->r;
    out.t = best->t;
  } else {
    out.r = 1;
    out.t = out.t1;
  }
  out.regime = pipemoe_regime(t, out.r);
  return out;
}

PipelineDegreeChoice choose_pipeline_degree(const LayerPipelineTerms& terms, int r_max,
                                            const std::vector<int>& candidates) {
  PipelineDegreeChoice c;
  r_max = std::max(r_max, 1);
  c.forward = pipemoe_theorem1(terms.forward, r_max);
  c.backward = pipemoe_theorem1(terms.backward, r_max);
  c.t_by_r.resize(static_cast<std::size_t>(r_max));
  for (int r = 1; r <= r_max; ++r)
    c.t_by_r[static_cast<std::size_t>(r - 1)] = pipemoe_time(terms.forward, r) + pipemoe_time(terms.backward, r);
  std::vector<int> rs = candidates;
  if (rs.empty())
    for (int r = 1; r <= r_max; ++r) rs.push_back(r);
  bool any = false;
  for (int r : rs) {
    if (r < 1 || r > r_max) continue;
    const double v = c.t_by_r[static_cast<std::size_t>(r - 1)];
    if (!any || v < c.t || (v == c.t && r < c.r)) {
      c.r = r;
      c.t = v;
      any = true;
    }
  }
  if (!any) {
    c.r = 1;
    c.t = c.t_by_r[0];
  }
  return c;
}

// ---------------------------------------------------------------------------

GranularitySearch mpipemoe_range_search(const std::vector<GranularityRun>& runs, std::int64_t query_tokens) {
  GranularitySearch s;
  // searchBestGran(B): the fastest measured n at B (ties: the smaller n).
  std::map<std::int64_t, std::pair<int, double>> best;
  for (const auto& run : runs) {
    auto it = best.find(run.tokens);
    if (it == best.end() || run.time_s < it->second.second ||
        (run.time_s == it->second.second && run.partitions < it->second.first))
      best[run.tokens] = {run.partitions, run.time_s};
  }
  for (const auto& [b, nt] : best) s.best_by_tokens.push_back({b, nt.first});
  auto find = [&](std::int64_t b) -> GranularityRange* {
    for (auto& r : s.ranges)
      if (b >= r.lower && b <= r.upper) return &r;
    return nullptr;
  };
  std::vector<std::string> violations;
  for (const auto& [b, n] : s.best_by_tokens) {
    if (GranularityRange* r = find(b)) {  // line 6: found, no search
      if (r->partitions != n)
        violations.push_back(fmt::format("B = {} lies in the range of n = {} but measured best n = {}", b,
                                         r->partitions, n));
      continue;
    }
    // An init-capture, not [&]: clang before 16 cannot capture structured bindings.
    auto it = std::find_if(s.ranges.begin(), s.ranges.end(), [best = n](const auto& r) { return r.partitions == best; });
    if (it == s.ranges.end()) {
      s.ranges.push_back({n, b, b});  // lines 10-12
    } else {
      it->lower = std::min(b, it->lower);  // line 14
      it->upper = std::max(b, it->upper);
    }
  }
  std::sort(s.ranges.begin(), s.ranges.end(), [](const auto& a, const auto& b) { return a.lower < b.lower; });
  for (std::size_t i = 1; i < s.best_by_tokens.size(); ++i)
    if (s.best_by_tokens[i].second < s.best_by_tokens[i - 1].second) s.monotone = false;
  for (std::size_t i = 1; i < s.ranges.size(); ++i)
    if (s.ranges[i].lower <= s.ranges[i - 1].upper) s.monotone = false;
  if (!violations.empty()) s.monotone = false;

  if (s.best_by_tokens.empty()) {
    s.note = "no measured runs";
    return s;
  }
  auto measured = best.find(query_tokens);
  s.measured = measured != best.end();
  if (const GranularityRange* r = find(query_tokens)) {
    s.partitions = r->partitions;
    s.note = fmt::format("B = {} lies in the range [{}, {}] of n = {}", query_tokens, r->lower, r->upper, r->partitions);
    if (s.measured && measured->second.first != r->partitions)
      s.note += fmt::format(" (but the fastest measured n at B is {})", measured->second.first);
  } else if (s.measured) {
    s.partitions = measured->second.first;
    s.note = fmt::format("fastest measured n at B = {}", query_tokens);
  } else {
    // Outside every range: the nearest range, by the monotone hypothesis.
    std::int64_t best_d = std::numeric_limits<std::int64_t>::max();
    for (const auto& range : s.ranges) {
      const std::int64_t d = query_tokens < range.lower ? range.lower - query_tokens : query_tokens - range.upper;
      if (d < best_d) {
        best_d = d;
        s.partitions = range.partitions;
      }
    }
    s.note = fmt::format("B = {} is outside the measured ranges; n of the nearest range (mpipemoe's "
                         "hypothesis: n grows with B)",
                         query_tokens);
  }
  if (!s.monotone) s.note += "; the runs contradict the hypothesis that n grows with B";
  return s;
}

}  // namespace moetrace::analyzer
