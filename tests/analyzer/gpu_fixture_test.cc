// Real GPU traces committed as fixtures (tests/data/gpu, see its README): one
// run of each MoE variant recorded by `moetrace run --backend cuda`, read with
// the analyzer as `moetrace report` reads them. Each must be
//  1. complete: no activity record dropped (`moetrace info`'s "dropped"),
//     the writer finalized, no damaged references;
//  2. attributed: every kernel row names its op, on its rank, and lies within
//     the op range's [start, end]; after loading, every kernel belongs to an
//     op that contains it;
//  3. summed: in every breakdown split (MoE layer x iteration x phase x rank,
//     iteration x rank, rank, the per-layer summaries and the totals) the
//     parts add up: busy + outside + idle = window, the exclusive times fit in
//     busy (the rest is overlap), hidden + exposed = communication, and each
//     total is the sum of its rows;
//  4. of its variant (run.variant, run_config): the op kinds its builder
//     always emits (kernels/plan/builders.h), e.g. pipemoe's r chunks of
//     dispatch and combine, mpipemoe's restore ops as its strategy's row of
//     kReuseStrategies says; nothing else is asserted.
// Simulated traces of the same schema pass these checks too; the test runs
// on CPUs everywhere and needs no GPU (it reads files).
//
// One test loops over the fixtures (SCOPED_TRACE names each), so the test
// ctest discovers does not depend on which fixtures existed at build time.
// Without fixtures it is skipped, never passed. MOETRACE_GPU_FIXTURES names
// another directory (to check the test itself, e.g. on simulated traces);
// fixtures in the committed directory must come from the GPU (backend cuda).
// A fixture is NAME.db, or NAME.rank<N>.db files of one multi-process run;
// any of them may be gzip-compressed (.db.gz) and is inflated to a temporary
// file first.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/cost_model.h"
#include "moetrace/analyzer/memory.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/plan/config.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/trace_output.h"
#include "gunzip.h"
#include "text_trace.h"
#include "test_paths.h"

namespace moetrace::analyzer {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  std::string name;                 // the file name without .rank<N>, .db and .gz
  std::vector<std::string> files;   // as committed
};

// MOETRACE_GPU_FIXTURES where set, else the committed directory.
bool overridden() {
  const char* d = std::getenv("MOETRACE_GPU_FIXTURES");
  return d != nullptr && *d != '\0';
}

fs::path fixture_dir() {
  return overridden() ? fs::path(std::getenv("MOETRACE_GPU_FIXTURES")) : fs::path(MOETRACE_GPU_FIXTURES_DIR);
}

// NAME.db, NAME.db.gz, NAME.rank<N>.db[.gz], grouped by NAME.
std::vector<Fixture> find_fixtures(const fs::path& dir) {
  static const std::regex kName(R"((.+?)(\.rank[0-9]+)?\.db(\.gz)?)");
  std::map<std::string, std::vector<std::string>> by_name;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const auto file = e.path().filename().string();
    if (!e.is_regular_file() || !std::regex_match(file, m, kName)) continue;
    by_name[m[1].str()].push_back(e.path().string());
  }
  std::vector<Fixture> out;
  for (auto& [name, files] : by_name) {
    std::sort(files.begin(), files.end());
    out.push_back({name, files});
  }
  return out;
}

// The fixture's files as trace databases: .gz ones inflated to temporary files.
std::vector<std::string> databases(const Fixture& f) {
  std::vector<std::string> out;
  for (const auto& file : f.files) {
    if (!file.ends_with(".gz")) {
      out.push_back(file);
      continue;
    }
    const auto db = testing::temp_path(fs::path(file).stem().string());
    if (const auto error = testing::gunzip(file, db); !error.empty()) {
      ADD_FAILURE() << error;
      continue;
    }
    out.push_back(db);
  }
  return out;
}

