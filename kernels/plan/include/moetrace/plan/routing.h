// Routing input of the builders: how many tokens each source sends to each
// expert, per (iteration, layer). Either measured (the CPU reference's real
// top-k routing, reference.h) or synthetic (balanced, Zipf-skewed, drifting
// with a chosen locality), deterministic by seed.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace moetrace::plan {

// A source is a block of tokens that is gated together: a rank for the
// expert-parallel variants, a (data-parallel group, micro-batch) for PPMoE.
struct ExpertLoad {
  int iterations = 0, layers = 0, sources = 0, experts = 0;  // the dimensions of `counts`
  int top_k = 1;
  std::vector<std::int64_t> tokens;  // [iteration][source]: tokens in the block
  std::vector<std::int64_t> counts;  // [iteration][layer][source][expert]

  static ExpertLoad zeros(int iterations, int layers, int sources, int experts, int top_k);

  std::int64_t& tokens_of(int iteration, int source) {
    return tokens[static_cast<std::size_t>(iteration * sources + source)];
  }
  std::int64_t tokens_of(int iteration, int source) const {
    return tokens[static_cast<std::size_t>(iteration * sources + source)];
  }
  std::int64_t& count(int iteration, int layer, int source, int expert) {
    return counts[index(iteration, layer, source, expert)];
  }
  std::int64_t count(int iteration, int layer, int source, int expert) const {
    return counts[index(iteration, layer, source, expert)];
  }
  // The `experts` counts of one source, contiguous.
  const std::int64_t* source_counts(int iteration, int layer, int source) const {
    return counts.data() + index(iteration, layer, source, 0);
  }
  // Tokens each expert receives from all sources.
  std::vector<std::int64_t> expert_totals(int iteration, int layer) const;

  // Throws ConfigError unless every block routes each token to top_k distinct
  // experts: counts sum to tokens x top_k and none exceeds tokens.
  void validate() const;

 private:
  std::size_t index(int iteration, int layer, int source, int expert) const {
    const auto z = [](int v) { return static_cast<std::size_t>(v); };
    return ((z(iteration) * z(layers) + z(layer)) * z(sources) + z(source)) * z(experts) + z(expert);
  }
};

enum class LoadPattern : std::uint8_t {
  kBalanced = 0,  // every expert the same share
  kZipf = 1,      // share of the expert of popularity rank i proportional to 1 / i^zipf_skew
  kDrifting = 2,  // Zipf at iteration 0, then each iteration moves away from the last
};
std::string_view load_pattern_name(LoadPattern p);  // "balanced", "zipf", "drifting"
// The pattern named `name`; a ConfigError `KEY "name" is not one of ...` otherwise.
LoadPattern parse_load_pattern(std::string_view name, std::string_view key);

struct SyntheticLoadConfig {
  int iterations = 1;
  int layers = 1;
  int sources = 4;
  int experts = 4;
  int top_k = 1;
  std::int64_t tokens_per_source = 1024;
  LoadPattern pattern = LoadPattern::kBalanced;
  double zipf_skew = 1.0;
  // kDrifting: load_locality() between the expert distributions of iterations
  // j and j+1 of a layer (1: unchanged, 0: disjoint where possible).
  double locality = 0.9;
  // Per-source log-normal perturbation of the shares (0: every source routes
  // in the same proportions).
  double source_noise = 0.0;
  std::uint64_t seed = 1;
  // Threads that split the sources (0: as many as the work and the machine
  // allow); the counts do not depend on it.
  int threads = 0;

  void validate() const;  // throws ConfigError naming the field
};

ExpertLoad synthetic_load(const SyntheticLoadConfig& config);

// The expert distribution of (iteration, layer): each expert's share of all
// routed rows.
std::vector<double> expert_distribution(const ExpertLoad& load, int iteration, int layer);

// Locality of two expert distributions: 1 - total variation distance, i.e.
// sum_e min(a_e, b_e), the share of routed tokens whose expert share is kept
// from one iteration to the next (our measure of pro-prophet Sec. II-B
// "locality"; the paper shows it in Fig. 4 without a formula).
double load_locality(const std::vector<double>& a, const std::vector<double>& b);

// Pro-Prophet's balance degree (Sec. VI-C): the standard deviation of the
// per-device input counts (population standard deviation).
double balance_degree(const std::vector<double>& per_device);
double balance_degree(std::span<const std::int64_t> per_device);
// Pro-Prophet's RB: balance degree before / after a load-balancing method
// (> 1: the method balanced the load); infinite where it balanced the load
// perfectly, 1 where it was balanced already.
double rb(double balance_degree_before, double balance_degree_after);

// Least-squares slope of log(share) over log(popularity rank) of the non-zero
// shares, negated: the s of a Zipf distribution.
double zipf_skew_estimate(const std::vector<double>& distribution);

}  // namespace moetrace::plan
