// The gate kernel's top-k order (device_math.h gate_prefers), run on the CPU
// the way gate_softmax_topk_kernel runs it: each of 32 lanes keeps its best
// expert, then a butterfly of shuffles keeps the best of the warp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "moetrace/cuda/device_math.h"

namespace moetrace::cuda {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The kernel's softmax and selection of one token, lane by lane.
std::vector<int> warp_top_k(const std::vector<float>& logits, int k) {
  const int E = static_cast<int>(logits.size());
  float mx = -kInf;
  for (float l : logits) mx = std::fmax(mx, l);
  float sum = 0.0f;
  for (float l : logits) sum += std::exp(l - mx);
  const float inv = 1.0f / sum;
  std::vector<int> chosen;
  for (int slot = 0; slot < k; ++slot) {
    float bv[32];
    int bi[32];
    for (int lane = 0; lane < 32; ++lane) {
      bv[lane] = 0.0f;
      bi[lane] = -1;
      for (int e = lane; e < E; e += 32) {
        if (std::find(chosen.begin(), chosen.end(), e) != chosen.end()) continue;
        const float v = std::exp(logits[static_cast<std::size_t>(e)] - mx) * inv;
        if (gate_prefers(v, e, bv[lane], bi[lane])) {
          bv[lane] = v;
          bi[lane] = e;
        }
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      float nv[32];
      int ni[32];
      for (int lane = 0; lane < 32; ++lane) {
        nv[lane] = bv[lane];
        ni[lane] = bi[lane];
        if (gate_prefers(bv[lane ^ o], bi[lane ^ o], bv[lane], bi[lane])) {
          nv[lane] = bv[lane ^ o];
          ni[lane] = bi[lane ^ o];
        }
      }
      std::copy(nv, nv + 32, bv);
      std::copy(ni, ni + 32, bi);
    }
    for (int lane = 1; lane < 32; ++lane) EXPECT_EQ(bi[lane], bi[0]) << "the lanes disagree";
    chosen.push_back(bi[0]);
  }
  return chosen;
}

void expect_valid(const std::vector<int>& ids, int E, int k) {
  ASSERT_EQ(static_cast<int>(ids.size()), k);
  for (int id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, E);
  }
  EXPECT_EQ(static_cast<int>(std::set<int>(ids.begin(), ids.end()).size()), k) << "experts repeat";
}

TEST(GateTopK, HighestFirstTiesToTheLowerExpert) {
  EXPECT_EQ(warp_top_k({0.1f, 2.0f, -1.0f, 2.0f, 0.5f}, 3), (std::vector<int>{1, 3, 4}));
  std::vector<float> wide(70, 0.0f);
  wide[69] = 3.0f;
  wide[33] = 2.0f;
  EXPECT_EQ(warp_top_k(wide, 3), (std::vector<int>{69, 33, 0}));
  // All logits equal (the calibration sweep's zero gate, plan/calibration.h):
  // the first k experts, in order, also across lanes (E = 40 > 32).
  EXPECT_EQ(warp_top_k(std::vector<float>(8, 0.0f), 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(warp_top_k(std::vector<float>(40, 0.0f), 4), (std::vector<int>{0, 1, 2, 3}));
}

TEST(GateTopK, NanLogitsStillNameDistinctExpertsInRange) {
  // One NaN logit: its probability is NaN and it ranks last... and so do all
  // the others (NaN - max is NaN through the sum): every slot must still be
  // a real, distinct expert (it indexed past the logits and the load counts).
  for (int E : {2, 8, 31, 32, 33, 64, 100}) {
    std::vector<float> l(static_cast<std::size_t>(E), 0.5f);
    l[1] = kNan;
    expect_valid(warp_top_k(l, 2), E, 2);
    std::fill(l.begin(), l.end(), kNan);
    expect_valid(warp_top_k(l, std::min(E, 4)), E, std::min(E, 4));
    std::fill(l.begin(), l.end(), 1.0f);
    l[static_cast<std::size_t>(E - 1)] = kInf;  // inf - inf: NaN probabilities again
    expect_valid(warp_top_k(l, 2), E, 2);
  }
  EXPECT_EQ(warp_top_k({kNan, kNan, kNan}, 3), (std::vector<int>{0, 1, 2}));
}

TEST(GateTopK, PreferenceOrder) {
  EXPECT_TRUE(gate_prefers(0.1f, 5, 0.0f, -1));     // anything beats no candidate
  EXPECT_FALSE(gate_prefers(0.9f, -1, 0.1f, 2));    // no candidate beats nothing
  EXPECT_TRUE(gate_prefers(0.0f, 9, kNan, 1));      // a number beats NaN
  EXPECT_FALSE(gate_prefers(kNan, 1, 0.0f, 9));
  EXPECT_TRUE(gate_prefers(kNan, 1, kNan, 9));      // NaN against NaN: the lower expert
  EXPECT_TRUE(gate_prefers(0.5f, 7, 0.5f, 8));
  EXPECT_FALSE(gate_prefers(0.5f, 8, 0.5f, 7));
}

}  // namespace
}  // namespace moetrace::cuda