// 1. What `moetrace info` reports of each file, and the loader's verdict.
void expect_complete(const std::vector<std::string>& dbs, const Trace& trace) {
  for (const auto& db : dbs) {
    const auto s = summarize_trace(db);
    EXPECT_EQ(s.run.dropped_records, 0) << db << ": CUPTI dropped activity records (moetrace info)";
    EXPECT_TRUE(s.run.finalized) << db << ": the writer never closed";
  }
  EXPECT_EQ(trace.run.dropped_records, 0);
  EXPECT_EQ(trace.run.damage, std::vector<std::string>{});
  if (trace.files) {  // a run of several rank files: each read, none missing or twice
    EXPECT_TRUE(trace.files->left_out.empty()) << trace.files->left_out.front().second;
    EXPECT_EQ(trace.files->missing_ranks, std::vector<std::int32_t>{});
    EXPECT_EQ(trace.files->duplicate_ranks, std::vector<std::int32_t>{});
  }
}

// 2a. The kernels table of one file as written: every row has an op on its
// rank whose range contains it. Returns the number of kernel rows.
std::int64_t expect_kernels_inside_ops(const std::string& db) {
  SCOPED_TRACE(db);
  sqlite::Database d(db, sqlite::Database::Mode::kReadOnly);
  const auto kernels = d.query_int("SELECT COUNT(*) FROM kernels").value_or(0);
  EXPECT_EQ(d.query_int("SELECT COUNT(*) FROM kernels WHERE op_id IS NULL").value_or(-1), 0)
      << "kernels without an op";
  auto bad = d.prepare(
      "SELECT k.id, k.rank, k.start_ns, k.end_ns, k.op_id, o.rank, o.start_ns, o.end_ns"
      " FROM kernels k LEFT JOIN op_ranges o ON o.id = k.op_id"
      " WHERE k.op_id IS NOT NULL AND (o.id IS NULL OR o.rank != k.rank"
      "   OR k.start_ns < o.start_ns OR k.end_ns > o.end_ns)");
  int outside = 0;
  while (bad.step())
    if (outside++ < 5)
      ADD_FAILURE() << "kernel " << bad.int64(0) << " (rank " << bad.int64(1) << ", [" << bad.int64(2) << ", "
                    << bad.int64(3) << "]) lies outside its op " << bad.int64(4)
                    << (bad.is_null(5) ? std::string(" (no such op range)")
                                       : " (rank " + std::to_string(bad.int64(5)) + ", [" +
                                             std::to_string(bad.int64(6)) + ", " + std::to_string(bad.int64(7)) +
                                             "])");
  EXPECT_EQ(outside, 0) << "kernels outside their op";
  return kernels;
}

// 2b. The loaded trace: every kernel attributed to an op that contains it.
void expect_kernels_attributed(const Trace& trace, std::int64_t kernel_rows) {
  std::int64_t kernels = 0, unattributed = 0, outside = 0;
  for (const auto& a : trace.activities) {
    if (a.type != ActivityType::kKernel) continue;
    ++kernels;
    if (a.op < 0 || static_cast<std::size_t>(a.op) >= trace.ops.size()) {
      ++unattributed;
      continue;
    }
    const auto& op = trace.ops[static_cast<std::size_t>(a.op)];
    if (op.rank != a.rank || a.start_ns < op.start_ns || a.end_ns > op.end_ns) {
      if (outside++ < 5)
        ADD_FAILURE() << "kernel " << trace.str(a.name) << " [" << a.start_ns << ", " << a.end_ns << "] on rank "
                      << a.rank.value << " outside op " << op.id.value << " (" << op_kind_name(op.kind) << ", rank "
                      << op.rank.value << ", [" << op.start_ns << ", " << op.end_ns << "])";
    }
  }
  EXPECT_GT(kernels, 0) << "no kernels: nothing to attribute";
  EXPECT_EQ(kernels, kernel_rows) << "kernel rows the loader left out";
  EXPECT_EQ(unattributed, 0) << "kernels the analyzer attributes to no op";
  EXPECT_EQ(outside, 0) << "kernels outside the op they are attributed to";
}

void expect_same(const TimeSplit& a, const TimeSplit& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.window_ns, b.window_ns);
  EXPECT_EQ(a.category_ns, b.category_ns);
  EXPECT_EQ(a.exclusive_ns, b.exclusive_ns);
  EXPECT_EQ(a.busy_ns, b.busy_ns);
  EXPECT_EQ(a.idle_ns, b.idle_ns);
  EXPECT_EQ(a.comm_ns, b.comm_ns);
  EXPECT_EQ(a.comm_hidden_ns, b.comm_hidden_ns);
  EXPECT_EQ(a.comm_exposed_ns, b.comm_exposed_ns);
}

