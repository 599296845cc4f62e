// Synthetic routing loads: their statistics are what was asked for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moetrace/plan/routing.h"
#include "moetrace/schema/error.h"
#include "error_of.h"

namespace moetrace::plan {
namespace {

SyntheticLoadConfig base(LoadPattern pattern) {
  return {.iterations = 6, .layers = 2, .sources = 4, .experts = 8, .top_k = 2, .tokens_per_source = 100000,
          .pattern = pattern, .seed = 7};
}

TEST(Routing, BalancedIsExactlyEven) {
  SyntheticLoadConfig c = base(LoadPattern::kBalanced);
  c.tokens_per_source = 1000;  // 2000 rows over 8 experts: 250 each
  const ExpertLoad l = synthetic_load(c);
  l.validate();
  for (int it = 0; it < c.iterations; ++it)
    for (int s = 0; s < c.sources; ++s)
      for (int e = 0; e < c.experts; ++e) EXPECT_EQ(l.count(it, 1, s, e), 250);
  EXPECT_DOUBLE_EQ(balance_degree({250, 250, 250, 250}), 0.0);
}

TEST(Routing, ZipfSkewIsAchieved) {
  for (double skew : {0.5, 1.0, 1.5}) {
    SyntheticLoadConfig c = base(LoadPattern::kZipf);
    c.zipf_skew = skew;
    c.top_k = 1;
    const ExpertLoad l = synthetic_load(c);
    l.validate();
    auto p = expert_distribution(l, 0, 0);
    EXPECT_NEAR(zipf_skew_estimate(p), skew, 0.01) << "skew " << skew;
    // Zipf: the most popular expert has 2^s times the share of the second.
    std::sort(p.rbegin(), p.rend());
    EXPECT_NEAR(p[0] / p[1], std::pow(2.0, skew), 0.01) << "skew " << skew;
    // The share of the top expert is 1 / H_{8,s}.
    double h = 0;
    for (int i = 1; i <= 8; ++i) h += 1.0 / std::pow(i, skew);
    EXPECT_NEAR(p[0], 1.0 / h, 1e-4);
  }
}

TEST(Routing, TopKCapsExpertsAtOneRowPerToken) {
  SyntheticLoadConfig c = base(LoadPattern::kZipf);
  c.zipf_skew = 3.0;  // the top expert would want more rows than tokens
  c.top_k = 4;
  c.tokens_per_source = 1000;
  const ExpertLoad l = synthetic_load(c);
  l.validate();  // sums to tokens x k, none above tokens
  const auto counts = l.expert_totals(0, 0);
  EXPECT_EQ(*std::max_element(counts.begin(), counts.end()), 4 * 1000);
}

// Sources split over threads draw their noise from where one thread would
// be in the seeded stream: the counts are the same for any thread count (and
// differ between sources, so a thread that restarted the stream would show).
TEST(Routing, ThreadCountDoesNotChangeTheLoad) {
  SyntheticLoadConfig c = base(LoadPattern::kDrifting);
  c.sources = 7;
  c.source_noise = 0.5;
  c.threads = 1;
  const ExpertLoad one = synthetic_load(c);
  bool sources_differ = false;
  for (int e = 0; e < c.experts; ++e) sources_differ = sources_differ || one.count(1, 0, 5, e) != one.count(1, 0, 0, e);
  EXPECT_TRUE(sources_differ);
  for (int threads : {2, 3, 7}) {
    c.threads = threads;
    EXPECT_EQ(synthetic_load(c).counts, one.counts) << threads << " threads";
  }
  c.threads = -1;
  EXPECT_THROW(synthetic_load(c), ConfigError);
}

TEST(Routing, DriftingLocalityIsAchieved) {
  for (double locality : {0.95, 0.8, 0.5, 0.2}) {
    SyntheticLoadConfig c = base(LoadPattern::kDrifting);
    c.experts = 16;
    c.locality = locality;
    const ExpertLoad l = synthetic_load(c);
    l.validate();
    for (int layer = 0; layer < c.layers; ++layer)
      for (int it = 0; it + 1 < c.iterations; ++it) {
        const double got = load_locality(expert_distribution(l, it, layer), expert_distribution(l, it + 1, layer));
        EXPECT_NEAR(got, locality, 0.005) << "locality " << locality << " layer " << layer << " it " << it;
      }
  }
}

TEST(Routing, DeterministicBySeed) {
  SyntheticLoadConfig c = base(LoadPattern::kDrifting);
  c.source_noise = 0.3;
  const ExpertLoad a = synthetic_load(c), b = synthetic_load(c);
  EXPECT_EQ(a.counts, b.counts);
  c.seed = 8;
  EXPECT_NE(synthetic_load(c).counts, a.counts);
}

TEST(Routing, SourceNoiseMakesSourcesDiffer) {
  SyntheticLoadConfig c = base(LoadPattern::kZipf);
  c.source_noise = 0.0;
  const ExpertLoad same = synthetic_load(c);
  EXPECT_EQ(same.count(0, 0, 0, 3), same.count(0, 0, 1, 3));
  c.source_noise = 0.5;
  const ExpertLoad noisy = synthetic_load(c);
  noisy.validate();
  int differing = 0;
  for (int e = 0; e < c.experts; ++e) differing += noisy.count(0, 0, 0, e) != noisy.count(0, 0, 1, e);
  EXPECT_GT(differing, 4);
}

TEST(Routing, Metrics) {
  // Hand values: overlap of {.5,.5,0} and {0,.5,.5} is .5; std of 1..4 is sqrt(1.25).
  EXPECT_DOUBLE_EQ(load_locality({0.5, 0.5, 0.0}, {0.0, 0.5, 0.5}), 0.5);
  EXPECT_DOUBLE_EQ(load_locality({0.25, 0.75}, {0.25, 0.75}), 1.0);
  EXPECT_NEAR(balance_degree({1, 2, 3, 4}), std::sqrt(1.25), 1e-15);
  EXPECT_NEAR(zipf_skew_estimate({1.0, 0.5, 1.0 / 3, 0.25}), 1.0, 1e-12);
}

TEST(Routing, InvalidSyntheticConfig) {
  SyntheticLoadConfig c = base(LoadPattern::kDrifting);
  c.locality = 1.5;
  EXPECT_EQ(moetrace::testing::error_of<ConfigError>([&] { synthetic_load(c); }),
            "locality (1.5) must be between 0 and 1");
  c.locality = 0.5;
  c.top_k = 9;
  EXPECT_EQ(moetrace::testing::error_of<ConfigError>([&] { synthetic_load(c); }),
            "top_k (9) is greater than experts (8)");
}

}  // namespace
}  // namespace moetrace::plan
