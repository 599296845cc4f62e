// Fitted performance models: least squares, alpha/beta from traces,
// interference factors, and the cost-model JSON. Expected numbers are
// derived by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>

#include "json_schema.h"
#include "moetrace/analyzer/cost_model.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/cost_model.h"
#include "loaded_trace.h"
#include "test_paths.h"

namespace moetrace::analyzer {
namespace {

const std::string kFittedModelsSchema = std::string(MOETRACE_SOURCE_DIR) + "/schemas/fitted_models.schema.json";
const std::string kSimSchema = std::string(MOETRACE_SOURCE_DIR) + "/schemas/cost_model.schema.json";

// Exactly linear points t = 2 + 3 x: alpha 2, beta 3, R^2 = 1, no residual.
TEST(LinearFit, ExactlyLinearPoints) {
  const std::vector<double> x{1, 2, 3, 4}, t{5, 8, 11, 14};
  const auto f = fit_linear(x, t);
  EXPECT_EQ(f.method, "least_squares");
  EXPECT_NEAR(f.alpha, 2.0, 1e-12);
  EXPECT_NEAR(f.beta, 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(f.r2, 1.0);
  EXPECT_NEAR(f.residual_rms, 0.0, 1e-12);
  EXPECT_EQ(f.points, 4);
  EXPECT_EQ(f.x_min, 1);
  EXPECT_EQ(f.x_max, 4);
}

// x = 0, 1, 2 and t = 1, 2, 4: mean x 1, mean t 7/3; Sxx = 2,
// Sxt = (-1)(-4/3) + (1)(5/3) = 3 -> beta = 1.5, alpha = 7/3 - 1.5 = 5/6.
// Residuals 1/6, -1/3, 1/6 -> SS_res = 1/6, RMS = sqrt(1/18);
// SS_tot = (16 + 1 + 25)/9 = 14/3 -> R^2 = 1 - (1/6)/(14/3) = 27/28.
TEST(LinearFit, NoisyPoints) {
  const std::vector<double> x{0, 1, 2}, t{1, 2, 4};
  const auto f = fit_linear(x, t);
  EXPECT_NEAR(f.beta, 1.5, 1e-12);
  EXPECT_NEAR(f.alpha, 5.0 / 6.0, 1e-12);
  EXPECT_NEAR(f.r2, 27.0 / 28.0, 1e-12);
  EXPECT_NEAR(f.residual_rms, std::sqrt(1.0 / 18.0), 1e-12);
}

// One size: alpha and beta are not separable; beta = mean t / x = 6 / 2.
TEST(LinearFit, OneSizeGivesAMeanRate) {
  const std::vector<double> x{2, 2}, t{5, 7};
  const auto f = fit_linear(x, t);
  EXPECT_EQ(f.method, "mean_rate");
  EXPECT_EQ(f.alpha, 0.0);
  EXPECT_DOUBLE_EQ(f.beta, 3.0);
  EXPECT_FALSE(fit_linear({}, {}).usable());
}

// Three lone expert FFNs of 1, 2, 3 MFLOP taking 1100, 2100, 3100 ns:
// t = 100 ns + 1 ns/kFLOP -> alpha = 1e-7 s, beta = 1e-12 s/FLOP, R^2 = 1.
// All-to-all on 2 ranks: two instances (chunks) of 1000 and 3000 bytes on
// both ranks taking 1010 and 3010 ns -> alpha = 10 ns, beta = 1 ns/byte,
// group size 2, one point per instance.
constexpr std::string_view kLinearTrace = R"(
  run world_size=2
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  stream id=2 rank=1 role=comm
  op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=0 end=1100 flops=1e6
  op rank=0 stream=0 kind=expert_ffn layer=0 iteration=1 start=10000 end=12100 flops=2e6
  op rank=0 stream=0 kind=expert_ffn layer=0 iteration=2 start=20000 end=23100 flops=3e6
  op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 chunk=0 start=30000 end=31010 bytes=1000
  op rank=1 stream=2 kind=dispatch_all_to_all layer=0 iteration=0 chunk=0 start=30000 end=31010 bytes=1000
  op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 chunk=1 start=40000 end=43010 bytes=3000
  op rank=1 stream=2 kind=dispatch_all_to_all layer=0 iteration=0 chunk=1 start=40000 end=43010 bytes=3000
)";

TEST(CostModel, AlphaBetaOfGemmsAndCollectives) {
  const auto m = fit_cost_model(testing::load_text_trace("linear.db", kLinearTrace));
  const auto* gemm = m.find_compute("expert_ffn");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->sample, "lone");
  EXPECT_NEAR(gemm->fit.alpha, 1e-7, 1e-15);
  EXPECT_NEAR(gemm->fit.beta, 1e-12, 1e-20);
  EXPECT_NEAR(gemm->fit.r2, 1.0, 1e-9);
  EXPECT_EQ(gemm->fit.points, 3);
  EXPECT_EQ(gemm->fit.x_max, 3e6);
  const auto* a2a = m.find_collective("all_to_all", 2);
  ASSERT_NE(a2a, nullptr);
  EXPECT_EQ(a2a->op_kinds, std::vector<std::string>{"dispatch_all_to_all"});
  EXPECT_EQ(a2a->fit.points, 2);
  EXPECT_NEAR(a2a->fit.alpha, 10e-9, 1e-15);
  EXPECT_NEAR(a2a->fit.beta, 1e-9, 1e-18);
  EXPECT_NEAR(a2a->fit.r2, 1.0, 1e-9);
}

// An uneven all-to-all: rank 0 sends 1000 bytes, rank 1 sends 3000; both
// ops end together, rank 0's started early and waited. The point is (3000
// bytes, rank 1's 3010 ns). A second instance (1000 / 500 bytes; rank 0's op
// 1010 ns, rank 1's 1500 ns) gives (1000, 1010 ns): alpha 10 ns, beta 1 ns/B.
TEST(CostModel, CollectivePointIsTheBusiestRankAndTheShortestTime) {
  const auto m = fit_cost_model(testing::load_text_trace("uneven.db", R"(
    run world_size=2
    stream id=1 rank=0 role=comm
    stream id=2 rank=1 role=comm
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=0 end=5010 bytes=1000
    op rank=1 stream=2 kind=dispatch_all_to_all layer=0 iteration=0 start=2000 end=5010 bytes=3000
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=1 start=10000 end=11010 bytes=1000
    op rank=1 stream=2 kind=dispatch_all_to_all layer=0 iteration=1 start=9510 end=11010 bytes=500
  )"));
  const auto* a2a = m.find_collective("all_to_all", 2);
  ASSERT_NE(a2a, nullptr);
  EXPECT_EQ(a2a->fit.points, 2);
  EXPECT_NEAR(a2a->fit.alpha, 10e-9, 1e-15);
  EXPECT_NEAR(a2a->fit.beta, 1e-9, 1e-18);
}

// Interference. Rank 0: a dispatch of 1000 bytes alone takes 1000 ns; the
// same dispatch under an expert FFN takes 1500 ns (1.5x slower):
//   mu_comp = (1000/1000) / (1500/1000) = 1/1.5.
// The overlapping FFN (1 MFLOP, [2000, 4000)) is under the dispatch for
// 1500 of its 2000 ns (75 % >= half) and takes as long as the lone FFN at
// [5000, 7000): sigma_comm = 1.
TEST(CostModel, InterferenceFactorOfAnOpOneAndAHalfTimesSlower) {
  const auto m = fit_cost_model(testing::load_text_trace("interference.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=0 end=1000 bytes=1000
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=2000 end=4000 flops=1e6
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=1 start=2200 end=3700 bytes=1000
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=1 start=5000 end=7000 flops=1e6
  )"));
  const auto* mu = m.find_factor("mu", "comp");
  ASSERT_NE(mu, nullptr);
  EXPECT_NEAR(mu->value, 1.0 / 1.5, 1e-12);
  EXPECT_EQ(mu->lone_ops, 1);
  EXPECT_EQ(mu->overlapped_ops, 1);
  const auto* sigma = m.find_factor("sigma", "comm");
  ASSERT_NE(sigma, nullptr);
  EXPECT_NEAR(sigma->value, 1.0, 1e-12);
  EXPECT_EQ(m.find_factor("eta", "comp"), nullptr);  // no copies at all
}

TEST(CostModel, JsonMatchesTheSchemaAndReadsBack) {
  const auto t = testing::load_text_trace("json.db", kLinearTrace);
  const auto m = fit_cost_model(t);
  const auto j = fitted_models_json(t, m);
  EXPECT_EQ(testing::schema_errors(j, kFittedModelsSchema), std::vector<std::string>{});
  const auto back = fitted_models_from_json(nlohmann::json::parse(j.dump()));
  ASSERT_EQ(back.compute.size(), m.compute.size());
  EXPECT_DOUBLE_EQ(back.compute[0].fit.beta, m.compute[0].fit.beta);
  ASSERT_NE(back.find_collective("all_to_all", 2), nullptr);
  EXPECT_DOUBLE_EQ(back.find_collective("all_to_all", 2)->fit.alpha, m.find_collective("all_to_all", 2)->fit.alpha);
}

// The simulator's cost model from the same fits. Every expert FFN is a
// forward (2 GEMM launches): t = 100 ns + 1e-12 s/FLOP x F = 2 x 50 ns + ...
// -> alpha per launch 5e-8 s. All-to-all at 2 ranks: alpha 10 ns, beta 1 ns/B.
TEST(CostModel, SimulatorCostModelFromTheFits) {
  const auto t = testing::load_text_trace("sim-export.db", kLinearTrace);
  const auto j = sim_cost_model_json(t, fit_cost_model(t), "h100-nvlink-ib");
  EXPECT_EQ(testing::schema_errors(j, kSimSchema), std::vector<std::string>{});
  EXPECT_EQ(j["base"], "h100-nvlink-ib");
  EXPECT_EQ(j["name"], "fitted:sim-export.db");
  const auto& ffn = j["compute_by_kind"]["expert_ffn"];
  EXPECT_NEAR(ffn["alpha_s"].get<double>(), 5e-8, 1e-15);
  EXPECT_NEAR(ffn["seconds_per_flop"].get<double>(), 1e-12, 1e-20);
  EXPECT_EQ(ffn["seconds_per_byte"].get<double>(), 0.0);
  const auto& a2a = j["collectives"]["all_to_all_v"];
  ASSERT_EQ(a2a.size(), 1u);
  EXPECT_EQ(a2a[0]["ranks"], 2);
  EXPECT_NEAR(a2a[0]["alpha_s"].get<double>(), 1e-8, 1e-15);
  EXPECT_NEAR(a2a[0]["beta_s"].get<double>(), 1e-9, 1e-18);
  EXPECT_EQ(j["all_to_all_volume"], "max_send");
  EXPECT_FALSE(j.contains("copy"));  // nothing measured: the preset's values stay
}

// The simulator reads what `moetrace fit` writes (its own parser, which
// refuses unknown keys and negative costs), with the fitted numbers in place.
TEST(CostModel, TheSimulatorLoadsTheFittedCostModel) {
  const auto t = testing::load_text_trace("sim-load.db", kLinearTrace);
  const auto j = sim_cost_model_json(t, fit_cost_model(t), "h100-nvlink-ib");
  const auto m = sim::cost_model_from_json(j.dump());
  EXPECT_NEAR(m.compute_cost(OpKind::kExpertFfn).alpha_s, 5e-8, 1e-15);
  EXPECT_NEAR(m.compute_cost(OpKind::kExpertFfn).seconds_per_flop, 1e-12, 1e-20);
  const auto a2a = m.collective(plan::CollectiveKind::kAllToAllV).at(2);
  EXPECT_NEAR(a2a.alpha_s, 1e-8, 1e-15);
  EXPECT_NEAR(a2a.beta_s, 1e-9, 1e-18);
  EXPECT_EQ(m.all_to_all_volume, sim::AllToAllVolume::kMaxSend);
  EXPECT_FALSE(m.all_to_all_counts_local);
}

// Forward and backward FFNs together: launches 2 and 4. Forward 1 MFLOP in
// 2 x 50 + 1000 = 1100 ns, forward 2 MFLOP in 2100 ns, backward 2 MFLOP in
// 4 x 50 + 2000 = 2200 ns: t = 50 ns x launches + 1 ns/kFLOP exactly.
TEST(CostModel, LaunchAwareFitSeparatesForwardAndBackward) {
  const auto m = fit_cost_model(testing::load_text_trace("launches.db", R"(
    stream id=0 rank=0 role=compute
    op rank=0 stream=0 kind=expert_ffn iteration=0 start=0 end=1100 flops=1e6
    op rank=0 stream=0 kind=expert_ffn iteration=1 start=5000 end=7100 flops=2e6
    op rank=0 stream=0 kind=expert_ffn iteration=1 phase=bwd start=10000 end=12200 flops=2e6
  )"));
  const auto* f = m.find_compute("expert_ffn");
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->launch_fit.usable);
  EXPECT_NEAR(f->launch_fit.alpha_per_launch, 50e-9, 1e-15);
  EXPECT_NEAR(f->launch_fit.beta, 1e-12, 1e-20);
}

// Host issue time from the ops' launch intervals. Expert FFN forwards (2
// GEMM launches) issued in 50, 52 and 90 us (median 52: the 90 us outlier
// does not move it), backwards (4 launches) in 84 and 86 us (median 85):
// the line through (2, 52) and (4, 85) has 16.5 us a launch and 19 us an
// op. Permutes (one launch count) issued in 40, 30 and 35 us: the median,
// 35 us an op. A gate without a launch interval gives no point; an
// all-to-all that ran nothing on the device still has its host time (4 us).
TEST(CostModel, HostIssueFromLaunchIntervals) {
  const auto t = testing::load_text_trace("host.db", R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    op rank=0 stream=0 kind=expert_ffn iteration=0 start=100000 end=101000 flops=1e6 launch_start=0 launch_end=50000
    op rank=0 stream=0 kind=expert_ffn iteration=1 start=200000 end=201000 flops=1e6 launch_start=110000 launch_end=162000
    op rank=0 stream=0 kind=expert_ffn iteration=2 start=300000 end=301000 flops=1e6 launch_start=210000 launch_end=300000
    op rank=0 stream=0 kind=expert_ffn iteration=0 phase=bwd start=400000 end=402000 flops=2e6 launch_start=310000 launch_end=394000
    op rank=0 stream=0 kind=expert_ffn iteration=1 phase=bwd start=500000 end=502000 flops=2e6 launch_start=410000 launch_end=496000
    op rank=0 stream=0 kind=permute iteration=0 start=600000 end=600500 bytes=1000 launch_start=510000 launch_end=550000
    op rank=0 stream=0 kind=permute iteration=1 start=610000 end=610500 bytes=1000 launch_start=560000 launch_end=590000
    op rank=0 stream=0 kind=permute iteration=2 start=620000 end=620500 bytes=1000 launch_start=591000 launch_end=626000
    op rank=0 stream=0 kind=gate iteration=0 start=700000 end=700500 flops=1e3
    op rank=0 stream=1 kind=dispatch_all_to_all iteration=0 start=800000 end=800000 launch_start=700000 launch_end=704000
  )");
  const auto m = fit_cost_model(t);
  auto find = [&](std::string_view kind) -> const HostIssueFit* {
    for (const auto& f : m.host_issue)
      if (f.kind == kind) return &f;
    return nullptr;
  };
  const auto* ffn = find("expert_ffn");
  ASSERT_NE(ffn, nullptr);
  EXPECT_EQ(ffn->method, "medians_line");
  EXPECT_EQ(ffn->points, 5);
  EXPECT_NEAR(ffn->per_launch, 16.5e-6, 1e-12);
  EXPECT_NEAR(ffn->alpha, 19e-6, 1e-12);
  const auto* permute = find("permute");
  ASSERT_NE(permute, nullptr);
  EXPECT_EQ(permute->method, "median");
  EXPECT_NEAR(permute->alpha, 35e-6, 1e-12);
  EXPECT_EQ(permute->per_launch, 0);
  EXPECT_EQ(find("gate"), nullptr);
  ASSERT_NE(find("dispatch_all_to_all"), nullptr);
  EXPECT_NEAR(find("dispatch_all_to_all")->alpha, 4e-6, 1e-12);
  // The simulator's cost model carries them; both JSON forms pass their
  // schemas and read back.
  const auto j = sim_cost_model_json(t, m, "h100-nvlink-ib");
  EXPECT_EQ(testing::schema_errors(j, kSimSchema), std::vector<std::string>{});
  const auto sim = sim::cost_model_from_json(j.dump());
  EXPECT_NEAR(sim.host_issue.at(OpKind::kExpertFfn).at(4), 19e-6 + 4 * 16.5e-6, 1e-12);
  EXPECT_NEAR(sim.host_issue.at(OpKind::kPermute).at(1), 35e-6, 1e-12);
  const auto fits = fitted_models_json(t, m);
  EXPECT_EQ(testing::schema_errors(fits, kFittedModelsSchema), std::vector<std::string>{});
  const auto back = fitted_models_from_json(nlohmann::json::parse(fits.dump()));
  ASSERT_EQ(back.host_issue.size(), m.host_issue.size());
  EXPECT_DOUBLE_EQ(back.host_issue[0].per_launch, m.host_issue[0].per_launch);
}

// A fit that comes out negative is clamped for the simulator (which refuses
// negative costs) and named in the description: dispatches of 1000 and 2000
// bytes taking 1000 and 3000 ns -> alpha = -1000 ns.
TEST(CostModel, NegativeFitsAreClampedAndNamed) {
  const auto t = testing::load_text_trace("negative.db", R"(
    stream id=1 rank=0 role=comm
    op rank=0 stream=1 kind=dispatch_all_to_all iteration=0 start=0 end=1000 bytes=1000
    op rank=0 stream=1 kind=dispatch_all_to_all iteration=1 start=5000 end=8000 bytes=2000
  )");
  const auto j = sim_cost_model_json(t, fit_cost_model(t));
  EXPECT_EQ(testing::schema_errors(j, kSimSchema), std::vector<std::string>{});
  EXPECT_EQ(j["collectives"]["all_to_all_v"][0]["alpha_s"].get<double>(), 0.0);
  EXPECT_NE(j["description"].get<std::string>().find("collectives.all_to_all_v[ranks=1].alpha_s"), std::string::npos)
      << j["description"];
  EXPECT_FALSE(j.contains("base"));
}

TEST(CostModel, MalformedJsonNamesTheField) {
  nlohmann::json j = {{"cost_model_version", 1}, {"compute", {{{"op_kind", "gate"}}}}};
  try {
    fitted_models_from_json(j);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "fitted models: compute[0] lacks \"x\"");
  }
  EXPECT_THROW(fitted_models_from_json(nlohmann::json{{"cost_model_version", 99}}), Error);
  // The schema rejects a model without its sections.
  EXPECT_FALSE(testing::schema_errors(nlohmann::json{{"cost_model_version", 1}}, kFittedModelsSchema).empty());
}

}  // namespace
}  // namespace moetrace::analyzer