// The report's stacked bar of one split: exclusive time per category, their
// overlap (busy - exclusive), outside, idle; each part >= 0, together the
// window (docs/analyses.md, breakdown.h).
void expect_parts_add_up(const TimeSplit& t, const std::string& what) {
  SCOPED_TRACE(what);
  std::int64_t exclusive = 0, comm_sum = 0, comm_max = 0;
  for (int c = 0; c < kNumCategories; ++c) {
    const auto i = static_cast<std::size_t>(c);
    EXPECT_GE(t.exclusive_ns[i], 0);
    EXPECT_LE(t.exclusive_ns[i], t.category_ns[i]) << category_name(static_cast<Category>(c));
    EXPECT_LE(t.category_ns[i], t.busy_ns) << category_name(static_cast<Category>(c));
    exclusive += t.exclusive_ns[i];
    if (is_communication(static_cast<Category>(c))) {
      comm_sum += t.category_ns[i];
      comm_max = std::max(comm_max, t.category_ns[i]);
    }
  }
  EXPECT_GT(t.window_ns, 0);
  EXPECT_GE(t.idle_ns, 0);
  EXPECT_LE(exclusive, t.busy_ns) << "overlap < 0";
  EXPECT_EQ(t.busy_ns + t.outside_ns() + t.idle_ns, t.window_ns) << "busy + outside + idle != window";
  EXPECT_EQ(t.comm_hidden_ns + t.comm_exposed_ns, t.comm_ns);
  EXPECT_GE(t.comm_hidden_ns, 0);
  EXPECT_GE(t.comm_exposed_ns, 0);
  EXPECT_LE(t.comm_ns, t.busy_ns);
  EXPECT_GE(t.comm_ns, comm_max);  // the union of the communication categories
  EXPECT_LE(t.comm_ns, comm_sum);
}

std::string row_name(const LayerRow& r) {
  return "layer " + std::to_string(r.layer) + " iteration " + std::to_string(r.iteration) + " " +
         std::string(phase_name(r.phase)) + " rank " + std::to_string(r.rank);
}

// 3. The breakdown of the whole trace.
void expect_breakdown_sums(const Trace& trace, int iterations) {
  const auto b = compute_breakdown(trace);
  ASSERT_TRUE(b.has_op_ranges);
  ASSERT_FALSE(b.rows.empty());
  // Every rank has a row for every iteration.
  EXPECT_EQ(b.iterations.size(), static_cast<std::size_t>(trace.run.world_size) * static_cast<std::size_t>(iterations));

  TimeSplit rows, iters;
  std::map<std::int32_t, TimeSplit> per_layer;
  std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> layer_windows;  // (iteration, rank)
  for (const auto& r : b.rows) {
    expect_parts_add_up(r.t, row_name(r));
    rows += r.t;
    per_layer[r.layer] += r.t;
    layer_windows[{r.iteration, r.rank}] += r.t.window_ns;
  }
  std::int64_t moe_union = 0;
  for (const auto& it : b.iterations) {
    const auto what = "iteration " + std::to_string(it.iteration) + " rank " + std::to_string(it.rank);
    expect_parts_add_up(it.t, what);
    iters += it.t;
    moe_union += it.moe_layer_ns;
    EXPECT_GE(it.moe_layer_ns, 0) << what;
    EXPECT_LE(it.moe_layer_ns, it.t.window_ns) << what;
    EXPECT_LE(it.moe_layer_ns, (layer_windows[{it.iteration, it.rank}])) << what << ": union above the sum";
  }
  expect_same(b.moe_total, rows, "moe_total = sum of the layer rows");
  expect_same(b.iteration_total, iters, "iteration_total = sum of the iteration rows");
  EXPECT_EQ(b.moe_union_ns, moe_union);
  EXPECT_LE(b.moe_share_of_iteration(), 1.0);
  ASSERT_EQ(b.layers.size(), per_layer.size());
  for (const auto& l : b.layers) {
    const auto what = "layer " + std::to_string(l.layer) + " summary";
    expect_same(l.total, per_layer[l.layer], what + ": total = sum of its rows");
    TimeSplit phases = l.forward;
    phases += l.backward;
    expect_same(phases, l.total, what + ": forward + backward = total");
    expect_parts_add_up(l.total, what);
  }
  // No layer's time per iteration exceeds the iteration it lies in.
  std::int64_t longest_iteration = 0;
  for (const auto& it : b.iterations) longest_iteration = std::max(longest_iteration, it.t.window_ns);
  for (const auto& l : b.layers) {
    EXPECT_LE(l.max_window_ns, longest_iteration) << "layer " << l.layer << ": longer than every iteration";
    EXPECT_LE(l.mean_window_ns, l.max_window_ns) << "layer " << l.layer;
  }
  for (const auto& r : b.ranks) {
    const auto what = "rank " + std::to_string(r.rank) + " (whole run)";
    expect_parts_add_up(r.t, what);
    EXPECT_EQ(r.t.busy_ns + r.t.idle_ns, r.t.window_ns) << what;
    EXPECT_LE(r.unattributed_ns, r.t.busy_ns) << what;
  }
}

