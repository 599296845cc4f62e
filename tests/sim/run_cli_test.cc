// `moetrace run` end to end: presets, config files, overrides, the trace it
// writes, and one clear line (naming the field) for every impossible input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/trace.h"
#include "cli_run.h"
#include "text_trace.h"

namespace moetrace {
namespace {

// Per test process (ctest runs tests in parallel): never a shared fixed path.
std::string temp(const std::string& name) { return testing::temp_path("run_" + name); }

using testing::run_cli;

// A run the CUDA backend accepted: where it ran (exit 0), `ran` checks what
// it wrote; else it failed in one line saying why (no GPU, no driver).
template <class Ran>
void expect_ran_or_one_line(const testing::CliResult& r, Ran&& ran) {
  if (r.exit_code == 0) {
    ran();
    return;
  }
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(RunCli, PresetWritesASimulatedTrace) {
  const auto db = temp("preset.db");
  const auto r = run_cli("run --preset pipemoe-tm1-p16 --iterations 1 -o " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("simulated pipemoe on 16 ranks"), std::string::npos) << r.err;
  const auto t = analyzer::load_trace(db);
  EXPECT_TRUE(t.run.simulated);
  EXPECT_EQ(t.run.backend, "sim");
  EXPECT_EQ(t.run.variant, "pipemoe");
  EXPECT_EQ(t.run.world_size, 16);
  EXPECT_EQ(t.devices.size(), 16u);
  EXPECT_NE(t.run.config_json.find("\"preset\": \"pipemoe-tm1-p16\""), std::string::npos);
  // The report runs on it like on any trace.
  const auto rep = run_cli("report " + db);
  EXPECT_EQ(rep.exit_code, 0) << rep.err;
  EXPECT_NE(rep.out.find("all-to-all"), std::string::npos);
  std::filesystem::remove(db);
}

TEST(RunCli, ConfigFileAndOverrides) {
  const auto cfg = temp("config.json"), db = temp("config.db");
  std::ofstream(cfg) << R"({"preset": "pipemoe-tm2-p16", "iterations": 1,
                            "pipemoe": {"pipeline_degree": 4},
                            "routing": {"pattern": "zipf", "zipf_skew": 1.1, "seed": 7}})";
  const auto r = run_cli("run -c " + cfg + " --ranks 8 --experts 16 --seed 9 -q -o " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto t = analyzer::load_trace(db);
  EXPECT_EQ(t.run.world_size, 8);
  int max_chunk = -1;
  for (const auto& o : t.ops) max_chunk = std::max(max_chunk, o.chunk);
  EXPECT_EQ(max_chunk, 3);  // r = 4 from the file
  EXPECT_NE(t.run.config_json.find("\"seed\": 9"), std::string::npos);
  EXPECT_NE(t.run.config_json.find("\"pattern\": \"zipf\""), std::string::npos);
  std::filesystem::remove(db);
}

TEST(RunCli, EveryVariantRuns) {
  for (const char* v : {"dpmoe", "ppmoe", "pipemoe", "mpipemoe", "pro_prophet", "fastermoe"}) {
    const auto db = temp(std::string(v) + ".db");
    const auto r = run_cli(std::string("run --variant ") + v + " --iterations 1 -q -o " + db);
    EXPECT_EQ(r.exit_code, 0) << v << ": " << r.err;
    EXPECT_EQ(analyzer::load_trace(db).run.variant, v);
    std::filesystem::remove(db);
  }
}

TEST(RunCli, ListsPresetsAndDumpsConfig) {
  const auto l = run_cli("run --list-presets");
  ASSERT_EQ(l.exit_code, 0);
  for (const char* name : {"pipemoe-t4-p{16,32,64}", "pipemoe-rm2-p64", "mpipemoe-gpt3-xl", "pro-prophet-gpt-dm",
                           "ppmoe-large", "h100-nvlink-ib", "pipemoe-2080ti-ib100"})
    EXPECT_NE(l.out.find(name), std::string::npos) << name;
  const auto d = run_cli("run --preset pipemoe-t4-p32-b2-l512-h2048-m1024-e2 --dump-config");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("\"num_experts\": 64"), std::string::npos) << d.out;
  // What --dump-config prints reads back as a config file.
  const auto cfg = temp("dumped.json");
  std::ofstream(cfg) << d.out;
  const auto again = run_cli("run -c " + cfg + " --dump-config");
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, d.out);
}

void expect_config_error(const std::string& args, const std::string& message) {
  const auto r = run_cli("run " + args + " -o " + temp("never.db"));
  EXPECT_EQ(r.exit_code, 2) << args;
  EXPECT_EQ(r.err, "moetrace: invalid configuration: " + message + "\n") << args;
  EXPECT_EQ(r.out, "");
}

