// Simulator fidelity: the comparisons of bench/paper_bench.cc that hold, as
// regression tests. Each asserts that a simulated quantity stays within 15 %
// of the value the paper measured (and that the paper's ordering holds), so
// a change to the cost models, presets or builders that breaks the agreement
// fails here. Paper values are the papers' (../shared/papers), cited beside
// each; none comes from the simulator's own output. BENCHMARKS.md
// ("Simulator fidelity against the papers") has the full table, including
// the comparisons that do not hold yet and why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <string>

#include "moetrace/analyzer/trace.h"
#include "moetrace/plan/builders.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/trace_output.h"

namespace moetrace::sim {
namespace {

constexpr double kBand = 0.15;  // issue target: within 15 % of the paper's value

void expect_within(double simulated, double paper, const std::string& what) {
  EXPECT_LE(std::abs(simulated / paper - 1.0), kBand) << what << ": simulated " << simulated << ", paper " << paper;
}

// Mean iteration time from iteration `from` on (as paper_bench times it).
double iteration_time(const RunSpec& spec, int from) {
  const plan::Plan p = build_plan(spec);
  const SimResult r = simulate(p, spec.resolved_cost_model());
  std::vector<double> last(static_cast<std::size_t>(spec.common.iterations), 0.0);
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const int j = p.ops[i].coords.iteration;
    if (j >= 0 && j < spec.common.iterations) last[static_cast<std::size_t>(j)] = std::max(last[static_cast<std::size_t>(j)], r.end_s[i]);
  }
  double prev = 0, sum = 0;
  int n = 0;
  for (int j = 0; j < spec.common.iterations; ++j) {
    if (j >= from) {
      sum += last[static_cast<std::size_t>(j)] - prev;
      ++n;
    }
    prev = std::max(prev, last[static_cast<std::size_t>(j)]);
  }
  return sum / n;
}

// ppmoe Sec. 4.4 (DPMoE, small setting, DP 32 + EP 64 on 32 V100): the MoE
// forward is 82.6 % of the forward time, the two all-to-alls 65.5 % of it
// and 79.2 % of the MoE forward. Read as moetrace reads a trace: the op
// ranges of the simulated trace, forward phase, one rank.
TEST(PaperFidelity, PpmoeDpmoeForwardSplitSec44) {
  const RunSpec spec = run_preset("dpmoe-ppmoe-small");
  const auto dir = std::filesystem::temp_directory_path() / ("paper_fidelity." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "dpmoe.db").string();
  simulate_to_trace(path, build_plan(spec), spec.resolved_cost_model());
  const analyzer::Trace trace = analyzer::load_trace(path);
  std::map<OpKind, double> by_kind;
  double total = 0;
  for (const auto& op : trace.ops) {
    if (op.rank.value != 0 || op.phase != Phase::kForward) continue;
    by_kind[op.kind] += static_cast<double>(op.duration());
    total += static_cast<double>(op.duration());
  }
  std::filesystem::remove_all(dir);
  const double a2a = by_kind[OpKind::kDispatchAllToAll] + by_kind[OpKind::kCombineAllToAll];
  const double moe = a2a + by_kind[OpKind::kGate] + by_kind[OpKind::kPermute] + by_kind[OpKind::kExpertFfn] +
                     by_kind[OpKind::kUnpermute];
  ASSERT_GT(total, 0);
  expect_within(moe / total, 0.826, "MoE forward share of forward");
  expect_within(a2a / total, 0.655, "all-to-all share of forward");
  expect_within(a2a / moe, 0.792, "all-to-all share of MoE forward");
  // The paper's point: all-to-all dominates the DPMoE forward.
  EXPECT_GT(a2a / moe, 0.5);
}

// Times of DeepSpeed-MoE (the dpmoe-gpt-* presets: capacity padding),
// FasterMoE and Pro-Prophet on a pro-prophet Table III model, steady state.
struct ProProphetTimes {
  double deepspeed = 0, faster = 0, pro = 0;
};
ProProphetTimes pro_prophet_times(const std::string& model, int top_k, int ranks, const std::string& hardware = {},
                                  std::int64_t tokens = 0) {
  ProProphetTimes t;
  for (const char* v : {"dpmoe", "fastermoe", "pro-prophet"}) {
    RunSpec spec = run_preset(std::string(v) + "-" + model);
    spec.common.model.top_k = top_k;
    spec.common.ranks = ranks;
    spec.common.model.num_experts = ranks;  // one expert per GPU (pro-prophet Sec. VI)
    if (!hardware.empty()) {
      spec.cost_model_name = hardware;
      spec.common.memory_budget_bytes = spec.resolved_cost_model().device.memory_bytes;
    }
    if (tokens > 0) spec.routing.tokens_per_source = tokens;
    const double time = iteration_time(spec, 1);
    (std::string(v) == "dpmoe" ? t.deepspeed : std::string(v) == "fastermoe" ? t.faster : t.pro) = time;
  }
  return t;
}

// A row of pro-prophet's Table IV or V: speedups to DeepSpeed-MoE.
struct SpeedupRow {
  const char* model;
  int top_k;
  double faster, pro;
};

// Both speedups within 15 % of the paper's, and Pro-Prophet the fastest.
void expect_speedup_rows(std::initializer_list<SpeedupRow> rows, int ranks, const std::string& hardware = {},
                         std::int64_t tokens = 0) {
  for (const auto& row : rows) {
    const ProProphetTimes t = pro_prophet_times(row.model, row.top_k, ranks, hardware, tokens);
    const std::string what = std::string(row.model) + " k=" + std::to_string(row.top_k);
    expect_within(t.deepspeed / t.faster, row.faster, what + ": FasterMoE over DeepSpeed-MoE");
    expect_within(t.deepspeed / t.pro, row.pro, what + ": Pro-Prophet over DeepSpeed-MoE");
    EXPECT_LT(t.pro, t.faster) << what;
    EXPECT_LT(t.pro, t.deepspeed) << what;
  }
}

// pro-prophet Fig. 10c (4 HPWNV nodes, top-2): Pro-Prophet is 1.36-2.37x
// faster than DeepSpeed-MoE (Sec. VI-A). Checked on MoE-GPT-M and MoE-GPT-L,
// steady state (iterations 1-3; iteration 0 has no earlier distribution to
// plan on). On 8 nodes (Fig. 10d) the simulated speedup is above the range
// (BENCHMARKS.md).
TEST(PaperFidelity, ProProphetOverDeepSpeedTopTwoFig10) {
  for (const char* model : {"gpt-m", "gpt-l"}) {
    const ProProphetTimes t = pro_prophet_times(model, 2, 16);
    const double speedup = t.deepspeed / t.pro;
    EXPECT_GT(speedup, 1.0) << model << ": Pro-Prophet must beat DeepSpeed-MoE";
    EXPECT_GE(speedup, 1.36 / (1 + kBand)) << model;
    EXPECT_LE(speedup, 2.37 * (1 + kBand)) << model;
  }
}

// pro-prophet Fig. 10a/10b (top-1, 4 and 8 HPWNV nodes): Pro-Prophet is
// 1.47-2.66x faster than DeepSpeed-MoE (Sec. VI-A). Holds once DeepSpeed-MoE
// pads to its capacity (drop_tokens=False); the plain dpmoe builder gave
// 1.02-1.36x.
TEST(PaperFidelity, ProProphetOverDeepSpeedTopOneFig10) {
  for (int ranks : {16, 32}) {
    const ProProphetTimes t = pro_prophet_times("gpt-m", 1, ranks);
    const double speedup = t.deepspeed / t.pro;
    EXPECT_GE(speedup, 1.47 / (1 + kBand)) << ranks << " GPUs";
    EXPECT_LE(speedup, 2.66 * (1 + kBand)) << ranks << " GPUs";
  }
}

// pro-prophet Table IV (4 HPNV nodes): FasterMoE and Pro-Prophet over
// DeepSpeed-MoE, Pro-Prophet the fastest. Rows k = 1 MoE-GPT-M (1.99x,
// 2.22x), k = 1 MoE-GPT-DM (1.68x, 2.26x), k = 2 MoE-GPT-L (1.94x, 2.23x).
// Simulated on the HPWNV model (NVLink pairs are not modelled).
TEST(PaperFidelity, ProProphetTableFour) {
  expect_speedup_rows({{"gpt-m", 1, 1.99, 2.22}, {"gpt-dm", 1, 1.68, 2.26}, {"gpt-l", 2, 1.94, 2.23}}, 16);
}

// pro-prophet Fig. 10a (4 HPWNV nodes, top-1): Pro-Prophet is 1.01-1.23x
// faster than the better of DeepSpeed-MoE and FasterMoE. Checked on
// MoE-GPT-M and MoE-GPT-L, where the planner has computation to hide its
// transfers under; on the two smallest models FasterMoE is as fast in
// simulation (BENCHMARKS.md).
TEST(PaperFidelity, ProProphetOverBestBaselineTopOneFig10a) {
  for (const char* model : {"gpt-m", "gpt-l"}) {
    const ProProphetTimes t = pro_prophet_times(model, 1, 16);
    const double speedup = std::min(t.deepspeed, t.faster) / t.pro;
    EXPECT_GT(speedup, 1.0) << model << ": Pro-Prophet must beat both baselines";
    EXPECT_LE(speedup, 1.23 * (1 + kBand)) << model;
  }
}

// pro-prophet Table V (2 LPWNV nodes: the HPWNV node with RTX 2080 Ti; 8
// GPUs, 4096 tokens per iteration): FasterMoE and Pro-Prophet over
// DeepSpeed-MoE, Pro-Prophet the fastest. Rows k = 1 MoE-GPT-S (1.20x,
// 1.30x), k = 1 MoE-GPT-DS (1.12x, 1.30x), k = 2 MoE-GPT-DS (1.44x, 1.64x),
// k = 2 MoE-GPT-DM (1.25x, 1.58x). The rtx2080ti-pcie-ib100 preset comes
// from the datasheet and the HPWNV preset's fractions, not from this table.
TEST(PaperFidelity, ProProphetTableFiveLpwnv) {
  expect_speedup_rows({{"gpt-s", 1, 1.20, 1.30}, {"gpt-ds", 1, 1.12, 1.30}, {"gpt-ds", 2, 1.44, 1.64},
                       {"gpt-dm", 2, 1.25, 1.58}},
                      8, "rtx2080ti-pcie-ib100", 4096 / 8);
}

// mpipemoe Sec. V-D: MPipeMoE's memory footprint is on average 27 % and at
// most 47 % below FasterMoE's (Fig. 9). The models of Table III on 64 GPUs,
// 4k-32k tokens per GPU, n by Fig. 12, the fastest reuse strategy of S1-S4;
// FasterMoE = the fastermoe builder.
TEST(PaperFidelity, MpipemoeMemoryReductionSecVD) {
  double sum = 0, most = 0;
  int n = 0;
  for (const char* name : {"mpipemoe-gpt3-s", "mpipemoe-gpt3-xl", "mpipemoe-bert-l"})
    for (std::int64_t tokens : {4096, 8192, 16384, 32768}) {
      RunSpec spec = run_preset(name);
      spec.routing.tokens_per_source = tokens;
      spec.partitions = tokens < 8192 ? 2 : tokens <= 22528 ? 4 : 8;  // Fig. 12
      spec.common.memory_budget_bytes = 0;
      auto peak_and_time = [](const RunSpec& s) {
        const plan::Plan p = build_plan(s);
        const SimResult r = simulate(p, s.resolved_cost_model());
        std::int64_t peak = 0;
        for (const auto& m : r.memory) peak = std::max(peak, m.peak_bytes);
        return std::pair{peak, r.makespan_s};
      };
      std::pair<std::int64_t, double> best{0, 1e30};
      for (auto s : {plan::ReuseStrategy::kS1, plan::ReuseStrategy::kS2, plan::ReuseStrategy::kS3,
                     plan::ReuseStrategy::kS4}) {
        spec.strategy = s;
        const auto pt = peak_and_time(spec);
        if (pt.second < best.second) best = pt;
      }
      spec.strategy = plan::ReuseStrategy::kNone;
      spec.variant = "fastermoe";
      const auto faster = peak_and_time(spec);
      const double reduction = 1 - static_cast<double>(best.first) / static_cast<double>(faster.first);
      EXPECT_GT(reduction, 0) << name << " " << tokens;
      sum += reduction;
      most = std::max(most, reduction);
      ++n;
    }
  expect_within(sum / n, 0.27, "mean memory reduction vs FasterMoE");
  expect_within(most, 0.47, "highest memory reduction vs FasterMoE");
}

}  // namespace
}  // namespace moetrace::sim