// The memory peak lies inside the run, and is shown as time into it.
void expect_memory_in_run(const Trace& trace) {
  const MemoryAnalysis m = analyze_memory(trace);
  if (!m.has_allocations) return;
  EXPECT_GE(m.origin_ns, 0);
  for (const auto& r : m.ranks) {
    if (r.allocated.empty()) continue;
    EXPECT_GE(r.peak_ns - m.origin_ns, 0) << "rank " << r.rank << ": peak before the run's start";
    EXPECT_LE(r.peak_ns - m.origin_ns, trace.run.end_ns - trace.run.start_ns) << "rank " << r.rank;
  }
}

// 4. The op kinds of the run's variant.
int config_int(const Trace& t, std::string_view key) {
  const auto v = std::string(t.config_value(key));
  if (v.empty()) {
    ADD_FAILURE() << "run_config has no " << key;
    return -1;
  }
  return std::stoi(v);
}

void expect_variant_kinds(const Trace& trace) {
  const auto& variant = trace.run.variant;
  std::map<OpKind, std::int64_t> count;
  std::set<std::int32_t> dispatch_chunks, combine_chunks;
  std::set<Phase> moe_phases;
  for (const auto& op : trace.ops) {
    ++count[op.kind];
    if (op.kind == OpKind::kExpertFfn) moe_phases.insert(op.phase);
    if (op.phase != Phase::kForward) continue;
    if (op.kind == OpKind::kDispatchAllToAll) dispatch_chunks.insert(op.chunk);
    if (op.kind == OpKind::kCombineAllToAll) combine_chunks.insert(op.chunk);
  }
  auto has = [&](OpKind k) { return count[k] > 0; };
  auto expect_kind = [&](OpKind k, bool wanted, std::string_view why) {
    EXPECT_EQ(has(k), wanted) << variant << (wanted ? " lacks " : " has ") << op_kind_name(k) << " ops (" << why
                              << ")";
  };
  // Forward and backward: every builder emits both.
  EXPECT_TRUE(moe_phases.count(Phase::kForward) && moe_phases.count(Phase::kBackward))
      << "expert_ffn ops of forward and backward";
  expect_kind(OpKind::kGate, true, "every variant");
  expect_kind(OpKind::kExpertFfn, true, "every variant");

  if (variant == "ppmoe") {
    // Alg. 1: index_slice dispatches, index_assign (unpermute) + moe_all_reduce
    // over the tensor-parallel group gather; no all-to-all.
    expect_kind(OpKind::kIndexSlice, true, "ppmoe dispatch");
    expect_kind(OpKind::kUnpermute, true, "ppmoe index_assign");
    expect_kind(OpKind::kDispatchAllToAll, false, "ppmoe has no all-to-all");
    expect_kind(OpKind::kCombineAllToAll, false, "ppmoe has no all-to-all");
    expect_kind(OpKind::kMoeAllReduce, config_int(trace, "ppmoe.tensor_parallel") > 1, "tensor_parallel > 1");
    const bool stages = config_int(trace, "ppmoe.pipeline_stages") > 1;
    expect_kind(OpKind::kPipelineSend, stages, "pipeline_stages > 1");
    expect_kind(OpKind::kPipelineRecv, stages, "pipeline_stages > 1");
  } else {
    static const std::set<std::string> kExpertParallel = {"dpmoe", "pipemoe", "mpipemoe", "pro_prophet", "fastermoe"};
    ASSERT_TRUE(kExpertParallel.count(variant)) << "run.variant \"" << variant << "\" is no MoE variant";
    for (auto k : {OpKind::kPermute, OpKind::kDispatchAllToAll, OpKind::kCombineAllToAll, OpKind::kUnpermute})
      expect_kind(k, true, "every expert-parallel variant");
    // Chunks: pipemoe's r, mpipemoe's n (chunk -1 where there is one).
    int chunks = 1;
    if (variant == "pipemoe") chunks = config_int(trace, "pipemoe.pipeline_degree");
    if (variant == "mpipemoe") chunks = config_int(trace, "mpipemoe.partitions");
    std::set<std::int32_t> want;
    for (int c = 0; c < chunks; ++c) want.insert(chunks > 1 ? c : -1);
    EXPECT_EQ(dispatch_chunks, want) << "chunks of the forward dispatch_all_to_all";
    EXPECT_EQ(combine_chunks, want) << "chunks of the forward combine_all_to_all";
  }

  // mpipemoe Table II: the restore of T_DI and T_M, as the strategy's row of
  // kReuseStrategies says; no other variant restores anything.
  auto traits = plan::reuse_strategy_traits(plan::ReuseStrategy::kNone);
  if (variant == "mpipemoe") {
    const auto s = std::string(trace.config_value("mpipemoe.strategy"));
    ASSERT_FALSE(s.empty()) << "run_config has no mpipemoe.strategy";
    traits = plan::reuse_strategy_traits(plan::parse_reuse_strategy(s));
  }
  const auto why = variant + " strategy " + std::string(traits.name);
  expect_kind(OpKind::kOffload, traits.copies(), why);
  expect_kind(OpKind::kPrefetch, traits.copies(), why);
  expect_kind(OpKind::kRecommunicate, traits.t_di == plan::Restore::kRecommunicate, why);
  expect_kind(OpKind::kRecompute, traits.t_m == plan::Restore::kRecompute, why);

  // Pro-Prophet's Plan: beside iteration j's dispatch for j + 1 (block
  // schedule), or before every dispatch (unscheduled). Trans / Agg depend on
  // the planner's choice: asserted only for FasterMoE's fixed shadows.
  if (variant == "pro_prophet") {
    const bool scheduled = trace.config_value("pro_prophet.block_schedule") != "false";
    if (!scheduled || config_int(trace, "iterations") > 1) expect_kind(OpKind::kPlan, true, "pro_prophet Plan");
  } else {
    expect_kind(OpKind::kPlan, false, "Plan is Pro-Prophet's");
  }
  if (variant == "fastermoe") {
    const auto shadows = std::string(trace.config_value("fastermoe.shadow_experts"));
    if (!shadows.empty() && shadows != "[]" && trace.run.world_size > 1) {
      expect_kind(OpKind::kTrans, true, "fixed shadow experts are broadcast");
      expect_kind(OpKind::kAgg, true, "fixed shadow experts' gradients are reduced");
    }
  } else if (variant != "pro_prophet") {
    expect_kind(OpKind::kTrans, false, "no replicated experts");
    expect_kind(OpKind::kAgg, false, "no replicated experts");
  }
}

