// A simulated run written as a trace: the analyzer loads it, every op of the
// plan appears once with its coordinates, dependencies hold in the written
// times, memory events pair up, and the breakdown agrees with the closed
// form (pipemoe Eq. 19 at r = 1: the MoE layer is dispatch + expert + combine).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/plan/builders.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/timing_plan.h"
#include "moetrace/sim/trace_output.h"
#include "text_trace.h"

namespace moetrace::sim {
namespace {

std::string temp_db(const std::string& name) { return moetrace::testing::temp_path("sim_" + name + ".db"); }

struct Written {
  plan::Plan plan;
  SimResult result;
  analyzer::Trace trace;
};

Written write_and_load(const RunSpec& spec, const CostModel& model, const std::string& name,
                       TraceDetail detail = TraceDetail::kFull) {
  Written w{build_plan(spec), {}, {}};
  w.result = simulate(w.plan, model);
  const auto path = temp_db(name);
  TraceOutputOptions o;
  o.detail = detail;
  write_trace(path, w.plan, model, w.result, o);
  w.trace = analyzer::load_trace(path);
  std::filesystem::remove(path);
  return w;
}

RunSpec pipemoe_spec(int r) {
  RunSpec s = run_preset("pipemoe-solver-example");
  s.common.iterations = 2;
  s.routing.tokens_per_source = 2048;
  s.pipeline_degree = r;
  return s;
}

// layers.tokens is per rank (schemas/README.md): 2048 tokens from each of
// the preset's 16 ranks, not 16 x 2048.
TEST(SimTrace, LayerTokensArePerRank) {
  const auto spec = pipemoe_spec(2);
  const auto w = write_and_load(spec, spec.resolved_cost_model(), "layer-tokens");
  ASSERT_EQ(w.plan.world_size, 16);
  ASSERT_FALSE(w.trace.layers.empty());
  for (const auto& l : w.trace.layers) EXPECT_EQ(l.tokens, 2048) << "layer " << l.layer;
}

TEST(SimTrace, EveryPlanOpOnceWithItsCoordinates) {
  for (const char* variant : {"dpmoe", "pipemoe", "mpipemoe", "ppmoe", "pro_prophet", "fastermoe"}) {
    SCOPED_TRACE(variant);
    RunSpec spec = run_preset(variant);
    spec.common.model.model_dim = 256;
    spec.common.model.expert_hidden = 512;
    if (spec.common.model.dense_hidden > 0) spec.common.model.dense_hidden = 512;
    const auto w = write_and_load(spec, spec.resolved_cost_model(), variant);
    const auto& t = w.trace;
    EXPECT_TRUE(t.run.simulated);
    EXPECT_EQ(t.run.backend, "sim");
    EXPECT_EQ(t.run.variant, variant);
    EXPECT_EQ(t.run.world_size, w.plan.world_size);
    ASSERT_EQ(t.ops.size(), w.plan.ops.size());
    std::set<std::int64_t> seen;
    for (const auto& o : t.ops) {
      ASSERT_TRUE(seen.insert(o.id.value).second) << "op " << o.id.value << " twice";
      const auto& p = w.plan.op(o.id);
      EXPECT_EQ(o.kind, p.kind);
      EXPECT_EQ(o.rank, p.rank);
      EXPECT_EQ(o.layer, p.coords.layer);
      EXPECT_EQ(o.iteration, p.coords.iteration);
      EXPECT_EQ(o.chunk, p.coords.chunk);
      EXPECT_EQ(o.micro_batch, p.coords.micro_batch);
      EXPECT_EQ(o.phase, p.coords.phase);
      EXPECT_EQ(t.streams[static_cast<std::size_t>(o.stream)].id, p.stream);
      EXPECT_EQ(t.str(o.name), p.name);
      EXPECT_EQ(o.start_ns, to_ns(w.result.start_s[static_cast<std::size_t>(o.id.value)]));
    }
    // One synthesized kernel or memcpy per op, attributed to it.
    EXPECT_EQ(t.activities.size(), t.ops.size());
    for (const auto& a : t.activities) {
      ASSERT_GE(a.op, 0);
      const auto& o = t.ops[static_cast<std::size_t>(a.op)];
      EXPECT_EQ(a.start_ns, o.start_ns);
      EXPECT_EQ(a.end_ns, o.end_ns);
      if (o.kind == OpKind::kOffload || o.kind == OpKind::kPrefetch) {
        EXPECT_EQ(a.type, analyzer::ActivityType::kMemcpy);
      }
    }
    // Dependencies hold in the written times.
    std::map<std::int64_t, const analyzer::OpRange*> by_id;
    for (const auto& o : t.ops) by_id[o.id.value] = &o;
    std::size_t deps = 0;
    for (const auto& d : t.op_deps) {
      EXPECT_GE(by_id.at(d.op.value)->start_ns, by_id.at(d.dep.value)->end_ns);
      ++deps;
    }
    EXPECT_GT(deps, 0u);
    // Memory: every buffer allocated before it is freed, one alloc and at
    // most one free per buffer; the expert load is the plan's.
    std::map<std::int64_t, int> allocs, frees;
    for (const auto& e : t.memory_events) (e.alloc ? allocs : frees)[e.buffer.value]++;
    for (const auto& b : t.buffers) {
      EXPECT_EQ(allocs[b.id.value], 1) << b.id.value;
      EXPECT_LE(frees[b.id.value], 1) << b.id.value;
      EXPECT_LE(b.alloc_ns, b.free_ns);
    }
    EXPECT_EQ(t.expert_load.size(), w.plan.loads.size());
    EXPECT_FALSE(t.placements.empty());
  }
}

TEST(SimTrace, BreakdownOfPipeMoeWithoutPipeliningIsDispatchExpertCombine) {
  // Gate, permute and unpermute cost nothing here, so the analyzer's
  // MoE-layer window is exactly pipemoe's t_moe of Eq. 12 at r = 1, i.e.
  // Eq. 19: 2 (alpha_a + beta_a n_d) + alpha_e + beta_e n_e.
  CostModel m = cost_model_preset("pipemoe-2080ti-ib100");
  for (OpKind k : {OpKind::kGate, OpKind::kPermute, OpKind::kUnpermute}) m.compute_by_kind[k] = {};
  const RunSpec spec = pipemoe_spec(1);
  const auto w = write_and_load(spec, m, "breakdown");
  const auto b = analyzer::compute_breakdown(w.trace);
  const double N = 2048, M = 4096, H = 4096, k = 2;  // 2048 tokens, top-2: 4096 routed rows
  const double n_d = 4 * N * k * M, n_e = 4 * N * k * M * H;  // solver.py's byte-scaled sizes
  const double eq19 = 2 * (5.70e-4 + 2.96e-10 * n_d) + 2 * 1.5e-4 + 2 * 3.73e-14 * n_e;
  int rows = 0;
  for (const auto& row : b.rows) {
    if (row.phase != Phase::kForward) continue;
    ++rows;
    EXPECT_NEAR(static_cast<double>(row.t.window_ns), eq19 * 1e9, 3.0) << "rank " << row.rank;
    // All-to-all = the two collectives, expert compute = the FFN; no overlap at r = 1.
    EXPECT_NEAR(static_cast<double>(row.t.at(Category::kAllToAll)), 2 * (5.70e-4 + 2.96e-10 * n_d) * 1e9, 3.0);
    EXPECT_NEAR(static_cast<double>(row.t.at(Category::kExpertCompute)), (2 * 1.5e-4 + 2 * 3.73e-14 * n_e) * 1e9, 3.0);
    EXPECT_EQ(row.t.comm_hidden_ns, 0);
  }
  EXPECT_EQ(rows, 16 * 2);  // ranks x iterations
}

TEST(SimTrace, PipeliningHidesCommunicationInTheBreakdown) {
  const auto w = write_and_load(pipemoe_spec(4), cost_model_preset("pipemoe-2080ti-ib100"), "hidden");
  const auto b = analyzer::compute_breakdown(w.trace);
  EXPECT_GT(b.moe_total.hidden_fraction(), 0.2);
}

TEST(SimTrace, LeanTracesKeepOpsDepsAndMemory) {
  RunSpec spec = run_preset("dpmoe");
  const auto w = write_and_load(spec, spec.resolved_cost_model(), "lean", TraceDetail::kLean);
  EXPECT_EQ(w.trace.ops.size(), w.plan.ops.size());
  EXPECT_TRUE(w.trace.activities.empty());
  EXPECT_TRUE(w.trace.op_buffers.empty());
  EXPECT_FALSE(w.trace.op_deps.empty());
  EXPECT_FALSE(w.trace.memory_events.empty());
  const auto b = analyzer::compute_breakdown(w.trace);
  EXPECT_GT(b.moe_total.window_ns, 0);
}

// At the scale where the timing-only plan keeps per-expert totals
// (src_rank = -1), the trace still loads and analyzes, and each expert's
// load is its total over the sources.
TEST(SimTrace, PerExpertTotalsLoadAndAnalyze) {
  RunSpec spec = run_preset("dpmoe");
  spec.common.ranks = 4;
  spec.common.iterations = 1;
  spec.common.model.num_layers = 1;
  spec.common.model.num_experts = 8;
  spec.common.model.top_k = 2;
  spec.routing.tokens_per_source = 64;
  const auto load = plan::synthetic_load(spec.load_config());
  const plan::Plan plan = build_timing_plan(spec, load, /*max_load_entries=*/10);
  const auto model = spec.resolved_cost_model();
  const auto path = temp_db("totals");
  write_trace(path, plan, model, simulate(plan, model), {});
  const auto trace = analyzer::load_trace(path);
  std::filesystem::remove(path);
  ASSERT_EQ(trace.expert_load.size(), 8u);
  for (const auto& e : trace.expert_load) EXPECT_EQ(e.src_rank, -1);
  const auto a = analyzer::analyze(trace);
  ASSERT_TRUE(a.expert_load.has_load);
  ASSERT_EQ(a.expert_load.rows.size(), 1u);
  const auto totals = load.expert_totals(0, 0);
  EXPECT_EQ(a.expert_load.rows[0].tokens_per_expert, totals);
  EXPECT_EQ(a.expert_load.rows[0].total_tokens, 4 * 64 * 2);  // ranks x tokens x top_k
}

// Rows of a one-column query, in its order.
std::vector<std::string> rows(const std::string& path, const std::string& sql) {
  sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
  auto st = db.prepare(sql);
  std::vector<std::string> out;
  while (st.step()) out.emplace_back(st.text(0));
  return out;
}

// simulate_to_trace writes kernels while the simulation runs and frees the
// plan before the writer closes: the trace holds what simulate() followed by
// write_trace() writes, row for row (kernels compared in op order: they are
// written in the order ops end).
// Returns the number of memcpy rows.
std::size_t expect_same_trace(const RunSpec& spec) {
  const auto model = spec.resolved_cost_model();
  const auto a = temp_db("two-step"), b = temp_db("streamed");
  const plan::Plan plan = build_plan(spec);
  const SimResult result = simulate(plan, model);
  write_trace(a, plan, model, result);
  std::size_t ended = 0;  // a caller's own op_ended is still called
  SimOptions so;
  so.op_ended = [&ended](const plan::Op&, double, double) { ++ended; };
  const auto t = simulate_to_trace(b, build_plan(spec), model, so);
  EXPECT_EQ(ended, plan.ops.size());
  EXPECT_EQ(t.ops, plan.ops.size());
  EXPECT_EQ(t.buffers, plan.buffers.size());
  EXPECT_EQ(t.result.end_s, result.end_s);
  EXPECT_GT(t.stats.rows, 0);
  const char* queries[] = {
      "SELECT o.id || ' ' || rank || ' ' || stream_id || ' ' || kind || ' ' || s.value || ' ' || layer || ' ' || "
      "iteration || ' ' || chunk || ' ' || phase || ' ' || start_ns || ' ' || end_ns || ' ' || ifnull(flops, '') || "
      "' ' || ifnull(bytes, '') || ' ' || ifnull(deps, '') || ' ' || ifnull(buffers, '') "
      "FROM op_ranges o JOIN strings s ON s.id = o.name_id ORDER BY o.id",
      "SELECT k.op_id || ' ' || rank || ' ' || stream_id || ' ' || start_ns || ' ' || end_ns || ' ' || s.value "
      "FROM kernels k JOIN strings s ON s.id = k.name_id ORDER BY k.op_id",
      "SELECT op_id || ' ' || start_ns || ' ' || end_ns || ' ' || bytes || ' ' || copy_kind FROM memcpy ORDER BY op_id",
      "SELECT id || ' ' || rank || ' ' || tag || ' ' || bytes || ' ' || alloc_ns || ' ' || ifnull(free_ns, '') || ' ' "
      "|| address FROM buffers ORDER BY id",
      "SELECT rank || ' ' || ts_ns || ' ' || kind || ' ' || address || ' ' || bytes || ' ' || ifnull(stream_id, '') "
      "|| ' ' || buffer_id FROM memory_events ORDER BY id",
      "SELECT iteration || ' ' || layer || ' ' || src_rank || ' ' || expert || ' ' || tokens FROM expert_load "
      "ORDER BY 1",
      "SELECT key || '=' || value FROM run_config ORDER BY key",
      "SELECT id || ' ' || rank || ' ' || name FROM streams ORDER BY id",
  };
  std::size_t copies = 0;
  for (const char* q : queries) {
    const auto x = rows(a, q), y = rows(b, q);
    if (std::string_view(q).find("FROM memcpy") != std::string_view::npos) copies = x.size();
    else EXPECT_FALSE(x.empty()) << q;
    EXPECT_EQ(x, y) << q;
  }
  std::filesystem::remove(a);
  std::filesystem::remove(b);
  return copies;
}

TEST(SimTrace, SimulateToTraceWritesWhatWriteTraceWrites) {
  // Kernels (pipemoe) and memcpy records (mpipemoe's offload and restore).
  EXPECT_EQ(expect_same_trace(pipemoe_spec(2)), 0u);
  RunSpec m = run_preset("mpipemoe-gpt3-s");
  m.common.ranks = 4;
  m.common.iterations = 1;
  m.common.model.num_layers = 2;
  m.common.model.num_experts = 4;
  m.routing.tokens_per_source = 256;
  m.strategy = plan::ReuseStrategy::kS1;
  EXPECT_GT(expect_same_trace(m), 0u);
}

// A plan that stalls leaves no file behind.
TEST(SimTrace, SimulateToTraceLeavesNoFileWhenTheSimulationFails) {
  const auto spec = pipemoe_spec(1);
  plan::Plan plan = build_plan(spec);
  ASSERT_GT(plan.ops.size(), 2u);
  plan.ops[0].deps.push_back(plan.ops[1].id);  // a dep on a later op
  const auto path = temp_db("stalled");
  std::filesystem::remove(path);
  EXPECT_THROW(simulate_to_trace(path, std::move(plan), spec.resolved_cost_model()), moetrace::Error);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace moetrace::sim