TEST(RunCli, ImpossibleConfigsNameTheField) {
  expect_config_error("--variant dpmoe --ranks 4 --experts 6", "num_experts (6) is not divisible by ranks (4)");
  expect_config_error("--variant pipemoe -r 0", "r (0) must be at least 1");
  expect_config_error("--variant pipemoe --iterations 0", "iterations (0) must be at least 1");
  expect_config_error("--variant mpipemoe -r 1 --strategy S2",
                      "partitions (1) must be at least 2 for memory reuse strategy S2");
  expect_config_error("--variant dpmoe --routing uniform", "routing \"uniform\" is not one of balanced, zipf, drifting");
  expect_config_error("--variant zigzag", "variant \"zigzag\" is not one of dpmoe, ppmoe, pipemoe, mpipemoe, "
                                          "pro_prophet, fastermoe");
  expect_config_error("--preset pipemoe-t4-p16-b3-l512-h1024-m1024-e1",
                      "preset pipemoe-t4-p16-b3-l512-h1024-m1024-e1: B (3) is not in pipemoe Table IV (2, 4, 8)");
  expect_config_error("--variant ppmoe --ranks 6",
                      "pipeline_stages (2) x tensor_parallel (2) does not divide ranks (6)");
  expect_config_error("--variant dpmoe --tokens 0", "routing.tokens_per_source (0) must be at least 1");
  const auto r = run_cli("run --variant dpmoe --memory-budget 1000 -o " + temp("never.db"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("moetrace: invalid configuration: memory_budget_bytes (1000) is below the model states", 0),
            0u)
      << r.err;
  const auto cfg = temp("typo.json");
  std::ofstream(cfg) << R"({"variant": "dpmoe", "model": {"num_expert": 8}})";
  expect_config_error("-c " + cfg, "model.num_expert is not a known configuration key");
  std::ofstream(cfg, std::ios::trunc) << R"({"variant": "dpmoe", "cost_model": "tpu-v5"})";
  const auto c = run_cli("run -c " + cfg);
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_EQ(c.err.rfind("moetrace: invalid configuration: cost_model \"tpu-v5\" is not a known preset", 0), 0u) << c.err;
}

TEST(RunCli, CudaBackendRunsOrSaysWhyNotInOneLine) {
  const auto db = temp("cuda.db");
  const auto r = run_cli("run --backend cuda --variant dpmoe --ranks 2 --experts 4 --layers 1 --iterations 1 "
                         "--tokens 64 -o " + db);
  std::filesystem::remove(db);
  expect_ran_or_one_line(r, [] {});  // a GPU ran it, or:
  if (r.exit_code == 0) return;
  const bool no_backend = r.err == "moetrace: --backend cuda: this build has no CUDA backend; use --backend sim\n";
  const bool no_gpu = r.err.rfind("moetrace: no NVIDIA driver (", 0) == 0 || r.err.rfind("moetrace: no CUDA GPU found (", 0) == 0;
  EXPECT_TRUE(no_backend || no_gpu) << r.err;
}

TEST(RunCli, CollectorSwitchAndWarmupAreForTheCudaBackend) {
  expect_config_error("--backend sim --variant dpmoe --no-trace", "--no-trace is for --backend cuda (not sim)");
  expect_config_error("--backend sim --variant dpmoe --warmup 1", "--warmup is for --backend cuda (not sim)");
  expect_config_error("--backend cuda --variant dpmoe --warmup -1", "--warmup (-1) must be at least 0");
  // Accepted by the CUDA backend: it runs, or says in one line why it cannot.
  const auto db = temp("cuda_nt.db");
  const auto r = run_cli("run --backend cuda --variant dpmoe --ranks 2 --experts 4 --layers 1 --iterations 1 --tokens 64 "
              "--no-trace --warmup 1 -o " + db);
  expect_ran_or_one_line(r, [&] {
    EXPECT_NE(r.err.find("after 1 warm-up run, "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("collector off"), std::string::npos) << r.err;
    EXPECT_TRUE(analyzer::load_trace(db).activities.empty());
  });
  std::filesystem::remove(db);
}

TEST(RunCli, CudaGraphModeIsForTheCudaBackend) {
  expect_config_error("--backend sim --variant dpmoe --cuda-graph", "--cuda-graph is for --backend cuda (not sim)");
  expect_config_error("--backend cuda --calibrate --cuda-graph",
                      "--cuda-graph is not for --calibrate: the sweep measures each op as the host launches it");
  // Accepted by the CUDA backend: it runs (one graph per iteration, said in
  // its summary and the trace's run_config), or says in one line why it cannot.
  const auto db = temp("cuda_cg.db");
  const auto r = run_cli("run --backend cuda --variant dpmoe --ranks 2 --experts 4 --layers 1 --iterations 2 --tokens 64 "
                         "--cuda-graph -o " + db);
  expect_ran_or_one_line(r, [&] {
    EXPECT_NE(r.err.find(", 2 CUDA graphs)"), std::string::npos) << r.err;
    EXPECT_EQ(analyzer::load_trace(db).config_value("cuda.graph"), "on");
  });
  std::filesystem::remove(db);
}

TEST(RunCli, NothingToRun) {
  const auto r = run_cli("run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "moetrace: invalid configuration: nothing to run: give --preset, --variant or --config (see "
                   "--list-presets)\n");
}

}  // namespace
}  // namespace moetrace

namespace moetrace {
namespace {

// The host issue term end to end: a cost model with one writes each op's
// issue interval as its launch interval, and `moetrace fit` of that trace
// gives the same term back (every op of a kind issues in exactly its
// cost, so each launch count's median is that cost).
TEST(RunCli, HostIssueRoundTripsThroughTheTraceAndFit) {
  const auto model = temp("host_model.json"), db = temp("host.db"), fitted = temp("host_fitted.json");
  std::ofstream(model) << R"({"base": "h100-nvlink-ib", "host_issue": {
      "expert_ffn": {"alpha_s": 2e-5, "per_launch_s": 1.5e-5}, "gate": {"alpha_s": 3e-5}}})";
  auto r = run_cli("run --backend sim --variant pipemoe -r 4 --ranks 2 --experts 4 --layers 1 -i 2 -q --cost-model " +
                   model + " -o " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto t = analyzer::load_trace(db);
  int ffn = 0;
  for (const auto& op : t.ops) {
    ASSERT_GE(op.launch_end_ns, op.launch_start_ns) << op.id.value;
    if (op.kind != OpKind::kExpertFfn) continue;
    ++ffn;
    // Released no earlier than its issue allows (it ends after the issue).
    EXPECT_GE(op.end_ns, op.launch_end_ns) << op.id.value;
    const auto issue = op.launch_end_ns - op.launch_start_ns;
    EXPECT_TRUE(std::abs(issue - (op.phase == Phase::kForward ? 50'000 : 80'000)) <= 1) << issue;
  }
  EXPECT_GT(ffn, 0);
  r = run_cli("fit " + db + " -o " + fitted);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(std::ifstream(fitted));
  ASSERT_TRUE(j.contains("host_issue")) << j.dump();
  EXPECT_NEAR(j["host_issue"]["expert_ffn"]["alpha_s"].get<double>(), 2e-5, 1e-8);
  EXPECT_NEAR(j["host_issue"]["expert_ffn"]["per_launch_s"].get<double>(), 1.5e-5, 1e-8);
  EXPECT_NEAR(j["host_issue"]["gate"]["alpha_s"].get<double>() + j["host_issue"]["gate"]["per_launch_s"].get<double>(),
              3e-5, 1e-8);  // forward (1 launch) and backward (2): 30 us each
  // Kinds the model issued instantly fit at 0: nothing to charge, left out.
  EXPECT_FALSE(j["host_issue"].contains("dispatch_all_to_all")) << j["host_issue"].dump();
  for (const auto& p : {model, db, fitted}) std::filesystem::remove(p);
}

TEST(RunCli, CalibrateWritesTheSweep) {
  const auto db = temp("calibrate.db");
  auto r = run_cli("run --backend sim --calibrate --ranks 4 --cost-model pipemoe-2080ti-ib100 -o " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("calibration sweep on 4 ranks"), std::string::npos) << r.err;
  const auto t = analyzer::load_trace(db);
  EXPECT_EQ(t.run.variant, "calibration");
  EXPECT_NE(t.run.config_json.find("\"calibration\""), std::string::npos);
  std::set<std::int32_t> groups;
  std::map<std::int32_t, int> members;
  for (const auto& op : t.ops)
    if (op.kind == OpKind::kDispatchAllToAll) ++members[op.chunk];
  for (const auto& [sample, n] : members) groups.insert(n);
  EXPECT_EQ(groups, (std::set<std::int32_t>{2, 4}));  // every group size swept
  // A bad size is one line naming the field.
  r = run_cli("run --backend sim --calibrate --ranks 0 -o " + db);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("ranks"), std::string::npos) << r.err;
  std::filesystem::remove(db);
}

