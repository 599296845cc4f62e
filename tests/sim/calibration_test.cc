// The calibration sweep of `moetrace run --calibrate` (plan/calibration.h):
// a valid plan; simulated and written as a trace, least-squares fits of its
// lone ops recover the simulator's own alpha and beta (GEMMs per launch and
// per FLOP, all-to-all and all-reduce per group size, copies), and its
// overlapped ops run at the interference factors the model sets — a round
// trip through the trace writer and loader that fails if the sweep, the
// simulator or the trace lose a term. Its routing ops run on the CPU
// executor, which checks that their gates route where the layouts say.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include "moetrace/analyzer/cost_model.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/plan/calibration.h"
#include "moetrace/plan/cpu_executor.h"
#include "moetrace/plan/reference.h"
#include "moetrace/plan/validate.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/trace_output.h"
#include "text_trace.h"

namespace moetrace::sim {
namespace {

plan::CalibrationConfig small_config() {
  return {.ranks = 8, .model_dim = 512, .expert_hidden = 2048, .min_rows = 64, .max_rows = 4096, .min_peer_rows = 4,
          .max_peer_rows = 1024};
}

// The preset in the form the fits have (pipemoe Eq. 13: startups plus
// FLOPs, no roofline): what they must recover exactly.
CostModel model_with_interference() {
  CostModel m = cost_model_preset("h100-nvlink-ib");
  m.compute.gemm_seconds_per_byte = 0;
  m.interference.sigma_comm = 0.9;
  m.interference.sigma_mem = 0.97;
  m.interference.mu_comp = 0.8;
  m.interference.mu_mem = 0.85;
  m.interference.eta_comp = 0.95;
  m.interference.eta_comm = 0.75;
  return m;
}

// small_config() with the sweep sized by `model`'s own costs (what
// `run --calibrate` estimates from a preset).
plan::CalibrationConfig config_sized_by(const CostModel& model) {
  plan::CalibrationConfig c = small_config();
  const auto& ffn = model.compute_cost(OpKind::kExpertFfn);
  const auto a2a8 = model.collective(plan::CollectiveKind::kAllToAllV).at(8);
  c.estimates = {ffn.alpha_s, ffn.seconds_per_flop, a2a8.alpha_s, a2a8.beta_s, model.copy_d2h.alpha_s,
                 model.copy_d2h.beta_s};
  return c;
}

struct Ls {
  double alpha = 0, beta = 0;
};

// t = alpha + beta x.
Ls fit(const std::vector<double>& x, const std::vector<double>& t) {
  double sx = 0, st = 0, sxx = 0, sxt = 0;
  const double n = static_cast<double>(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    st += t[i];
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - sx / n) * (x[i] - sx / n);
    sxt += (x[i] - sx / n) * (t[i] - st / n);
  }
  Ls f;
  f.beta = sxt / sxx;
  f.alpha = st / n - f.beta * sx / n;
  return f;
}

// t = a L + b x (no intercept): the simulator's compute form with L launches.
// Normal equations A [a b]^T = y of the rows (L_i, x_i), solved by Cramer's rule.
Ls fit_launches(const std::vector<double>& l, const std::vector<double>& x, const std::vector<double>& t) {
  double A[2][2] = {{0, 0}, {0, 0}}, y[2] = {0, 0};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double row[2] = {l[i], x[i]};
    for (int r = 0; r < 2; ++r) {
      y[r] += row[r] * t[i];
      for (int c = 0; c < 2; ++c) A[r][c] += row[r] * row[c];
    }
  }
  const double det = A[0][0] * A[1][1] - A[0][1] * A[1][0];
  return {(y[0] * A[1][1] - A[0][1] * y[1]) / det, (A[0][0] * y[1] - A[1][0] * y[0]) / det};
}

TEST(Calibration, PlanIsValid) {
  const auto c = small_config();
  const plan::Plan p = plan::build_calibration(c);
  EXPECT_EQ(plan::check_plan(p), std::vector<std::string>{});
  EXPECT_EQ(p.variant, "calibration");
  EXPECT_EQ(c.groups(), (std::vector<int>{2, 4, 8}));
  plan::CalibrationConfig bad = c;
  bad.group_sizes = {9};
  EXPECT_THROW(plan::build_calibration(bad), ConfigError);
  bad = c;
  bad.max_rows = 1;
  EXPECT_THROW(plan::build_calibration(bad), ConfigError);
}

