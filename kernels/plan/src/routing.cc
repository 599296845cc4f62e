#include "moetrace/plan/routing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <thread>

#include "moetrace/schema/error.h"
#include "random.h"

namespace moetrace::plan {
namespace {

// Shares of a Zipf distribution over experts whose popularity ranks are a
// seeded permutation.
std::vector<double> zipf_shares(int experts, double skew, SplitMix64& rng) {
  std::vector<int> order(static_cast<std::size_t>(experts));
  std::iota(order.begin(), order.end(), 0);
  rng.shuffle(order);
  std::vector<double> p(static_cast<std::size_t>(experts));
  double sum = 0;
  for (int rank = 0; rank < experts; ++rank) {
    const double w = 1.0 / std::pow(static_cast<double>(rank + 1), skew);
    p[static_cast<std::size_t>(order[static_cast<std::size_t>(rank)])] = w;
    sum += w;
  }
  for (double& x : p) x /= sum;
  return p;
}

// Caps every share at 1/top_k (a token picks top_k distinct experts, so no
// expert can take more than one row per token), handing the excess to the
// others in proportion: the nearest distribution a routing can realise.
std::vector<double> feasible(std::vector<double> p, int top_k) {
  const double cap = 1.0 / top_k;
  std::vector<bool> capped(p.size(), false);
  for (;;) {
    double excess = 0, free_share = 0;
    for (std::size_t e = 0; e < p.size(); ++e) {
      if (!capped[e] && p[e] > cap) {
        excess += p[e] - cap;
        p[e] = cap;
        capped[e] = true;
      }
      if (!capped[e]) free_share += p[e];
    }
    if (excess <= 0) return p;
    for (std::size_t e = 0; e < p.size(); ++e)
      if (!capped[e]) p[e] += free_share > 0 ? excess * p[e] / free_share : 0.0;
    if (free_share <= 0) {
      std::size_t open = 0;
      for (bool c : capped) open += !c;
      for (std::size_t e = 0; e < p.size(); ++e)
        if (!capped[e]) p[e] += excess / static_cast<double>(open);
    }
  }
}

double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
  return 1.0 - load_locality(a, b);
}

// The next iteration's distribution: moves from p towards a fresh Zipf draw q
// by the step that leaves exactly `locality` (1 - TV(p, p') = locality, since
// TV(p, p + t (q - p)) = t TV(p, q)). Where q is too close, it moves towards
// a distribution on p's least popular experts. Both stay realisable (shares
// at most 1/top_k), so the counts keep the locality up to rounding.
std::vector<double> drift(const std::vector<double>& p, double locality, double skew, int top_k,
                          SplitMix64& rng) {
  std::vector<double> q = feasible(zipf_shares(static_cast<int>(p.size()), skew, rng), top_k);
  const double want = 1.0 - locality;
  double tv = total_variation(p, q);
  if (tv < want) {
    // The feasible distribution farthest from p that we know: all rows on
    // p's top_k least popular experts.
    std::vector<std::size_t> order(p.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] < p[b]; });
    std::fill(q.begin(), q.end(), 0.0);
    for (int i = 0; i < top_k; ++i) q[order[static_cast<std::size_t>(i)]] = 1.0 / top_k;
    tv = total_variation(p, q);
  }
  const double t = tv > 0 ? std::min(1.0, want / tv) : 0.0;
  std::vector<double> next(p.size());
  for (std::size_t e = 0; e < p.size(); ++e) next[e] = p[e] + t * (q[e] - p[e]);
  return next;
}