void check_fixture(const Fixture& f) {
  const auto dbs = databases(f);
  ASSERT_EQ(dbs.size(), f.files.size());
  const auto trace = load_run(dbs);
  std::cout << "[ fixture  ] " << f.name << ": " << trace.run.variant << " (" << trace.run.backend << "), "
            << trace.run.world_size << " ranks, " << trace.ops.size() << " ops, " << trace.activities.size()
            << " activities\n";
  if (!overridden()) {
    EXPECT_EQ(trace.run.backend, "cuda") << "a fixture under tests/data/gpu must be a GPU run";
    EXPECT_FALSE(trace.run.simulated);
  }
  {
    SCOPED_TRACE("1. dropped records");
    expect_complete(dbs, trace);
  }
  {
    SCOPED_TRACE("2. op attribution");
    std::int64_t kernel_rows = 0;
    for (const auto& db : dbs) kernel_rows += expect_kernels_inside_ops(db);
    expect_kernels_attributed(trace, kernel_rows);
  }
  {
    SCOPED_TRACE("3. breakdown sums");
    expect_breakdown_sums(trace, config_int(trace, "iterations"));
  }
  {
    SCOPED_TRACE("4. op kinds of variant " + trace.run.variant);
    expect_variant_kinds(trace);
    expect_memory_in_run(trace);
  }
}