// The routing ops: a zero gate ties every expert, so every token goes to
// experts 0 .. top_k-1 and the layouts the plan was built with hold. The
// CPU executor fails an op whose gate routed otherwise ("the gate routed N
// rows to expert e, the plan was built for M"); here every op runs.
TEST(Calibration, RoutingOpsRunOnTheCpuExecutor) {
  plan::CalibrationConfig c{.ranks = 2, .model_dim = 8, .expert_hidden = 16, .min_rows = 4, .max_rows = 16,
                            .min_peer_rows = 1, .max_peer_rows = 2, .repeats = 1, .interference = false};
  c.experts = 6;  // Qwen-style fine-grained routing: more experts than ranks
  c.top_k = 3;
  const plan::Plan p = plan::build_calibration(c);
  EXPECT_EQ(plan::check_plan(p), std::vector<std::string>{});
  EXPECT_EQ(p.dims.num_experts, 6);
  EXPECT_EQ(p.dims.top_k, 3);
  std::map<std::pair<OpKind, Phase>, int> ops;
  for (const auto& op : p.ops) ++ops[{op.kind, op.coords.phase}];
  // 3 sizes (4, 8, 16 rows) on each of 2 ranks.
  for (OpKind k : {OpKind::kGate, OpKind::kPermute, OpKind::kUnpermute})
    for (Phase ph : {Phase::kForward, Phase::kBackward})
      EXPECT_EQ((ops[{k, ph}]), 6) << op_kind_name(k) << " " << static_cast<int>(ph);
  for (const auto& op : p.ops)
    if (op.kind == OpKind::kPermute && op.coords.phase == Phase::kForward) {
      const auto& d = std::get<plan::Permute>(op.data);
      EXPECT_EQ(d.out.rows, 3 * d.x.rows) << op.name;  // tokens x top_k rows
      EXPECT_EQ(op.bytes, 3 * d.x.rows * 8 * 2) << op.name;
    }
  const plan::ModelShape shape = plan::calibration_model_shape(c);
  const plan::ModelWeights w = plan::random_weights(shape, 1);
  const plan::TrainingData data = plan::random_training_data(shape, 1, {16, 16}, 2);
  const plan::CpuExecutionResult r = plan::execute_on_cpu(p, w, data);
  EXPECT_EQ(r.ops_executed, static_cast<std::int64_t>(p.ops.size()));

  plan::CalibrationConfig bad = c;
  bad.top_k = 7;
  EXPECT_THROW(plan::build_calibration(bad), ConfigError);
  bad.routing_ops = false;  // no gate: top_k and experts are not used
  EXPECT_NO_THROW(plan::build_calibration(bad));
}

