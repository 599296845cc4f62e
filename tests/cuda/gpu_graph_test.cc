// CUDA graph mode on a real GPU (ctest label `gpu`; skipped without one):
// each iteration captured into a graph and launched must compute what the
// ops launched one by one compute, and the collector must give every kernel
// a graph launched the op that issued it during capture.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <filesystem>
#include <map>

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

plan::ModelShape graph_test_shape() {
  return {.num_layers = 2, .num_experts = 8, .top_k = 2, .model_dim = 16, .expert_hidden = 24, .dense_hidden = 12,
          .attention = true, .learning_rate = 0.05};
}

ExecutorOptions graph_test_options(bool graph) {
  ExecutorOptions o;
  o.precision = Precision::kFp32;  // no TF32: both modes run the same arithmetic
  o.capture_results = true;
  o.link = parse_link_model("latency_us=2,bandwidth_gb_s=200,sms=4,piece_bytes=64");
  o.cuda_graph = graph;
  return o;
}

// Largest relative error (max norm) of every output, input gradient and
// final parameter of `a` against `b`.
double largest_difference(const RunResult& a, const RunResult& b) {
  double worst = 0;
  EXPECT_EQ(a.outputs.size(), b.outputs.size());
  EXPECT_EQ(a.final_params.size(), b.final_params.size());
  for (std::size_t i = 0; i < std::min(a.outputs.size(), b.outputs.size()); ++i) {
    worst = std::max(worst, plan::relative_error(a.outputs[i], b.outputs[i]));
    worst = std::max(worst, plan::relative_error(a.input_grads[i], b.input_grads[i]));
  }
  for (std::size_t i = 0; i < std::min(a.final_params.size(), b.final_params.size()); ++i)
    worst = std::max(worst, plan::relative_error(a.final_params[i].value, b.final_params[i].value));
  return worst;
}

// Every variant at P = 4 emulated ranks, 2 iterations: 2 graphs, the same
// numbers as the plain mode (the same kernels on the same data; cuBLAS may
// pick another algorithm per call, so not bit for bit: fp32's 1e-5, the
// tolerance of the executor against the float64 reference), and the
// reference's.
TEST(GpuGraph, EveryVariantComputesWhatThePlainModeComputes) {
  MOETRACE_REQUIRE_GPU();
  const GpuFixture f = make_gpu_fixture(graph_test_shape(), 2, {21, 9, 14, 17}, 5);
  for (auto& [name, p] : testing::variant_plans(f.shape, 4, f.data.iterations, f.ref.load)) {
    SCOPED_TRACE(name);
    Executor plain(p, graph_test_options(false));
    const RunResult a = plain.run(f.weights, f.data);
    Executor graphed(p, graph_test_options(true));
    const RunResult b = graphed.run(f.weights, f.data);
    EXPECT_EQ(a.graphs, 0);
    EXPECT_EQ(b.graphs, 2);
    EXPECT_EQ(b.routing_mismatches, 0);
    EXPECT_LE(largest_difference(b, a), 1e-5);
    for (std::size_t i = 0; i < b.outputs.size(); ++i)
      EXPECT_LE(plan::relative_error(b.outputs[i], f.ref.outputs[i]), 1e-5) << "output " << i;
  }
}

// op id -> kernels attributed to it.
std::map<std::int64_t, std::int64_t> kernels_per_op(sqlite3* db) {
  std::map<std::int64_t, std::int64_t> out;
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT op_id, COUNT(*) FROM kernels WHERE op_id IS NOT NULL GROUP BY op_id", -1,
                               &st, nullptr),
            SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW) out[sqlite3_column_int64(st, 0)] = sqlite3_column_int64(st, 1);
  sqlite3_finalize(st);
  return out;
}

TEST(GpuGraph, EveryKernelAGraphLaunchedHasTheOpThatIssuedIt) {
  MOETRACE_REQUIRE_GPU();
  const plan::ModelShape s = graph_test_shape();
  plan::PipeMoeConfig c;
  c.common = testing::common_config(s, 4, 2);
  c.pipeline_degree = 2;
  plan::SyntheticLoadConfig lc{.iterations = 2, .layers = 2, .sources = 4, .experts = 8, .top_k = 2,
                               .tokens_per_source = 48, .pattern = plan::LoadPattern::kZipf, .zipf_skew = 1.1,
                               .seed = 3};
  const plan::Plan p = plan::build_pipemoe(c, plan::synthetic_load(lc));
  std::map<std::int64_t, std::int64_t> per_op[2];
  for (bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "graph" : "plain");
    CudaRunOptions o;
    o.executor = graph_test_options(graph);
    o.executor.precision = Precision::kBf16;
    o.executor.routing = RoutingMode::kPlanned;
    o.executor.capture_results = false;
    o.shape = s;
    o.trace_path = (std::filesystem::temp_directory_path() / "moetrace_gpu_graph_test.db").string();
    const CudaRunSummary sum = run_plan(p, o);
    EXPECT_EQ(sum.dropped_records, 0);
    EXPECT_EQ(sum.result.graphs, graph ? 2 : 0);
    EXPECT_EQ(sum.graph_activities > 0, graph);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(o.trace_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    EXPECT_GT(testing::count_rows(db, "SELECT COUNT(*) FROM kernels"), 0);
    EXPECT_EQ(testing::count_rows(db, "SELECT COUNT(*) FROM kernels WHERE op_id IS NULL"), 0);
    EXPECT_EQ(testing::count_rows(db, "SELECT COUNT(*) FROM kernels k JOIN op_ranges o ON o.id = k.op_id "
                                   "WHERE k.start_ns < o.start_ns OR k.end_ns > o.end_ns"),
              0);
    // The plan's ops and the weight upload of each of the 4 ranks.
    EXPECT_EQ(testing::count_rows(db, "SELECT COUNT(*) FROM op_ranges"), static_cast<std::int64_t>(p.ops.size()) + 4);
    per_op[graph ? 1 : 0] = kernels_per_op(db);
    sqlite3_close(db);
    std::filesystem::remove(o.trace_path);
  }
  // The graphs ran the kernels the ops launched one by one, op for op.
  EXPECT_EQ(per_op[1], per_op[0]);
}

}  // namespace
}  // namespace moetrace::cuda