// The sweep's routing ops take the workload's experts and top-k, and
// `fit` gives back the routing ops' costs of the model it ran on: gate
// 7 us a GEMM launch at 30 TFLOP/s, permute 3 us at 900 GB/s, unpermute
// 5 us at 600 GB/s (set here, none of them a preset's).
TEST(RunCli, CalibrateSweepsTheRoutingOpsAndFitRecoversThem) {
  const auto db = temp("calibrate_routing.db"), model = temp("calibrate_routing_model.json"),
             fitted = temp("calibrate_routing_fit.json");
  std::ofstream(model) << R"({"base": "h100-nvlink-ib", "compute_by_kind": {
      "gate": {"alpha_s": 7e-6, "seconds_per_flop": 3.3333333333333335e-14},
      "permute": {"alpha_s": 3e-6, "seconds_per_byte": 1.1111111111111112e-12},
      "unpermute": {"alpha_s": 5e-6, "seconds_per_byte": 1.6666666666666667e-12}}})";
  auto r = run_cli("run --backend sim --calibrate --ranks 2 --experts 6 --top-k 3 --cost-model " + model + " -q -o " +
                   db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto t = analyzer::load_trace(db);
  ASSERT_EQ(t.layers.size(), 1u);
  EXPECT_EQ(t.layers[0].num_experts, 6);
  EXPECT_EQ(t.layers[0].top_k, 3);
  int permutes = 0;
  for (const auto& op : t.ops)
    if (op.kind == OpKind::kPermute && op.phase == Phase::kForward &&
        t.str(op.name).find(".rows64.") != std::string_view::npos) {
      ++permutes;
      EXPECT_EQ(op.bytes, 64 * 3 * 1024 * 2) << t.str(op.name);  // 64 tokens x top-3 rows of M = 1024 bf16
    }
  EXPECT_EQ(permutes, 2 * 2);  // two repeats on each of two ranks
  r = run_cli("fit " + db + " -o " + fitted);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(testing::read_text(fitted));
  const auto& by_kind = j.at("compute_by_kind");
  for (const auto& [kind, alpha, per_flop, per_byte] :
       {std::tuple{"gate", 7e-6, 1 / 30e12, 0.0}, std::tuple{"permute", 3e-6, 0.0, 1 / 900e9},
        std::tuple{"unpermute", 5e-6, 0.0, 1 / 600e9}}) {
    ASSERT_TRUE(by_kind.contains(kind)) << j.dump();
    EXPECT_NEAR(by_kind[kind]["alpha_s"].get<double>(), alpha, 1e-3 * alpha) << kind;
    EXPECT_NEAR(by_kind[kind]["seconds_per_flop"].get<double>(), per_flop, 1e-4 * per_flop + 1e-30) << kind;
    EXPECT_NEAR(by_kind[kind]["seconds_per_byte"].get<double>(), per_byte, 1e-4 * per_byte + 1e-30) << kind;
  }
  r = run_cli("fit " + db + " --format text");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Computation as the simulator takes it"), std::string::npos) << r.out;
  for (const auto& f : {db, model, fitted}) std::filesystem::remove(f);
}

}  // namespace
}  // namespace moetrace