TEST(Calibration, FitsOfTheSimulatedTraceRecoverTheModel) {
  const CostModel model = model_with_interference();
  const auto& ffn = model.compute_cost(OpKind::kExpertFfn);
  const plan::Plan p = plan::build_calibration(config_sized_by(model));
  const SimResult r = simulate(p, model);
  const auto path = moetrace::testing::temp_path("calibration.db");
  write_trace(path, p, model, r);
  const analyzer::Trace t = analyzer::load_trace(path);
  std::filesystem::remove(path);
  ASSERT_EQ(t.ops.size(), p.ops.size());

  // Lone ops (nothing else on their rank meanwhile), by what they measure.
  std::map<std::int32_t, std::vector<std::pair<std::int64_t, std::int64_t>>> busy;  // rank -> spans
  for (const auto& op : t.ops) busy[op.rank.value].push_back({op.start_ns, op.end_ns});
  auto lone = [&](const analyzer::OpRange& op) {
    for (const auto& [s, e] : busy[op.rank.value])
      if (s < op.end_ns && e > op.start_ns && !(s == op.start_ns && e == op.end_ns)) return false;
    return true;
  };
  // Participants of each collective instance (chunk = sample number).
  std::map<std::int32_t, int> members;
  for (const auto& op : t.ops)
    if (op.kind == OpKind::kDispatchAllToAll || op.kind == OpKind::kGradAllReduce) ++members[op.chunk];

  std::vector<double> fl, fx, ft;
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> a2a, ar;
  std::vector<double> d2h_x, d2h_t, h2d_x, h2d_t;
  int lone_ops = 0;
  for (const auto& op : t.ops) {
    if (!lone(op)) continue;
    ++lone_ops;
    const double secs = static_cast<double>(op.duration()) * 1e-9;
    switch (op.kind) {
      case OpKind::kExpertFfn:
        fl.push_back(op.phase == Phase::kBackward ? 4 : 2);
        fx.push_back(op.flops);
        ft.push_back(secs);
        break;
      case OpKind::kDispatchAllToAll:
        a2a[members[op.chunk]].first.push_back(static_cast<double>(op.bytes));
        a2a[members[op.chunk]].second.push_back(secs);
        break;
      case OpKind::kGradAllReduce:
        ar[members[op.chunk]].first.push_back(static_cast<double>(op.bytes));
        ar[members[op.chunk]].second.push_back(secs);
        break;
      case OpKind::kOffload:
        d2h_x.push_back(static_cast<double>(op.bytes));
        d2h_t.push_back(secs);
        break;
      case OpKind::kPrefetch:
        h2d_x.push_back(static_cast<double>(op.bytes));
        h2d_t.push_back(secs);
        break;
      default: break;
    }
  }
  ASSERT_GT(lone_ops, 500);
  // Nanosecond timestamps: alphas within a few ns, betas within 1e-4.
  const Ls g = fit_launches(fl, fx, ft);
  EXPECT_NEAR(g.alpha, ffn.alpha_s, 2e-9);
  EXPECT_NEAR(g.beta, ffn.seconds_per_flop, 1e-4 * ffn.seconds_per_flop);
  ASSERT_EQ(a2a.size(), 3u);
  for (const auto& [group, xt] : a2a) {
    const auto want = model.collective(plan::CollectiveKind::kAllToAllV).at(group);
    const Ls f = fit(xt.first, xt.second);
    EXPECT_NEAR(f.alpha, want.alpha_s, 2e-9) << "P=" << group;
    EXPECT_NEAR(f.beta, want.beta_s, 1e-4 * want.beta_s) << "P=" << group;
  }
  for (const auto& [group, xt] : ar) {
    const auto want = model.collective(plan::CollectiveKind::kAllReduce).at(group);
    const Ls f = fit(xt.first, xt.second);
    EXPECT_NEAR(f.alpha, want.alpha_s, 2e-9) << "P=" << group;
    EXPECT_NEAR(f.beta, want.beta_s, 1e-4 * want.beta_s) << "P=" << group;
  }
  const Ls d2h = fit(d2h_x, d2h_t), h2d = fit(h2d_x, h2d_t);
  EXPECT_NEAR(d2h.alpha, model.copy_d2h.alpha_s, 2e-9);
  EXPECT_NEAR(d2h.beta, model.copy_d2h.beta_s, 1e-4 * model.copy_d2h.beta_s);
  EXPECT_NEAR(h2d.alpha, model.copy_h2d.alpha_s, 2e-9);
  EXPECT_NEAR(h2d.beta, model.copy_h2d.beta_s, 1e-4 * model.copy_h2d.beta_s);

  // Interference: an op overlapped for its whole life by exactly one other
  // class runs at that factor x its nominal speed (mpipemoe Sec. II-C).
  auto cls = [](OpKind k) { return k == OpKind::kExpertFfn ? 0 : (k == OpKind::kOffload || k == OpKind::kPrefetch) ? 2 : 1; };
  std::map<std::pair<int, int>, std::vector<double>> ratio;  // (target, interferer) -> nominal / actual
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const auto& op = p.ops[i];
    const int me = cls(op.kind);
    int covering = -1;
    bool clean = true;
    for (const auto& other : p.ops) {
      if (other.rank != op.rank || other.id == op.id) continue;
      const auto j = static_cast<std::size_t>(other.id.value);
      if (r.start_s[j] >= r.end_s[i] || r.end_s[j] <= r.start_s[i]) continue;
      const int oc = cls(other.kind);
      const bool covers = r.start_s[j] <= r.start_s[i] && r.end_s[j] >= r.end_s[i];
      if (covers && (covering == -1 || covering == oc)) covering = oc;
      else clean = false;
    }
    if (!clean || covering < 0 || covering == me) continue;
    ratio[{me, covering}].push_back(r.nominal_s[i] / (r.end_s[i] - r.start_s[i]));
  }
  const auto& f = model.interference;
  const std::map<std::pair<int, int>, double> want = {{{0, 1}, f.sigma_comm}, {{0, 2}, f.sigma_mem},
                                                      {{1, 0}, f.mu_comp},    {{1, 2}, f.mu_mem},
                                                      {{2, 0}, f.eta_comp},   {{2, 1}, f.eta_comm}};
  for (const auto& [key, value] : want) {
    ASSERT_FALSE(ratio[key].empty()) << "no clean sample of target " << key.first << " under " << key.second;
    for (double v : ratio[key]) EXPECT_NEAR(v, value, 1e-9) << key.first << " under " << key.second;
  }
}