// Integer counts for one source: tokens x top_k rows split in proportion to
// `share`, none above `tokens` (each token picks top_k distinct experts, so
// an expert gets at most one row per token), by water-filling the cap and
// largest-remainder rounding.
std::vector<std::int64_t> apportion(const std::vector<double>& share, std::int64_t tokens,
                                    int top_k) {
  const std::size_t n = share.size();
  const double total = static_cast<double>(tokens) * top_k;
  std::vector<double> target(n, 0.0);
  std::vector<bool> capped(n, false);
  double remaining = total;
  for (;;) {
    double free_share = 0;
    for (std::size_t e = 0; e < n; ++e)
      if (!capped[e]) free_share += share[e];
    bool changed = false;
    for (std::size_t e = 0; e < n; ++e) {
      if (capped[e]) continue;
      target[e] = free_share > 0 ? remaining * share[e] / free_share : 0.0;
      if (target[e] > static_cast<double>(tokens)) {
        capped[e] = true;
        target[e] = static_cast<double>(tokens);
        remaining -= static_cast<double>(tokens);
        changed = true;
      }
    }
    if (!changed) break;
  }
  // Experts with a zero share still take rows if the others are all capped.
  if (std::accumulate(target.begin(), target.end(), 0.0) + 0.5 < total) {
    double missing = total - std::accumulate(target.begin(), target.end(), 0.0);
    for (std::size_t e = 0; e < n && missing > 0; ++e) {
      const double room = static_cast<double>(tokens) - target[e];
      const double add = std::min(room, missing);
      target[e] += add;
      missing -= add;
    }
  }
  std::vector<std::int64_t> counts(n);
  std::int64_t assigned = 0;
  for (std::size_t e = 0; e < n; ++e) {
    counts[e] = static_cast<std::int64_t>(std::floor(target[e] + 1e-9));
    assigned += counts[e];
  }
  // Largest remainders first, ties to the lower expert: a strict order, so
  // selecting the first `head` by it gives exactly what a stable sort would.
  std::vector<double> remainder(n);
  for (std::size_t e = 0; e < n; ++e) remainder[e] = target[e] - std::floor(target[e]);
  const auto before = [&](std::size_t a, std::size_t b) {
    return remainder[a] > remainder[b] || (remainder[a] == remainder[b] && a < b);
  };
  const auto want = static_cast<std::int64_t>(std::llround(total));
  // One pass over the order hands out a row to every expert it meets that is
  // not full, so the first (rows missing + experts already full) of the order
  // suffice; only where that is all of them can a second pass be needed. The
  // order within those matters only if some expert in them is full.
  std::size_t full = 0;
  for (std::size_t e = 0; e < n; ++e) full += counts[e] >= tokens ? 1 : 0;
  const std::size_t head =
      std::min(n, static_cast<std::size_t>(std::max<std::int64_t>(want - assigned, 0)) + full);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (head < n) std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(head), order.end(), before);
  if (full > 0 || head == n) std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(head), before);
  for (std::size_t i = 0; assigned < want; i = (i + 1) % n) {
    const std::size_t e = order[i];
    if (counts[e] < tokens) {
      ++counts[e];
      ++assigned;
    }
  }
  return counts;
}

}  // namespace

ExpertLoad ExpertLoad::zeros(int iterations, int layers, int sources, int experts, int top_k) {
  return {.iterations = iterations, .layers = layers, .sources = sources, .experts = experts, .top_k = top_k,
          .tokens = std::vector<std::int64_t>(static_cast<std::size_t>(iterations * sources), 0),
          .counts = std::vector<std::int64_t>(static_cast<std::size_t>(iterations * layers * sources * experts), 0)};
}

std::vector<std::int64_t> ExpertLoad::expert_totals(int iteration, int layer) const {
  std::vector<std::int64_t> totals(static_cast<std::size_t>(experts), 0);
  for (int s = 0; s < sources; ++s)
    for (int e = 0; e < experts; ++e)
      totals[static_cast<std::size_t>(e)] += count(iteration, layer, s, e);
  return totals;
}

void ExpertLoad::validate() const {
  if (iterations < 1 || layers < 1 || sources < 1 || experts < 1 || top_k < 1)
    throw ConfigError(fmt::format(
        "expert load dimensions (iterations {}, layers {}, sources {}, experts {}, top_k {}) "
        "must all be at least 1",
        iterations, layers, sources, experts, top_k));
  if (tokens.size() != static_cast<std::size_t>(iterations * sources) ||
      counts.size() != static_cast<std::size_t>(iterations * layers * sources * experts))
    throw ConfigError("expert load tokens/counts sizes do not match its dimensions");
  for (int it = 0; it < iterations; ++it)
    for (int l = 0; l < layers; ++l)
      for (int s = 0; s < sources; ++s) {
        std::int64_t sum = 0;
        for (int e = 0; e < experts; ++e) {
          const std::int64_t c = count(it, l, s, e);
          if (c < 0 || c > tokens_of(it, s))
            throw ConfigError(fmt::format(
                "expert load count (iteration {}, layer {}, source {}, expert {}) = {} is not "
                "between 0 and the source's tokens ({})",
                it, l, s, e, c, tokens_of(it, s)));
          sum += c;
        }
        if (sum != tokens_of(it, s) * top_k)
          throw ConfigError(fmt::format(
              "expert load counts of (iteration {}, layer {}, source {}) sum to {}, not tokens "
              "({}) x top_k ({})",
              it, l, s, sum, tokens_of(it, s), top_k));
      }
}

void SyntheticLoadConfig::validate() const {
  auto positive = [](const char* field, std::int64_t v) {
    if (v < 1) throw ConfigError(fmt::format("{} ({}) must be at least 1", field, v));
  };
  positive("iterations", iterations);
  positive("layers", layers);
  positive("sources", sources);
  positive("experts", experts);
  positive("top_k", top_k);
  positive("tokens_per_source", tokens_per_source);
  if (top_k > experts)
    throw ConfigError(fmt::format("top_k ({}) is greater than experts ({})", top_k, experts));
  if (!(zipf_skew >= 0))
    throw ConfigError(fmt::format("zipf_skew ({}) must not be negative", zipf_skew));
  if (!(locality >= 0 && locality <= 1))
    throw ConfigError(fmt::format("locality ({}) must be between 0 and 1", locality));
  if (!(source_noise >= 0))
    throw ConfigError(fmt::format("source_noise ({}) must not be negative", source_noise));
  if (threads < 0) throw ConfigError(fmt::format("threads ({}) must not be negative", threads));
}