namespace moetrace {
namespace {

TEST(RecommendCli, FormatsAndErrors) {
  const auto db = temp("rec.db"), db4 = temp("rec4.db");
  ASSERT_EQ(run_cli("run --backend sim --preset pipemoe-t4-p16-b2-l512-h2048-m1024-e1 -i 1 -q -o " + db).exit_code, 0);
  ASSERT_EQ(run_cli("run --backend sim --preset pipemoe-t4-p16-b2-l512-h2048-m1024-e1 -i 1 -r 4 -q -o " + db4).exit_code, 0);
  auto r = run_cli("recommend " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"pipeline degree:", "memory reuse:", "expert placement:", "layout:", "Theorem 1"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  r = run_cli("recommend --format json " + db + " " + db4);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["items"].size(), 4u);
  EXPECT_EQ(j["layers"][0]["pipeline_degree"]["range_search"]["runs"].size(), 2u);
  r = run_cli("recommend --format markdown --r-candidates 1,2,4,8 --no-simulate " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| layer | subject | action | predicted gain |"), std::string::npos);
  // Bad input: one line, non-zero.
  r = run_cli("recommend " + temp("missing.db"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run_cli("recommend --r-candidates 1,x " + db);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--r-candidates"), std::string::npos) << r.err;
  r = run_cli("recommend --cost-model no-such-model " + db);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no-such-model"), std::string::npos) << r.err;
  std::filesystem::remove(db);
  std::filesystem::remove(db4);
}

}  // namespace
}  // namespace moetrace
