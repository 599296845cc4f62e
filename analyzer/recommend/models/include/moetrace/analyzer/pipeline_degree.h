// Pipeline degree of an MoE layer: pipemoe's closed forms (Eq. 19, 25, 33,
// 40), Theorem 1 with the case split of Algorithm 1, their sum over the
// forward and backward passes, and mpipemoe's range search over measured
// granularities (its Algorithm 1).
//
// The terms of one pass (pipemoe Eq. 15-18), per rank, for the whole layer
// input (r = 1):
//   t_d(n_d / r) = alpha_a + beta_a n_d / r      dispatch (= combine) of a chunk
//   t_e(n_e / r) = alpha_e + beta_e n_e / r      expert computation of a chunk
// PipelineTerms holds alpha_a, beta_a n_d, alpha_e and beta_e n_e in seconds,
// so the caller decides what n_d and n_e count (bytes moved, FLOPs) and where
// alpha/beta come from (a fitted model or a simulator preset).
//
// NOTES.md on pipemoe: Algorithm 1's t1 (line 5) and its r2 denominator
// (line 6) are typos; we follow Eq. 19 and Eq. 28, and Eq. 28's division by
// alpha_a - alpha_e flips the inequality when alpha_a < alpha_e (handled).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moetrace::analyzer {

struct PipelineTerms {
  double alpha_a = 0;    // s, all-to-all startup (Eq. 16)
  double comm_s = 0;     // beta_a n_d: one dispatch of the whole layer input, less alpha_a
  double alpha_e = 0;    // s, expert startup of one chunk (Eq. 15: 2 alpha_gemm per expert FFN)
  double comp_s = 0;     // beta_e n_e: the expert computation of the whole input, less alpha_e

  double t_d(int r) const { return alpha_a + comm_s / r; }  // Eq. 17
  double t_e(int r) const { return alpha_e + comp_s / r; }  // Eq. 15
};

// Theorem 1's regimes for r >= 2 (and r = 1).
enum class PipelineRegime : std::uint8_t {
  kNoPipelining = 0,        // r = 1: Eq. 19
  kCommunicationBound = 1,  // Q1 (Eq. 21): experts hide under the links, Eq. 25
  kComputationBound = 2,    // not Q1, Q2 (Eq. 30): links hide but D_1 and C_r, Eq. 33
  kLinkBound = 3,           // not Q1, not Q2: Eq. 40
};
std::string_view pipeline_regime_name(PipelineRegime r);  // "no_pipelining", "communication_bound", ...
// The equation a regime's time comes from ("Eq. 19", "Eq. 25", "Eq. 33", "Eq. 40").
std::string_view pipeline_regime_equation(PipelineRegime r);

bool pipemoe_q1(const PipelineTerms& t, int r);  // Eq. 21
bool pipemoe_q2(const PipelineTerms& t, int r);  // Eq. 30
double pipemoe_eq19(const PipelineTerms& t);
double pipemoe_eq25(const PipelineTerms& t, int r);  // = Eq. 40
double pipemoe_eq33(const PipelineTerms& t, int r);
PipelineRegime pipemoe_regime(const PipelineTerms& t, int r);

// The MoE-layer time of one pass at degree r by Theorem 1's case split:
// Eq. 19 for r = 1, else Eq. 25 / 33 / 40 as Q1 and Q2 say. This equals
// max(Eq. 33, Eq. 40) for every r >= 2 (under Q1, Eq. 25 = Eq. 40 >= Eq. 33),
// which is exact in a simulator whose link serves one communication task at
// a time, dispatches first (kernels/sim README).
double pipemoe_time(const PipelineTerms& t, int r);

// One case of Theorem 1: the best r of its region within [2, r_max], if the
// region holds an integer.
struct PipelineCandidate {
  bool feasible = false;
  int r = 0;
  double t = 0;  // s
};

struct Theorem1Result {
  int r = 1;                 // the degree Theorem 1 picks (Eq. 45)
  double t = 0;              // its time, s
  PipelineRegime regime = PipelineRegime::kNoPipelining;
  double t1 = 0;             // Eq. 19
  PipelineCandidate case2;   // Q1: Eq. 28, t2* by Eq. 25
  PipelineCandidate case3;   // not Q1, Q2: min of Eq. 34 s.t. Eq. 35-37
  PipelineCandidate case4;   // not Q1, not Q2: min of Eq. 41 s.t. Eq. 42-44
};

// pipemoe Theorem 1 / Algorithm 1 over integer r in [1, r_max]. The cases are
// solved in closed form: Eq. 28 (with the sign of alpha_a - alpha_e),
// Eq. 34 is convex with its minimum at r = sqrt(2 beta_a n_d / alpha_e) on
// each integer interval where Eq. 35-36 hold, Eq. 41 grows with r (its
// smallest feasible r). Where the paper solves Eq. 34 and 41 with SLSQP over
// real r, we search integer r directly (a pipeline degree is an integer).
Theorem1Result pipemoe_theorem1(const PipelineTerms& t, int r_max = 64);

// Both passes of a layer use one r; backward terms have the expert's alpha
// and work doubled (4 GEMMs, mpipemoe Table II) and the same all-to-alls.
struct LayerPipelineTerms {
  PipelineTerms forward, backward;
};

struct PipelineDegreeChoice {
  int r = 1;
  double t = 0;            // forward + backward at r, s
  std::vector<double> t_by_r;  // [r - 1] for r in [1, r_max]: forward + backward
  Theorem1Result forward;  // Theorem 1 on the forward pass alone (the paper's Algorithm 1)
  Theorem1Result backward;
};

// The r in [1, r_max] (or in `candidates` where given) that minimises the
// sum of the two passes' Theorem-1 times (pipemoe_time). Ties: the smaller r.
PipelineDegreeChoice choose_pipeline_degree(const LayerPipelineTerms& terms, int r_max = 64,
                                            const std::vector<int>& candidates = {});

// ---------------------------------------------------------------------------
// mpipemoe Algorithm 1 (adaptive granularity search) over measured runs.

// One measured run: the layer's time at `partitions` with `tokens` per device.
struct GranularityRun {
  std::int64_t tokens = 0;  // B: tokens per device (mpipemoe's batch size of tokens)
  int partitions = 1;       // n (pipemoe r)
  double time_s = 0;        // the measured MoE-layer time (forward + backward)
  std::string source;       // trace path
};

// A range R_n = [lower, upper] of token counts whose best granularity is n.
struct GranularityRange {
  int partitions = 1;
  std::int64_t lower = 0, upper = 0;
};

struct GranularitySearch {
  std::vector<GranularityRange> ranges;  // the set S, by lower bound
  // (B, best measured n) per distinct B, ascending B: searchBestGran(B) on the runs.
  std::vector<std::pair<std::int64_t, int>> best_by_tokens;
  bool monotone = true;    // the paper's hypothesis (n grows with B) held on the runs
  int partitions = -1;     // n for the query B; -1: no run
  bool measured = false;   // the query B was among the runs (else looked up in S)
  std::string note;        // how the answer was obtained, one sentence
};

// Replays mpipemoe Algorithm 1 on the runs in ascending B: for each B not in
// a range of S, searchBestGran(B) is the best measured n at that B (the
// trials the paper runs are the runs); a new n opens a range [B, B], a known
// n widens its range to include B (lines 13-14). Then answers the query B:
// its range's n, else the best measured n at B, else the n of the nearest
// range (the monotone hypothesis), saying which.
GranularitySearch mpipemoe_range_search(const std::vector<GranularityRun>& runs, std::int64_t query_tokens);

}  // namespace moetrace::analyzer
