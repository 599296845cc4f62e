// The CUDA executor on a real GPU (ctest label `gpu`; every test skips with
// the probe's reason where there is no GPU or driver). Each variant's plan,
// run with the emulated communicator, must reproduce the float64 reference
// of kernels/plan (outputs, input gradients, final parameters of every copy):
// relative error (max norm) <= 1e-5 in fp32, <= 5e-2 in bf16 (the goal of
// 2e-2 is printed: kBf16Tolerance says why it is not asserted).
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "gpu_support.h"
#include "trace_rows.h"
#include "moetrace/cuda/run.h"
#include "moetrace/plan/builders.h"
#include "moetrace/plan/routing.h"
#include "variant_plans.h"

namespace moetrace::cuda {
namespace {

using testing::GpuFixture;
using testing::make_gpu_fixture;

constexpr double kFp32Tolerance = 1e-5;
// bf16: the goal is 2e-2 (max norm). Storing activations, the gradients
// between ops and the parameters in bf16, as the executor does (as mixed-
// precision training does; sums in fp32), cannot reach it on this model: an
// exact CPU emulation of the executor's 17 bf16 storage points on this very
// fixture (tools/bf16_storage_error.py, seed 5) gives 0.016 on the outputs at
// P = 4 and 0.033 for ppmoe's tensor-parallel pair, and with the GPU's fp32
// sums moving the roundings (100 perturbed runs) 25 % (P = 4) to 92 % (ppmoe)
// of the runs exceed 2e-2 somewhere, up to 0.037. The assertion is at 5e-2,
// above every such run; a wrong route, index or sum errs by 0.1 or more.
// Each case prints whether it met the goal. A reference that rounds the same
// tensors to bf16 at the same points does not tighten this: the emulation's
// perturbed runs land 0.014-0.052 from it (`--against-rounded`,
// BENCHMARKS.md, "A bf16-rounding reference does not tighten the bf16
// check").
constexpr double kBf16Goal = 2e-2;
constexpr double kBf16Tolerance = 5e-2;

plan::ModelShape small_shape(int layers, int experts, int top_k, std::int64_t dense, bool attention) {
  return {.num_layers = layers, .num_experts = experts, .top_k = top_k, .model_dim = 16, .expert_hidden = 24,
          .dense_hidden = dense, .attention = attention, .learning_rate = 0.05};
}

struct Case {
  std::string name;
  plan::Plan plan;
};

// Whether MOETRACE_TEST_VARIANTS (comma-separated case names, e.g.
// "dpmoe,pipemoe_r2"; unset or empty: every case) names `name`. Lets a
// sanitizer run each variant in a process of its own: in one process
// racecheck's host memory passed an H200 machine's 128 GB by the second
// variant (the OOM killer ended it).
bool selected(const std::string& name) {
  const char* env = std::getenv("MOETRACE_TEST_VARIANTS");
  if (env == nullptr || *env == '\0') return true;
  const std::string list = std::string(",") + env + ",";
  return list.find("," + name + ",") != std::string::npos;
}

// Every variant on the reference's routing (the plans of kernels/plan's
// equivalence tests, a little wider so GEMMs are not degenerate).
std::vector<Case> cases(const GpuFixture& f, int ranks) {
  std::vector<Case> out;
  for (auto& [name, p] : testing::variant_plans(f.shape, ranks, f.data.iterations, f.ref.load))
    if (selected(name)) out.push_back({name, std::move(p)});
  // A misspelt name must not pass as a sanitizer run of nothing.
  if (out.empty()) ADD_FAILURE() << "MOETRACE_TEST_VARIANTS names no case at P = " << ranks;
  return out;
}

// The norm-wise relative error in the Frobenius norm, ||a - b||_F / ||b||_F:
// printed beside plan::relative_error's max-norm one (largest element error
// over the largest reference element).
double frobenius_error(const plan::Matrix& a, const plan::Matrix& b) {
  if (a.rows != b.rows || a.cols != b.cols) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    diff += (a.data[i] - b.data[i]) * (a.data[i] - b.data[i]);
    norm += b.data[i] * b.data[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

void expect_matches_reference(const plan::Plan& p, const GpuFixture& f, const RunResult& r, double tol) {
  EXPECT_EQ(r.routing_mismatches, 0) << "the gates routed differently from the plan";
  ASSERT_EQ(r.outputs.size(), f.ref.outputs.size());
  // The largest errors, printed whether or not they pass: the measured
  // numerics of each variant and precision (BENCHMARKS.md).
  double worst_out = 0, worst_grad = 0, worst_weight = 0, fro_out = 0, fro_grad = 0;
  for (std::size_t i = 0; i < r.outputs.size(); ++i) {
    const double out = plan::relative_error(r.outputs[i], f.ref.outputs[i]);
    const double grad = plan::relative_error(r.input_grads[i], f.ref.input_grads[i]);
    worst_out = std::max(worst_out, out);
    worst_grad = std::max(worst_grad, grad);
    fro_out = std::max(fro_out, frobenius_error(r.outputs[i], f.ref.outputs[i]));
    fro_grad = std::max(fro_grad, frobenius_error(r.input_grads[i], f.ref.input_grads[i]));
    EXPECT_LE(out, tol) << "output " << i;
    EXPECT_LE(grad, tol) << "input grad " << i;
  }
  std::size_t experts = 0;
  for (const auto& cp : r.final_params) {
    const plan::Matrix want = plan::param_slice(f.ref.final_weights, cp.slice);
    const double err = plan::relative_error(cp.value, want);
    worst_weight = std::max(worst_weight, err);
    EXPECT_LE(err, tol) << plan::param_kind_name(cp.slice.kind) << " layer " << cp.slice.layer << " expert "
                        << cp.slice.expert << " rank " << cp.rank.value;
    if (cp.slice.kind == plan::ParamKind::kExpert) ++experts;
  }
  const bool bf16 = tol == kBf16Tolerance;
  const bool goal_met = std::max({worst_out, worst_grad, worst_weight}) <= kBf16Goal;
  std::cout << "[ numerics ] " << p.variant << " P" << p.world_size << " tolerance " << tol
            << (bf16 ? (goal_met ? " (goal 2e-2 met)" : " (goal 2e-2 NOT met)") : "")
            << ": largest relative error, outputs " << worst_out << ", input grads " << worst_grad
            << ", weights " << worst_weight << "; Frobenius, outputs " << fro_out << ", input grads " << fro_grad
            << std::endl;
  EXPECT_GE(experts, static_cast<std::size_t>(f.shape.num_layers * f.shape.num_experts));
  // The gates routed exactly what the plan was built for.
  std::map<std::tuple<int, int, int, int>, std::int64_t> plan_load;
  for (const auto& e : p.loads) plan_load[{e.iteration, e.layer, e.source, e.expert}] = e.tokens;
  for (const auto& e : r.measured_load)
    EXPECT_EQ(e.tokens, (plan_load[{e.iteration, e.layer, e.source, e.expert}]))
        << "it" << e.iteration << " L" << e.layer << " src" << e.source << " e" << e.expert;
}

ExecutorOptions options(Precision p) {
  ExecutorOptions o;
  o.precision = p;
  o.capture_results = true;
  // Pieces of 64 bytes: every transfer of these small shapes spans several,
  // as the default 64 KiB pieces' transfers of real sizes do (a sender's
  // pacing-only segment past its first piece once read a wild address).
  o.link = parse_link_model("latency_us=2,bandwidth_gb_s=200,sms=4,piece_bytes=64");
  return o;
}

// The routed tokens of each block at world size P: uneven, so that
// all-to-all-v sees different counts from every peer.
std::vector<std::int64_t> block_tokens(int ranks) {
  static const std::int64_t kTokens[] = {21, 9, 14, 17, 11, 19, 6, 15};
  return {std::begin(kTokens), std::begin(kTokens) + ranks};
}

class EveryVariant : public ::testing::TestWithParam<int> {};

// The options of a check against the reference in `prec`: in bf16 the gates
// route as the reference's did (reference_routing), and its tolerance.
ExecutorOptions reference_options(Precision prec, const GpuFixture& f) {
  ExecutorOptions o = options(prec);
  if (prec == Precision::kBf16) {
    o.routing = RoutingMode::kPlanned;
    o.routing_table = testing::reference_routing(f);
  }
  return o;
}

double tolerance(Precision prec) { return prec == Precision::kFp32 ? kFp32Tolerance : kBf16Tolerance; }

// Every variant's plan at `ranks`, in both precisions: the communicator,
// launch and expert GEMMs of `base`, the rest as reference_options makes it.
void expect_every_variant_matches(const GpuFixture& f, int ranks, const ExecutorOptions& base) {
  for (Precision prec : {Precision::kFp32, Precision::kBf16}) {
    ExecutorOptions o = reference_options(prec, f);
    o.communicator = base.communicator;
    o.launch = base.launch;
    o.expert_gemm = base.expert_gemm;
    for (const Case& c : cases(f, ranks)) {
      SCOPED_TRACE(c.name + " " + precision_name(prec) + " " + expert_gemm_name(o.expert_gemm));
      Executor ex(c.plan, o);
      expect_matches_reference(c.plan, f, ex.run(f.weights, f.data), tolerance(prec));
    }
  }
}

TEST_P(EveryVariant, MatchesTheReferenceInFp32) {
  MOETRACE_REQUIRE_GPU();
  const int ranks = GetParam();
  const GpuFixture f = make_gpu_fixture(small_shape(2, 8, 2, 12, true), 2, block_tokens(ranks), 5);
  for (ExpertGemm g : {ExpertGemm::kGrouped, ExpertGemm::kPerExpert})
    for (const Case& c : cases(f, ranks)) {
      SCOPED_TRACE(c.name + " " + expert_gemm_name(g));
      ExecutorOptions o = options(Precision::kFp32);
      o.expert_gemm = g;
      Executor ex(c.plan, o);
      const RunResult r = ex.run(f.weights, f.data);
      expect_matches_reference(c.plan, f, r, kFp32Tolerance);
    }
}

TEST_P(EveryVariant, MatchesTheReferenceInBf16) {
  MOETRACE_REQUIRE_GPU();
  const int ranks = GetParam();
  const GpuFixture f = make_gpu_fixture(small_shape(2, 8, 2, 12, true), 2, block_tokens(ranks), 5);
  const ExecutorOptions o = reference_options(Precision::kBf16, f);
  for (const Case& c : cases(f, ranks)) {
    SCOPED_TRACE(c.name);
    Executor ex(c.plan, o);
    const RunResult r = ex.run(f.weights, f.data);
    expect_matches_reference(c.plan, f, r, kBf16Tolerance);
  }
}

// The emulated communicator: all P ranks on one GPU (ppmoe at P = 4 and 8).
INSTANTIATE_TEST_SUITE_P(EmulatedRanks, EveryVariant, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& i) { return "P" + std::to_string(i.param); });

// Rows of 6 and 10 elements (12 and 20 bytes in bf16, 24 and 40 in fp32)
// start off 16-byte boundaries: the row-moving and GeLU kernels take their
// one-element path, which the shapes above (16 and 24) never do.
TEST(GpuExecutor, RowsNotOfSixteenBytesTakeTheElementWisePath) {
  MOETRACE_REQUIRE_GPU();
  plan::ModelShape s = small_shape(2, 8, 2, 12, true);
  s.model_dim = 6;
  s.expert_hidden = 10;
  expect_every_variant_matches(make_gpu_fixture(s, 2, block_tokens(2), 13), 2, options(Precision::kFp32));
}

TEST(GpuExecutor, PpMoeMatchesTheReference) {
  MOETRACE_REQUIRE_GPU();
  // kernels/plan's PpMoePipelineTensorAndDataParallel: 2 data-parallel groups
  // x 2 stages x 2 tensor-parallel ranks, 3 micro-batches.
  const GpuFixture f = make_gpu_fixture(small_shape(4, 4, 2, 8, true), 2, {6, 5, 7, 4, 8, 3}, 51);
  plan::PpMoeConfig c;
  c.common = testing::common_config(f.shape, 8, 2);
  c.tensor_parallel = 2;
  c.pipeline_stages = 2;
  c.micro_batches = 3;
  const plan::Plan p = plan::build_ppmoe(c, f.ref.load);
  for (Precision prec : {Precision::kFp32, Precision::kBf16}) {
    Executor ex(p, reference_options(prec, f));
    expect_matches_reference(p, f, ex.run(f.weights, f.data), tolerance(prec));
  }
}

// NCCL with one rank per process: on one GPU that is a world of one (NCCL
// refuses two ranks on one device; gpu_nccl_test runs two where there are two
// GPUs). Every variant's plan at P = 1, in both precisions.
TEST(GpuExecutor, NcclWithOneProcessMatchesTheReference) {
  MOETRACE_REQUIRE_GPU();
  ExecutorOptions o = options(Precision::kFp32);
  o.communicator = CommunicatorKind::kNccl;
  o.launch = LaunchEnv{0, 1, 0, "test", ""};
  expect_every_variant_matches(make_gpu_fixture(small_shape(2, 4, 2, 12, true), 2, {19}, 9), 1, o);
}

plan::ExpertLoad synthetic(int ranks, int experts, int top_k, int layers, int iterations, std::int64_t tokens) {
  plan::SyntheticLoadConfig lc{.iterations = iterations, .layers = layers, .sources = ranks, .experts = experts,
                               .top_k = top_k, .tokens_per_source = tokens, .pattern = plan::LoadPattern::kZipf,
                               .zipf_skew = 1.1, .seed = 3};
  return plan::synthetic_load(lc);
}

// Options that route as the plan says (RoutingMode::kPlanned).
ExecutorOptions planned_routing(Precision precision) {
  ExecutorOptions o = options(precision);
  o.routing = RoutingMode::kPlanned;
  return o;
}

// DPMoE on `ranks` ranks of shape `s`: one iteration of a Zipf load of
// `tokens` a rank.
plan::Plan zipf_dpmoe(const plan::ModelShape& s, int ranks, std::int64_t tokens) {
  plan::DpMoeConfig c;
  c.common = testing::common_config(s, ranks, 1);
  return plan::build_dpmoe(c, synthetic(ranks, s.num_experts, s.top_k, s.num_layers, 1, tokens));
}

// PipeMoE (degree 2) on 4 ranks, 2 layers of 8 experts, top-2: a Zipf load
// of 40 tokens a rank over 2 iterations, and the model's random weights.
struct ZipfPipeMoe {
  plan::ModelShape shape = small_shape(2, 8, 2, 0, false);
  plan::Plan moe_plan = build();
  plan::ModelWeights weights = plan::random_weights(shape, 1);

  plan::Plan build() const {
    plan::PipeMoeConfig c;
    c.common = testing::common_config(shape, 4, 2);
    c.pipeline_degree = 2;
    return plan::build_pipemoe(c, synthetic(4, 8, 2, 2, 2, 40));
  }
};

TEST(GpuExecutor, PlannedRoutingFollowsASyntheticLoad) {
  MOETRACE_REQUIRE_GPU();
  const ZipfPipeMoe z;
  Executor ex(z.moe_plan, planned_routing(Precision::kBf16));
  const RunResult r = ex.run(z.weights, plan::random_training_data(z.shape, 2, {40, 40, 40, 40}, 2));
  EXPECT_EQ(r.routing_mismatches, 0);
  ASSERT_EQ(r.measured_load.size(), z.moe_plan.loads.size());
  for (const auto& out : r.outputs)
    for (double v : out.data) ASSERT_TRUE(std::isfinite(v));
}

TEST(GpuExecutor, DataDrawnOnTheDeviceIsTheHostsRandomTrainingData) {
  MOETRACE_REQUIRE_GPU();
  const ZipfPipeMoe z;
  Executor ex(z.moe_plan, planned_routing(Precision::kFp32));
  const std::vector<std::int64_t> tokens{40, 40, 40, 40};
  const RunResult staged = ex.run(z.weights, plan::random_training_data(z.shape, 2, tokens, 2));
  const RunResult drawn = ex.run(z.weights, RandomTrainingData{2, tokens, z.shape.model_dim, 2});
  ASSERT_EQ(staged.outputs.size(), drawn.outputs.size());
  // The device's double log/cos may differ from the host's in the last bit
  // of a double, not of the float it is rounded to (except rarely by one ulp).
  for (std::size_t i = 0; i < staged.outputs.size(); ++i) {
    EXPECT_LE(plan::relative_error(drawn.outputs[i], staged.outputs[i]), kFp32Tolerance) << "output " << i;
    EXPECT_LE(plan::relative_error(drawn.input_grads[i], staged.input_grads[i]), kFp32Tolerance) << i;
  }
}

TEST(GpuExecutor, ComputedRoutingAgainstAWrongPlanIsCountedNotACrash) {
  MOETRACE_REQUIRE_GPU();
  const plan::ModelShape s = small_shape(1, 8, 2, 0, false);
  const plan::Plan p = zipf_dpmoe(s, 2, 32);
  Executor ex(p, options(Precision::kFp32));
  const RunResult r = ex.run(plan::random_weights(s, 4), plan::random_training_data(s, 1, {32, 32}, 5));
  EXPECT_GT(r.routing_mismatches, 0);
}

TEST(GpuExecutor, MemoryReuseLowersThePeakOfTransientBuffers) {
  MOETRACE_REQUIRE_GPU();
  plan::ModelShape s = small_shape(2, 8, 1, 0, false);
  s.model_dim = 256;
  s.expert_hidden = 1024;
  const auto load = synthetic(4, 8, 1, 2, 1, 512);
  std::int64_t peak_none = 0, peak_s4 = 0;
  for (auto strategy : {plan::ReuseStrategy::kNone, plan::ReuseStrategy::kS4}) {
    plan::MPipeMoeConfig c;
    c.common = testing::common_config(s, 4, 1);
    c.partitions = 4;
    c.strategy = strategy;
    const plan::Plan p = plan::build_mpipemoe(c, load);
    Executor ex(p, planned_routing(Precision::kBf16));
    const RunResult r = ex.run(plan::random_weights(s, 1), plan::random_training_data(s, 1, {512, 512, 512, 512}, 2));
    (strategy == plan::ReuseStrategy::kNone ? peak_none : peak_s4) = r.transient_bytes_peak;
  }
  EXPECT_LT(peak_s4, peak_none) << "mpipemoe Eq. 5: reuse must save T_DI/T_M/T_DO memory";
}

TEST(GpuExecutor, TheLinkModelPacesTheEmulatedAllToAll) {
  MOETRACE_REQUIRE_GPU();
  const plan::ModelShape s = small_shape(1, 4, 1, 0, false);
  const plan::Plan p = zipf_dpmoe(s, 4, 64);
  ExecutorOptions o = planned_routing(Precision::kBf16);
  o.link = parse_link_model("latency_us=3000,bandwidth_gb_s=100,sms=2");
  Executor ex(p, o);
  const RunResult r = ex.run(plan::random_weights(s, 1), plan::random_training_data(s, 1, {64, 64, 64, 64}, 2));
  // dispatch, combine, their backward, then the gate's gradient all-reduce
  // (two phases): at least 6 latencies of 3 ms one after the other.
  EXPECT_GE(r.wall_ms, 6 * 3.0);
}

using testing::count_rows;

TEST(GpuCollector, TraceHoldsKernelsOpRangesWithDeviceTimesAndTheExpertLoad) {
  MOETRACE_REQUIRE_GPU();
  const plan::ModelShape s = small_shape(2, 8, 2, 12, true);
  plan::PipeMoeConfig c;
  c.common = testing::common_config(s, 4, 2);
  c.pipeline_degree = 2;
  const plan::Plan p = plan::build_pipemoe(c, synthetic(4, 8, 2, 2, 2, 48));
  CudaRunOptions o;
  o.executor = options(Precision::kBf16);
  o.executor.routing = RoutingMode::kPlanned;
  o.executor.capture_results = false;
  o.shape = s;
  o.trace_path = (std::filesystem::temp_directory_path() / "moetrace_gpu_collector_test.db").string();
  o.run.name = "gpu collector test";
  const CudaRunSummary sum = run_plan(p, o);
  EXPECT_EQ(sum.dropped_records, 0);
  EXPECT_GT(sum.kernels, 0);
  // The plan's ops and a weight upload of each of the 4 ranks (weight_upload_op).
  const auto ops_and_uploads = static_cast<std::int64_t>(p.ops.size()) + 4;
  EXPECT_EQ(sum.op_ranges, ops_and_uploads);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(o.trace_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  EXPECT_EQ(count_rows(db, "SELECT COUNT(*) FROM op_ranges"), ops_and_uploads);
  // The uploads are setup ops outside the iterations, one per rank, with
  // their copies.
  EXPECT_EQ(count_rows(db, "SELECT COUNT(DISTINCT rank) FROM op_ranges WHERE iteration IS NULL OR iteration < 0"), 4);
  EXPECT_GT(count_rows(db, "SELECT COUNT(*) FROM memcpy m JOIN op_ranges o ON o.id = m.op_id "
                           "WHERE o.iteration IS NULL OR o.iteration < 0"),
            0);
  // Every op with work got device times from the kernels it launched (an
  // expert with no token in a chunk launches nothing: a point).
  EXPECT_EQ(count_rows(db, "SELECT COUNT(*) FROM op_ranges WHERE kind IN (SELECT id FROM op_kinds WHERE name IN "
                           "('gate', 'expert_ffn')) AND flops > 0 AND end_ns <= start_ns"),
            0);
  EXPECT_GT(count_rows(db, "SELECT COUNT(*) FROM kernels WHERE op_id IS NOT NULL"), 0);
  EXPECT_EQ(count_rows(db, "SELECT COUNT(*) FROM kernels k JOIN op_ranges o ON o.id = k.op_id "
                           "WHERE k.start_ns < o.start_ns OR k.end_ns > o.end_ns"),
            0);
  EXPECT_EQ(count_rows(db, "SELECT COUNT(*) FROM expert_load"), static_cast<std::int64_t>(p.loads.size()));
  EXPECT_EQ(count_rows(db, "SELECT SUM(tokens) FROM expert_load"),
            std::accumulate(p.loads.begin(), p.loads.end(), std::int64_t{0},
                            [](std::int64_t a, const plan::ExpertLoadEntry& e) { return a + e.tokens; }));
  EXPECT_EQ(count_rows(db, "SELECT COUNT(*) FROM streams WHERE role != 'other'"),
            static_cast<std::int64_t>(p.streams.size()));
  EXPECT_GT(count_rows(db, "SELECT COUNT(*) FROM api_calls"), 0);
  // Launches are recorded; the query calls cuBLAS makes on every GEMM are
  // left out by default (cupti/api_filter.h).
  EXPECT_GT(count_rows(db, "SELECT COUNT(*) FROM api_calls a JOIN strings s ON s.id = a.name_id "
                           "WHERE s.value LIKE '%Launch%'"),
            0);
  EXPECT_EQ(count_rows(db, "SELECT COUNT(*) FROM api_calls a JOIN strings s ON s.id = a.name_id "
                           "WHERE s.value IN ('cudaGetDevice_v3020', 'cuKernelGetAttribute')"),
            0);
  EXPECT_GT(count_rows(db, "SELECT COUNT(*) FROM memory_events WHERE buffer_id IS NOT NULL"), 0);
  EXPECT_GT(count_rows(db, "SELECT COUNT(*) FROM buffers"), 0);
  // NVTX ranges arrive through CUPTI's NVTX injection; if not, op ranges
  // still come from the executor's own record of its ops.
  const std::int64_t nvtx = count_rows(db, "SELECT COUNT(*) FROM nvtx_ranges");
  if (nvtx == 0) std::cerr << "note: no NVTX ranges were delivered (NVTX injection inactive)\n";
  EXPECT_EQ(count_rows(db, "SELECT dropped_records FROM run"), 0);
  sqlite3_close(db);
  std::filesystem::remove(o.trace_path);
}

std::string config_value(sqlite3* db, const char* key) {
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT value FROM run_config WHERE key = ?", -1, &st, nullptr), SQLITE_OK);
  sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
  std::string v;
  if (sqlite3_step(st) == SQLITE_ROW) v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return v;
}

TEST(GpuCollector, WarmupRunsAreLeftOutAndTheCollectorCanBeOff) {
  // The plan first: its mistakes show without a GPU too.
  const plan::ModelShape s = small_shape(1, 4, 2, 0, false);
  const plan::Plan p = zipf_dpmoe(s, 2, 64);
  MOETRACE_REQUIRE_GPU();
  for (bool collect : {true, false}) {
    CudaRunOptions o;
    o.executor = options(Precision::kBf16);
    o.executor.routing = RoutingMode::kPlanned;
    o.executor.capture_results = false;
    o.shape = s;
    o.collect = collect;
    o.warmup_runs = 2;
    o.trace_path = (std::filesystem::temp_directory_path() / "moetrace_gpu_warmup_test.db").string();
    const CudaRunSummary sum = run_plan(p, o);
    EXPECT_GT(sum.result.wall_ms, 0.0);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(o.trace_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    EXPECT_EQ(config_value(db, "cuda.collector"), collect ? "on" : "off");
    EXPECT_EQ(config_value(db, "cuda.warmup_runs"), "2");
    EXPECT_FALSE(config_value(db, "cuda.wall_ms").empty());
    // The executor's own timing of each op's issue, collector on or off.
    const std::string issue = config_value(db, "cuda.host_issue_us");
    EXPECT_NE(issue.find("\"expert_ffn.fwd\": "), std::string::npos) << issue;
    EXPECT_NE(issue.find("\"gate.bwd\": "), std::string::npos) << issue;
    if (collect) {
      // One run's ops, not three: the warm-up ran before the collector
      // started (and the weight upload of each of the 2 ranks).
      EXPECT_EQ(count_rows(db, "SELECT COUNT(*) FROM op_ranges"), static_cast<std::int64_t>(p.ops.size()) + 2);
      EXPECT_GT(count_rows(db, "SELECT COUNT(*) FROM kernels"), 0);
    } else {
      EXPECT_EQ(count_rows(db, "SELECT COUNT(*) FROM kernels"), 0);
    }
    sqlite3_close(db);
    std::filesystem::remove(o.trace_path);
  }
}

}  // namespace
}  // namespace moetrace::cuda