TEST(GpuFixtures, EveryTraceIsCompleteAttributedAndSumsUp) {
  const auto dir = fixture_dir();
  if (overridden()) {
    ASSERT_TRUE(fs::is_directory(dir)) << "MOETRACE_GPU_FIXTURES: no directory " << dir.string();
  }
  const auto fixtures = find_fixtures(dir);
  if (fixtures.empty())
    GTEST_SKIP() << "no GPU trace fixtures under " << dir.string()
                 << " (record them as tests/data/gpu/README.md says)";
  for (const auto& f : fixtures) {
    SCOPED_TRACE("fixture " + f.name);
    try {
      check_fixture(f);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

// The simulator against the GPU (tests/data/gpu/pipemoe_sweep, README
// there): PipeMoE on one rank of an H200 at r = 1, 2, 4, 8, and the cost
// model `moetrace fit` makes of the calibration run recorded beside them
// (fitted here again from that trace, host issue term included). The
// measured layer windows are the GPU's. This is a regression guard, not
// evidence of fidelity: each r's error (simulated / measured - 1) is held
// within 3 percentage points of the error recorded below (the simulator and
// the fit are deterministic on these fixtures, so the margin is room for
// rounding and small model refinements only); a change that moves an error
// further, better or worse, must record the new one here and in
// BENCHMARKS.md. The accuracy goal (within 10 %) is reported beside it, not
// asserted: on these fixtures only r = 4 meets it. Without the host issue
// term r = 8 misses by 63 %.
TEST(GpuFixtures, PipeMoeSweepAgainstTheSimulatorOnTheCalibrationsFit) {
  const fs::path dir = fixture_dir() / "pipemoe_sweep";
  if (!fs::exists(dir / "calibration_p1.db.gz")) GTEST_SKIP() << "no PipeMoE sweep under " << dir.string();
  auto inflate = [&](const std::string& name) {
    const auto db = testing::temp_path("sweep_" + name);
    const auto error = testing::gunzip((dir / (name + ".gz")).string(), db);
    EXPECT_EQ(error, "");
    return db;
  };
  auto layer_window_ms = [](const Trace& t) {
    const auto b = compute_breakdown(t);
    EXPECT_EQ(b.layers.size(), 1u);
    return b.layers.empty() ? 0.0 : static_cast<double>(b.layers[0].mean_window_ns) / 1e6;
  };
  const Trace calibration = load_trace(inflate("calibration_p1.db"));
  const auto fitted = sim_cost_model_json(calibration, fit_cost_model(calibration), "");
  ASSERT_TRUE(fitted.contains("host_issue")) << fitted.dump();
  const sim::CostModel model = sim::cost_model_from_json(fitted.dump());
  const std::string config = testing::read_text((dir / "pipemoe_p1_r1.json").string());
  // Errors recorded 2026-12-05 (commit of this test's bounds).
  constexpr double kMargin = 0.03, kGoal = 0.10;
  for (const auto& [r, recorded] :
       {std::pair{1, -0.168}, std::pair{2, 0.131}, std::pair{4, 0.027}, std::pair{8, -0.145}}) {
    SCOPED_TRACE("r = " + std::to_string(r));
    const double measured = layer_window_ms(load_trace(inflate("pipemoe_p1_r" + std::to_string(r) + ".db")));
    sim::RunSpec spec = sim::run_spec_from_json(config);
    spec.pipeline_degree = r;
    const auto db = testing::temp_path("sweep_sim_r" + std::to_string(r) + ".db");
    sim::simulate_to_trace(db, sim::build_plan(spec), model);
    const double simulated = layer_window_ms(load_trace(db));
    std::cout << "[ sweep ] r = " << r << ": measured " << measured << " ms, simulated " << simulated << " ms ("
              << (simulated / measured - 1) * 100 << " %; the 10 % goal "
              << (std::abs(simulated / measured - 1) <= kGoal ? "met" : "not met") << ")" << std::endl;
    EXPECT_NEAR(simulated / measured - 1, recorded, kMargin);
  }
}

}  // namespace
}  // namespace moetrace::analyzer