ExpertLoad synthetic_load(const SyntheticLoadConfig& c) {
  c.validate();
  ExpertLoad load = ExpertLoad::zeros(c.iterations, c.layers, c.sources, c.experts, c.top_k);
  std::fill(load.tokens.begin(), load.tokens.end(), c.tokens_per_source);
  // The expert shares of each (layer, iteration) come from one seeded stream
  // in (layer, iteration) order; each source's noise then takes the next
  // 2 x experts draws (normal() is two), so the generator's state at source
  // s is known without drawing and the sources split over threads give the
  // counts one thread would.
  struct Step {
    int layer, iteration;
    std::vector<double> p;
    SplitMix64 rng;  // state before source 0's noise
  };
  const std::uint64_t draws_per_source = c.source_noise > 0 ? 2 * static_cast<std::uint64_t>(c.experts) : 0;
  std::vector<Step> steps;
  steps.reserve(static_cast<std::size_t>(c.layers) * static_cast<std::size_t>(c.iterations));
  SplitMix64 rng(c.seed);
  for (int l = 0; l < c.layers; ++l) {
    std::vector<double> p;
    if (c.pattern == LoadPattern::kBalanced)
      p.assign(static_cast<std::size_t>(c.experts), 1.0 / c.experts);
    else
      p = zipf_shares(c.experts, c.zipf_skew, rng);
    if (c.pattern == LoadPattern::kDrifting) p = feasible(p, c.top_k);
    for (int it = 0; it < c.iterations; ++it) {
      if (it > 0 && c.pattern == LoadPattern::kDrifting) p = drift(p, c.locality, c.zipf_skew, c.top_k, rng);
      steps.push_back({l, it, p, rng});
      rng.discard(draws_per_source * static_cast<std::uint64_t>(c.sources));
    }
  }

  // One task: sources [first, last) of every step.
  auto fill = [&](int first, int last) {
    for (const Step& step : steps) {
      SplitMix64 r = step.rng;
      r.discard(draws_per_source * static_cast<std::uint64_t>(first));
      std::vector<double> share;
      for (int s = first; s < last; ++s) {
        share = step.p;
        if (c.source_noise > 0) {
          double sum = 0;
          for (double& x : share) {
            x *= std::exp(c.source_noise * r.normal());
            sum += x;
          }
          for (double& x : share) x /= sum;
        }
        const auto counts = apportion(share, c.tokens_per_source, c.top_k);
        std::copy(counts.begin(), counts.end(), &load.count(step.iteration, step.layer, s, 0));
      }
    }
  };
  // Threads only where the work pays for them (about 15 us per source and
  // step at 1024 experts).
  const double work = static_cast<double>(steps.size()) * c.sources * c.experts;
  const int threads =
      std::min(c.sources, c.threads > 0 ? c.threads
                                        : std::clamp(static_cast<int>(work / 4e6), 1,
                                                     static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(fill, static_cast<int>(static_cast<std::int64_t>(c.sources) * t / threads),
                      static_cast<int>(static_cast<std::int64_t>(c.sources) * (t + 1) / threads));
  fill(0, c.sources / threads);
  for (auto& t : pool) t.join();
  return load;
}

std::vector<double> expert_distribution(const ExpertLoad& load, int iteration, int layer) {
  const auto totals = load.expert_totals(iteration, layer);
  const double sum = static_cast<double>(std::accumulate(totals.begin(), totals.end(), std::int64_t{0}));
  std::vector<double> p(totals.size(), 0.0);
  if (sum > 0)
    for (std::size_t e = 0; e < totals.size(); ++e) p[e] = static_cast<double>(totals[e]) / sum;
  return p;
}

double load_locality(const std::vector<double>& a, const std::vector<double>& b) {
  double overlap = 0;
  for (std::size_t e = 0; e < std::min(a.size(), b.size()); ++e) overlap += std::min(a[e], b[e]);
  return overlap;
}

double balance_degree(const std::vector<double>& per_device) {
  if (per_device.empty()) return 0;
  const double mean =
      std::accumulate(per_device.begin(), per_device.end(), 0.0) / static_cast<double>(per_device.size());
  double var = 0;
  for (double x : per_device) var += (x - mean) * (x - mean);
  return std::sqrt(var / static_cast<double>(per_device.size()));
}

double balance_degree(std::span<const std::int64_t> per_device) {
  return balance_degree(std::vector<double>(per_device.begin(), per_device.end()));
}

double rb(double before, double after) {
  if (after > 0) return before / after;
  return before > 0 ? std::numeric_limits<double>::infinity() : 1.0;
}

double zipf_skew_estimate(const std::vector<double>& distribution) {
  std::vector<double> sorted;
  for (double x : distribution)
    if (x > 0) sorted.push_back(x);
  std::sort(sorted.rbegin(), sorted.rend());
  if (sorted.size() < 2) return 0;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(sorted.size());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const double x = std::log(static_cast<double>(i + 1));
    const double y = std::log(sorted[i]);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  return -(n * sxy - sx * sy) / (n * sxx - sx * sx);
}

}  // namespace moetrace::plan
