// The replay (replay.h) on real traces, and the what-ifs (graph_whatif.h)
// against GPU measurements moetrace did not predict: tests/data/gpu (H200
// traces of the CUDA executor, README there) and ../shared/data (traces of
// other teams and tools).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>

#include "gunzip.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/graph_whatif.h"
#include "moetrace/analyzer/model_spec.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/replay.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/cost_model.h"
#include "shared_data.h"
#include "test_paths.h"
#include "text_trace.h"

namespace moetrace::analyzer {
namespace {

namespace fs = std::filesystem;

Trace load_fixture(const fs::path& gz) {
  return load_trace(testing::inflated(gz.string(), "replay_" + gz.stem().string()));
}

// What-ifs priced by the cost model that the pipemoe sweep's calibration
// fitted on the fixtures' GPU (pipemoe_sweep/fitted_p1.json).
RecommendOptions fitted_p1_options() {
  const fs::path file = fs::path(MOETRACE_GPU_FIXTURES_DIR) / "pipemoe_sweep" / "fitted_p1.json";
  RecommendOptions o;
  o.cost_model = sim::cost_model_from_json(testing::read_text(file.string()));
  return o;
}

// The MoE layers' time in an iteration: the sum of their mean windows.
double layers_ns(const Trace& t) {
  double sum = 0;
  for (const auto& l : compute_breakdown(t).layers) sum += static_cast<double>(l.mean_window_ns);
  return sum;
}

// Every iteration of every real trace replays within 3 % of its measured
// time, and no point of the graph is left on a cycle (BENCHMARKS.md,
// "Replay": bench/replay_errors.sh prints the same table).
void expect_replays(const Trace& t, const std::string& name) {
  SCOPED_TRACE(name);
  const auto s = replay(t);
  EXPECT_FALSE(s.iterations.empty());
  EXPECT_EQ(s.unresolved, 0);
  EXPECT_LE(s.max_iteration_error, 0.03);
  EXPECT_LE(s.max_layer_error, 0.03);
  std::cout << "[ replay ] " << name << ": worst iteration " << 100 * s.max_iteration_error << " %, worst layer "
            << 100 * s.max_layer_error << " %" << std::endl;
}

TEST(Replay, EveryGpuFixtureWithinThreePercent) {
  const fs::path dir = MOETRACE_GPU_FIXTURES_DIR;
  int n = 0;
  for (const auto& sub : {dir, dir / "pipemoe_sweep"})
    for (const auto& e : fs::directory_iterator(sub)) {
      const auto name = e.path().filename().string();
      if (!name.ends_with(".db.gz")) continue;
      expect_replays(load_fixture(e.path()), name);
      ++n;
    }
  expect_replays(load_trace((dir / "torch_moe_peer.json.gz").string()), "torch_moe_peer.json.gz");
  EXPECT_GE(n, 16);  // ten variants, the sweep's four, its calibration and the grouped-GEMM DPMoE
}

TEST(Replay, EverySharedTraceWithinThreePercent) {
  const auto kineto = testing::shared_data("kineto");
  MOETRACE_NEED_SHARED(kineto);
  int n = 0;
  for (const auto& folder : {kineto, testing::shared_data("nsys")})
    for (const auto& e : fs::directory_iterator(folder)) {
      expect_replays(load_trace(e.path().string()), e.path().filename().string());
      ++n;
    }
  EXPECT_GE(n, 14);
}

// PipeMoE on one H200 rank at r = 1, 2, 4, 8 (tests/data/gpu/pipemoe_sweep):
// the r = 1 trace alone, split by the pipeline_degree what-if with the
// calibration's fitted cost model (fitted_p1.json, the same GPU), against the
// layer windows the r = 2, 4, 8 traces measured. Recorded errors
// (BENCHMARKS.md, "What-ifs against measurements"): r = 2 +0.04 %; r = 4
// -20 % and r = 8 -35 %, where the traced runs are host-bound and the
// collector's cost per launch grew with the launch rate (the unsplit gate
// op's host time 35 us at r = 1, 52-57 us at r = 4-8, with the same calls):
// the runs without the collector took 3.25 and 6.70 ms an iteration against
// 4.60 and 10.59 traced (README there). The goal is 10 %; the bounds here
// hold each r's recorded error within 5 points, so that a change in either
// direction is seen and the table updated.
TEST(WhatIf, PipelineDegreeFromTheR1TraceAgainstTheMeasuredSweep) {
  const fs::path dir = fs::path(MOETRACE_GPU_FIXTURES_DIR) / "pipemoe_sweep";
  const Trace r1 = load_fixture(dir / "pipemoe_p1_r1.db.gz");
  RecommendOptions o = fitted_p1_options();
  o.cost_model_source = "fitted_p1.json";
  auto layer_ns = [](const Trace& t) {
    const auto b = compute_breakdown(t);
    EXPECT_EQ(b.layers.size(), 1u);
    return b.layers.empty() ? 0.0 : static_cast<double>(b.layers[0].mean_window_ns);
  };
  for (const auto& [r, recorded] : {std::pair{2, 0.0004}, std::pair{4, -0.20}, std::pair{8, -0.35}}) {
    SCOPED_TRACE("r = " + std::to_string(r));
    GraphWhatIfs w;
    w.pipeline_degree = r;
    const auto p = replay_with_what_ifs(r1, w, o);
    EXPECT_EQ(p.what_ifs.instances_changed, 6);  // 1 layer x 3 iterations x forward and backward
    EXPECT_EQ(p.summary.unresolved, 0);
    EXPECT_EQ(p.predicted_unresolved, 0);
    ASSERT_EQ(p.summary.layers.size(), 1u);
    const double predicted = static_cast<double>(p.summary.layers[0].predicted_ns);
    const double measured = layer_ns(load_fixture(dir / ("pipemoe_p1_r" + std::to_string(r) + ".db.gz")));
    const double error = predicted / measured - 1;
    std::cout << "[ what-if ] r = " << r << ": measured " << measured / 1e6 << " ms, predicted from r = 1 "
              << predicted / 1e6 << " ms (" << 100 * error << " %)" << std::endl;
    EXPECT_NEAR(error, recorded, 0.05);
  }
}

// MPipeMoE on 4 emulated ranks of one H200 (tests/data/gpu, README there):
// the strategy-none trace, with the reuse what-if, against the S1..S4 traces
// of the same configuration. The what-if adds the restore work to every one
// of the 16 layer instances (4 ranks x 2 layers x 2 iterations) and predicts
// the layer windows 1.0-2.6 % longer than none's; the measured S1..S4 layers are
// 24-100 % longer. These runs are host-bound (one host thread issues the
// four ranks' ops) and their host ran slower per call than none's did: the
// same cudaGetDevice, which does no GPU work, took 0.258 us a call in none
// and 0.436 / 0.499 / 0.414 / 0.290 us in S1 / S2 / S3 / S4 (the traces'
// api_calls). A prediction from one run cannot know another run's host
// speed: the comparison waits for GPU-bound fixtures. The bounds hold the
// recorded errors within 5 points (a regression guard, not the goal).
TEST(WhatIf, ReuseFromTheNoneTraceAgainstTheMeasuredStrategies) {
  const fs::path dir = MOETRACE_GPU_FIXTURES_DIR;
  const Trace none = load_fixture(dir / "mpipemoe_none.db.gz");
  const RecommendOptions o = fitted_p1_options();
  const double base = layers_ns(none);
  for (const auto& [s, recorded] : {std::pair{"S1", -0.40}, std::pair{"S2", -0.48}, std::pair{"S3", -0.39},
                                    std::pair{"S4", -0.19}}) {
    SCOPED_TRACE(s);
    GraphWhatIfs w;
    parse_graph_what_if(std::string("reuse=") + s, w);
    const auto p = replay_with_what_ifs(none, w, o);
    EXPECT_EQ(p.what_ifs.instances_changed, 16);
    EXPECT_EQ(p.summary.unresolved, 0);
    EXPECT_EQ(p.predicted_unresolved, 0);
    double predicted = 0;
    for (const auto& l : p.summary.layers) predicted += static_cast<double>(l.predicted_ns);
    const double measured = layers_ns(load_fixture(dir / (std::string("mpipemoe_") + s + ".db.gz")));
    const double error = predicted / measured - 1;
    std::cout << "[ what-if ] reuse=" << s << ": none " << base / 1e6 << " ms, predicted " << predicted / 1e6
              << " ms, measured " << measured / 1e6 << " ms (" << 100 * error << " %)" << std::endl;
    EXPECT_GE(predicted, base * 0.999);  // restoring memory never makes the layer faster
    EXPECT_NEAR(error, recorded, 0.05);
  }
}

// The DPMoE fixture and the Pro-Prophet one ran the same configuration
// (tests/data/gpu README): the placement what-if on the DPMoE trace against
// the measured Pro-Prophet run. Recorded: the layers' windows -15 % short of
// the measured run, which also runs Pro-Prophet's planner (Plan ops) and
// host work the what-if does not add, on a host-bound run. A guard within 5
// points, not the goal.
TEST(WhatIf, PlacementFromTheDpmoeTraceAgainstTheMeasuredProProphet) {
  const fs::path dir = MOETRACE_GPU_FIXTURES_DIR;
  const Trace dp = load_fixture(dir / "dpmoe.db.gz");
  const RecommendOptions o = fitted_p1_options();
  GraphWhatIfs w;
  parse_graph_what_if("placement=pro-prophet", w);
  const auto p = replay_with_what_ifs(dp, w, o);
  EXPECT_GE(p.what_ifs.instances_changed, 1);
  EXPECT_EQ(p.predicted_unresolved, 0);
  double predicted = 0;
  for (const auto& l : p.summary.layers) predicted += static_cast<double>(l.predicted_ns);
  const double measured = layers_ns(load_fixture(dir / "pro_prophet.db.gz"));
  const double error = predicted / measured - 1;
  std::cout << "[ what-if ] placement=pro-prophet: predicted " << predicted / 1e6 << " ms, measured " << measured / 1e6
            << " ms (" << 100 * error << " %)" << std::endl;
  EXPECT_NEAR(error, -0.15, 0.05);
}


// The reuse what-if takes the layer's M and H from where the recommenders
// take them when the layers table lacks them (here the run_config's
// model.model_dim and model.expert_hidden, 1024 and 4096, the values the
// table holds), and T_DI from the layer's routing when the dispatches
// record no bytes: the strategy-none fixture's prediction is then the
// same as with the table (with the routing, within the chunks' uneven
// split, below). Without M and H anywhere, nothing is changed and
// the note says why.
TEST(WhatIf, ReuseTakesTheLayerShapesWhereTheRecommendersDo) {
  const fs::path dir = MOETRACE_GPU_FIXTURES_DIR;
  const RecommendOptions o = fitted_p1_options();
  GraphWhatIfs w;
  parse_graph_what_if("reuse=S1", w);
  auto predicted = [&](const Trace& t) {
    const auto p = replay_with_what_ifs(t, w, o);
    double sum = 0;
    for (const auto& l : p.summary.layers) sum += static_cast<double>(l.predicted_ns);
    return std::pair{p, sum};
  };
  const auto [full, full_ns] = predicted(load_fixture(dir / "mpipemoe_none.db.gz"));
  EXPECT_EQ(full.what_ifs.instances_changed, 16);

  const auto path = testing::inflated((dir / "mpipemoe_none.db.gz").string(), "reuse_shapes.db");
  // (the integrity record goes: the tables no longer match it)
  testing::alter_trace(path, "DELETE FROM meta WHERE key = 'integrity'; UPDATE layers SET model_dim = NULL, hidden_dim = NULL");
  const auto [config, config_ns] = predicted(load_trace(path));
  EXPECT_EQ(config.what_ifs.instances_changed, 16);
  EXPECT_EQ(config_ns, full_ns);

  const auto no_bytes = testing::inflated((dir / "mpipemoe_none.db.gz").string(), "reuse_no_bytes.db");
  testing::alter_trace(no_bytes,
                       "DELETE FROM meta WHERE key = 'integrity'; UPDATE op_ranges SET bytes = NULL WHERE kind IN (SELECT id FROM op_kinds WHERE name = "
                       "'dispatch_all_to_all'); DROP TABLE IF EXISTS op_recv_bytes");
  const auto [routed, routed_ns] = predicted(load_trace(no_bytes));
  EXPECT_EQ(routed.what_ifs.instances_changed, 16);
  // The same with the dispatches' bytes set, by hand, to what the routing
  // gives: rank r computes the rows of experts 2r and 2r + 1 (8 experts on
  // 4 ranks) from every source in the last iteration's expert load (1),
  // x M = 1024 x 2 B, half of it in each of the two chunks.
  const auto by_hand = testing::inflated((dir / "mpipemoe_none.db.gz").string(), "reuse_by_hand.db");
  testing::alter_trace(by_hand,
                       "DELETE FROM meta WHERE key = 'integrity'; DROP TABLE IF EXISTS op_recv_bytes; "
                       "UPDATE op_ranges SET bytes = (SELECT SUM(tokens) FROM expert_load e WHERE e.iteration = 1 "
                       "AND e.layer = op_ranges.layer AND e.expert / 2 = op_ranges.rank) * 1024 * 2 / 2 WHERE kind IN "
                       "(SELECT id FROM op_kinds WHERE name = 'dispatch_all_to_all')");
  const auto [hand, hand_ns] = predicted(load_trace(by_hand));
  EXPECT_EQ(hand.what_ifs.instances_changed, 16);
  EXPECT_EQ(routed_ns, hand_ns);
  // (The fixture's dispatches record the bytes each rank sent, not those
  // it received: with them the layers differ by 0.14 %.)

  // A one-rank PyTorch-profiler trace: M and H come from its recorded
  // input shapes, but there is no dispatch to offload T_DI after; left as
  // measured, and said so.
  const auto [peer, peer_ns] = predicted(load_trace((dir / "torch_moe_peer.json.gz").string()));
  EXPECT_EQ(peer.what_ifs.instances_changed, 0);
  EXPECT_NE(std::find_if(peer.what_ifs.notes.begin(), peer.what_ifs.notes.end(),
                         [](const std::string& n) { return n.find("no dispatch all-to-all") != std::string::npos; }),
            peer.what_ifs.notes.end());

  testing::alter_trace(path, "DELETE FROM run_config WHERE key IN ('model.model_dim', 'model.expert_hidden')");
  const auto [none, none_ns] = predicted(load_trace(path));
  EXPECT_EQ(none.what_ifs.instances_changed, 0);
  EXPECT_NE(std::find_if(none.what_ifs.notes.begin(), none.what_ifs.notes.end(),
                         [](const std::string& n) {
                           return n.find("model and hidden sizes are not in the trace") != std::string::npos;
                         }),
            none.what_ifs.notes.end());
}

// A trace that records no layer sizes (its layers table and run_config
// without M and H, as a PyTorch-profiler trace without record_shapes): the
// reuse and placement what-ifs take them from the user's model, as
// `recommend --model` and `replay --model` give it. With the same M = 1024
// and H = 4096 that the fixtures' tables held, each prediction is the one
// of the whole fixture (the same inputs); without a model nothing changes
// and the note says why. The files name their sizes as Switch Transformers'
// config.json and Megatron-Core's arguments do (two-matrix experts, as the
// fixtures ran: a gated family's file would model 3H/2).
TEST(WhatIf, ReuseAndPlacementTakeTheUsersModelWhereTheTraceHasNoSizes) {
  const fs::path dir = MOETRACE_GPU_FIXTURES_DIR;
  const ModelSpec switch_t = parse_model_spec(R"({"model_type": "switch_transformers", "d_model": 1024,
      "d_ff": 4096, "num_experts": 8, "num_layers": 2, "feed_forward_proj": "relu", "torch_dtype": "bfloat16"})",
                                              "config.json");
  const ModelSpec megatron = parse_model_spec(
      "--num-layers 2 --hidden-size 1024 --moe-ffn-hidden-size 4096 --num-experts 8 --moe-router-topk 2 --bf16",
      "megatron_args.txt");
  auto without_sizes = [&](const char* fixture) {
    const auto path = testing::inflated((dir / fixture).string(), std::string("no_sizes_") + fixture);
    testing::alter_trace(path,
                         "DELETE FROM meta WHERE key = 'integrity'; UPDATE layers SET model_dim = NULL, hidden_dim = "
                         "NULL; DELETE FROM run_config WHERE key IN ('model.model_dim', 'model.expert_hidden')");
    return load_trace(path);
  };
  auto predicted = [](const Trace& t, const char* what_if, const ModelSpec* model) {
    GraphWhatIfs w;
    parse_graph_what_if(what_if, w);
    RecommendOptions o = fitted_p1_options();
    o.model = model;
    const auto p = replay_with_what_ifs(t, w, o);
    double sum = 0;
    for (const auto& l : p.summary.layers) sum += static_cast<double>(l.predicted_ns);
    return std::pair{p.what_ifs, sum};
  };
  auto noted = [](const GraphWhatIfResult& r, const char* text) {
    return std::any_of(r.notes.begin(), r.notes.end(),
                       [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };

  // Per what-if: the whole fixture's prediction, then the fixture without
  // sizes, alone (nothing changed, the note says why) and with the model.
  auto check = [&](const char* fixture, const char* what_if, const ModelSpec& model, const char* note) -> int {
    SCOPED_TRACE(what_if);
    const auto [full, full_ns] = predicted(load_fixture(dir / fixture), what_if, nullptr);
    EXPECT_GE(full.instances_changed, 1);
    const Trace bare = without_sizes(fixture);
    const auto [alone, alone_ns] = predicted(bare, what_if, nullptr);
    EXPECT_EQ(alone.instances_changed, 0);
    EXPECT_TRUE(noted(alone, note));
    const auto [given, given_ns] = predicted(bare, what_if, &model);
    EXPECT_EQ(given.instances_changed, full.instances_changed);
    EXPECT_EQ(given_ns, full_ns);
    return full.instances_changed;
  };
  EXPECT_EQ(check("mpipemoe_none.db.gz", "reuse=S2", switch_t, "model and hidden sizes are not in the trace"), 16);
  check("dpmoe.db.gz", "placement=pro-prophet", megatron, "model_dim or hidden size unknown");

  // A model that disagrees with what the trace still records (8 experts)
  // is the user's error, said in one line.
  const ModelSpec other = parse_model_spec(
      "--num-layers 2 --hidden-size 1024 --moe-ffn-hidden-size 4096 --num-experts 16 --moe-router-topk 2 --bf16",
      "other_args.txt");
  EXPECT_THROW(predicted(without_sizes("dpmoe.db.gz"), "placement=pro-prophet", &other), ConfigError);
}

// Each layer's advice quotes the what-if's note about its own layer: on the
// H200 PipeMoE fixture (2 layers, 4 emulated ranks, balanced routing) the
// planner keeps the home placement of both, and layer 1's evidence says
// "layer 1", not layer 0's note.
TEST(Recommend, EachLayerQuotesTheWhatIfNoteOfItsOwnLayer) {
  const auto rec = recommend(load_fixture(fs::path(MOETRACE_GPU_FIXTURES_DIR) / "pipemoe.db.gz"));
  ASSERT_EQ(rec.layers.size(), 2u);
  for (const auto& L : rec.layers) {
    SCOPED_TRACE(L.layer);
    const auto& notes = L.trace_replay.other_notes;
    auto quoted = [&](int layer) {
      const auto text = fmt::format("placement: layer {}:", layer);
      return std::any_of(notes.begin(), notes.end(),
                         [&](const std::string& n) { return n.find(text) != std::string::npos; });
    };
    EXPECT_TRUE(quoted(L.layer)) << ::testing::PrintToString(notes);
    EXPECT_FALSE(quoted(1 - L.layer));
  }
}

// `recommend` on a real trace whose execution graph replays within 5 % but
// whose own configuration the models replay far off: the PyTorch peer
// layer (one H200, no all-to-all, so no pipeline split of its graph) on the
// h100-nvlink-ib preset with every GEMM 4x slower. The layer is its expert
// GEMMs (P = 1: no all-to-all), so its simulation is about 4x the measured
// time, past the 20 % tolerance: every item the models chose says
// Unreliable, and the replay says which term is off. With the preset as it
// is (scaled to the H200 by HBM, the GEMM rate unchanged) the simulation
// lands within it (-1.7 %) and nothing is marked.
TEST(Recommend, ModelsOffTheTraceMarkTheirAdviceWhateverTheGraphReplay) {
  const auto peer = load_trace((fs::path(MOETRACE_GPU_FIXTURES_DIR) / "torch_moe_peer.json.gz").string());
  auto items_marked = [](const Recommendations& rec) {
    int n = 0;
    for (const auto& it : rec.items) n += it.evidence.rfind("Unreliable: ", 0) == 0;
    return n;
  };
  const auto plain = recommend(peer);
  ASSERT_EQ(plain.layers.size(), 1u);
  EXPECT_TRUE(plain.layers[0].trace_replay.computed && plain.layers[0].trace_replay.within);
  EXPECT_FALSE(plain.layers[0].replay.unreliable);
  EXPECT_EQ(items_marked(plain), 0);

  RecommendOptions slow;
  sim::CostModel m = sim::cost_model_preset("h100-nvlink-ib");
  m.compute.seconds_per_flop *= 4;
  for (auto& [kind, c] : m.compute_by_kind) c.seconds_per_flop *= 4;
  slow.cost_model = m;
  const auto off = recommend(peer, slow);
  ASSERT_EQ(off.layers.size(), 1u);
  const auto& L = off.layers[0];
  EXPECT_TRUE(L.trace_replay.computed && L.trace_replay.within);  // the graph holds, with measured durations
  EXPECT_GT(L.replay.error, 1.0);
  EXPECT_TRUE(L.replay.unreliable);
  EXPECT_EQ(L.replay.off_term, "compute");
  EXPECT_EQ(items_marked(off), static_cast<int>(off.items.size()));
}

}  // namespace
}  // namespace moetrace::analyzer