// The same round trip through the analyzer's fitter (`moetrace fit`):
// alpha/beta per op kind and group size come back, and the interference
// factors within 5 % (an op half overlapped counts as overlapped, which
// dilutes the factor of the long ops of the pairs a little).
TEST(Calibration, MoetraceFitRecoversTheModel) {
  CostModel model = model_with_interference();
  // Routing ops of their own speed (none of the preset's): the gate by its
  // FLOPs with a launch per GEMM, permute and unpermute by the bytes they move.
  model.compute_by_kind[OpKind::kGate] = {.alpha_s = 9e-6, .seconds_per_flop = 1.0 / 40e12};
  model.compute_by_kind[OpKind::kPermute] = {.alpha_s = 4e-6, .seconds_per_byte = 1.0 / 1.5e12};
  model.compute_by_kind[OpKind::kUnpermute] = {.alpha_s = 6e-6, .seconds_per_byte = 1.0 / 1.1e12};
  const auto& ffn = model.compute_cost(OpKind::kExpertFfn);
  const plan::Plan p = plan::build_calibration(config_sized_by(model));
  const auto path = moetrace::testing::temp_path("calibration_fit.db");
  write_trace(path, p, model, simulate(p, model));
  const analyzer::Trace t = analyzer::load_trace(path);
  std::filesystem::remove(path);
  const analyzer::CostModel fits = analyzer::fit_cost_model(t);

  const auto* gemm = fits.find_compute("expert_ffn");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->sample, "lone");
  ASSERT_TRUE(gemm->launch_fit.usable);
  EXPECT_NEAR(gemm->launch_fit.alpha_per_launch, ffn.alpha_s, 1e-3 * ffn.alpha_s);
  EXPECT_NEAR(gemm->launch_fit.beta, ffn.seconds_per_flop, 1e-4 * ffn.seconds_per_flop);
  for (OpKind k : {OpKind::kGate, OpKind::kPermute, OpKind::kUnpermute}) {
    const std::string name(op_kind_name(k));
    const auto* f = fits.find_compute(name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(f->sample, "lone") << name;
    EXPECT_EQ(f->x, k == OpKind::kGate ? "flops" : "bytes") << name;
    ASSERT_TRUE(f->launch_fit.usable) << name;
    const ComputeCost& want = model.compute_by_kind.at(k);
    const double beta = k == OpKind::kGate ? want.seconds_per_flop : want.seconds_per_byte;
    EXPECT_NEAR(f->launch_fit.alpha_per_launch, want.alpha_s, 1e-3 * want.alpha_s) << name;
    EXPECT_NEAR(f->launch_fit.beta, beta, 1e-4 * beta) << name;
  }
  for (int g : {2, 4, 8}) {
    for (auto [kind, ck] : {std::pair{"all_to_all", plan::CollectiveKind::kAllToAllV},
                            std::pair{"all_reduce", plan::CollectiveKind::kAllReduce}}) {
      const auto* f = fits.find_collective(kind, g);
      ASSERT_NE(f, nullptr) << kind << " P=" << g;
      EXPECT_EQ(f->fit.method, "least_squares");
      const auto want = model.collective(ck).at(g);
      EXPECT_NEAR(f->fit.alpha, want.alpha_s, 1e-3 * want.alpha_s) << kind << " P=" << g;
      // The trace's whole-nanosecond timestamps move a slope by up to about
      // 1 ns over the span of sizes; at P = 2 (the smallest messages) that
      // is more than 1e-4 of it.
      const double rounding = 1e-9 / (f->fit.x_max - f->fit.x_min);
      EXPECT_NEAR(f->fit.beta, want.beta_s, std::max(1e-4 * want.beta_s, rounding)) << kind << " P=" << g;
      EXPECT_GT(f->fit.r2, 0.9999);
    }
  }
  for (auto [kind, want] : {std::pair{"offload", model.copy_d2h}, std::pair{"prefetch", model.copy_h2d}}) {
    const analyzer::CostModelFit* f = nullptr;
    for (const auto& x : fits.copies)
      if (x.kind == kind) f = &x;
    ASSERT_NE(f, nullptr) << kind;
    EXPECT_NEAR(f->fit.alpha, want.alpha_s, 1e-3 * want.alpha_s) << kind;
    EXPECT_NEAR(f->fit.beta, want.beta_s, 1e-4 * want.beta_s) << kind;
  }
  const auto& x = model.interference;
  for (auto [factor, interferer, want] :
       {std::tuple{"sigma", "comm", x.sigma_comm}, std::tuple{"sigma", "mem", x.sigma_mem},
        std::tuple{"mu", "comp", x.mu_comp}, std::tuple{"mu", "mem", x.mu_mem},
        std::tuple{"eta", "comp", x.eta_comp}, std::tuple{"eta", "comm", x.eta_comm}}) {
    const auto* f = fits.find_factor(factor, interferer);
    ASSERT_NE(f, nullptr) << factor << "_" << interferer;
    EXPECT_NEAR(f->value, want, 0.05 * want) << factor << "_" << interferer;
  }
}

}  // namespace
}  // namespace moetrace::sim
