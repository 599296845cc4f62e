// A run's files analysed one at a time (run_by_file.h) against the same
// files merged into one trace and analysed whole (load_run + analyze): every
// section of the report must agree, the fitted models included, but for the
// parts that need every rank's events at once (the path across ranks, the
// recommendations), which must say why they are absent. The rank files are built to exercise what the merge renames and
// corrects: clocks with offsets of milliseconds and drifts of ppm, stream
// and buffer ids that clash across files, a load table that every file
// holds whole, NVTX ranges of a framework's domain, launch calls, memory
// events on one rank and buffers on all.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/run_by_file.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/schema/sqlite.h"
#include "text_trace.h"
#include "test_paths.h"

namespace moetrace::analyzer {
namespace by_file_test {
namespace {

constexpr std::int64_t kBase = 2'000'000'000;  // 2 s: times far from zero, as real clocks are
constexpr int kRanks = 4, kLayers = 2, kIterations = 3, kExperts = 4;

// Rank r's clock: true time + offset + drift (true - kBase).
std::int64_t clock_of(int rank, std::int64_t t) {
  constexpr double kOffsetNs[kRanks] = {0, 5e6, -3e6, 7e6};
  constexpr double kDrift[kRanks] = {0, 10e-6, -10e-6, 5e-6};
  return t + std::llround(kOffsetNs[rank] + kDrift[rank] * static_cast<double>(t - kBase));
}

std::string rank_file(int rank, const std::string& name) {
  std::string t = fmt::format("run world_size={} backend=test variant=dpmoe\n", kRanks);
  t += fmt::format("stream id=0 rank={} role=compute\nstream id=1 rank={} role=comm\n", rank, rank);
  for (int l = 0; l < kLayers; ++l)
    t += fmt::format("layer layer={} experts={} top_k=1 model_dim=1024 hidden_dim=4096 tokens=8192\n", l, kExperts);
  // Every file holds the run's whole load table, as the simulator's do.
  for (int it = 0; it < kIterations; ++it)
    for (int l = 0; l < kLayers; ++l)
      for (int src = 0; src < kRanks; ++src)
        for (int e = 0; e < kExperts; ++e)
          t += fmt::format("load iteration={} layer={} src={} expert={} tokens={}\n", it, l, src, e,
                           100 + 37 * ((src + e + it) % 5) + 11 * l);
  int id = 1, corr = 1, buffer = 1;
  auto op = [&](int stream, std::string_view kind, int l, int it, std::int64_t start, std::int64_t end,
                std::string_view extra = {}) {
    const auto s = clock_of(rank, start), e = clock_of(rank, end);
    t += fmt::format("op id={} rank={} stream={} kind={} layer={} iteration={} phase=fwd start={} end={}{}\n", id, rank,
                     stream, kind, l, it, s, e, extra);
    // Its kernel, launched 3 us before it starts from thread 1, inside a
    // framework's NVTX range.
    t += fmt::format("kernel rank={} stream={} start={} end={} name={}_kernel corr={} op={}\n", rank, stream, s, e, kind,
                     corr, id);
    t += fmt::format("api rank={} thread=1 start={} end={} name=cudaLaunchKernel corr={}\n", rank, s - 3000, s - 2000,
                     corr);
    t += fmt::format("nvtx rank={} thread=1 start={} end={} domain=PyTorch name=aten::{}\n", rank, s - 3500, s - 1500,
                     kind);
    ++corr;
    return id++;
  };
  for (int it = 0; it < kIterations; ++it) {
    for (int l = 0; l < kLayers; ++l) {
      const std::int64_t t0 = kBase + it * 200'000 + l * 60'000;
      const int gate = op(0, "gate", l, it, t0, t0 + 1000 + 300 * rank);
      // The all-to-alls end together on every rank (in true time).
      const auto bytes = fmt::format(" bytes={}", ((l + 1) << 20) + rank * 4096 + it * 512);
      const int dispatch = op(1, "dispatch_all_to_all", l, it, t0 + 1000 + 300 * rank, t0 + 5000, bytes);
      t += fmt::format("dep op={} on={}\n", dispatch, gate);
      const int expert = op(0, "expert_ffn", l, it, t0 + 5000, t0 + 15'000 + 700 * rank * (l + 1), " flops=1000000000");
      const int combine = op(1, "combine_all_to_all", l, it, t0 + 15'000 + 700 * rank * (l + 1), t0 + 25'000, bytes);
      t += fmt::format("dep op={} on={}\n", combine, expert);
      // A buffer of the layer; ids the same in every file.
      t += fmt::format("buffer id={} rank={} tag=T_DI bytes={} layer={} alloc={} free={}\n", buffer, rank,
                       (1 + rank) << 20, l, clock_of(rank, t0 + 2000), clock_of(rank, t0 + 24'000));
      t += fmt::format("use op={} buffer={} access=rw\nuse op={} buffer={} access=rw\n", expert, buffer, combine, buffer);
      ++buffer;
    }
    op(0, "optimizer", -1, it, kBase + it * 200'000 + 150'000, kBase + it * 200'000 + 160'000);
  }
  if (rank == 0)  // raw allocations on one rank only
    for (int k = 0; k < 3; ++k)
      t += fmt::format("alloc rank=0 ts={} address={} bytes=4096 memory_kind=1\nfree rank=0 ts={} address={} bytes=4096 "
                       "memory_kind=1\n",
                       kBase + k * 1000, 65536 * (k + 1), kBase + 500'000 + k, 65536 * (k + 1));
  const auto path = testing::temp_path(name);
  testing::write_text_trace(path, t);
  return path;
}

std::vector<std::string> rank_files(const std::string& prefix) {
  std::vector<std::string> paths;
  for (int r = 0; r < kRanks; ++r) paths.push_back(rank_file(r, fmt::format("{}{}.db", prefix, r)));
  return paths;
}

// Differences between two JSON documents, numbers compared to 1e-12.
void differences(const nlohmann::json& a, const nlohmann::json& b, const std::string& at, std::vector<std::string>& out) {
  if (out.size() > 20) return;
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    if (std::fabs(x - y) > 1e-12 * std::max(std::fabs(x), std::fabs(y))) out.push_back(at + ": " + a.dump() + " vs " + b.dump());
  } else if (a.type() != b.type()) {
    out.push_back(at + ": " + a.dump().substr(0, 80) + " vs " + b.dump().substr(0, 80));
  } else if (a.is_object()) {
    for (const auto& [k, v] : a.items())
      if (!b.contains(k)) out.push_back(at + "/" + k + ": only merged");
      else differences(v, b[k], at + "/" + k, out);
    for (const auto& [k, v] : b.items())
      if (!a.contains(k)) out.push_back(at + "/" + k + ": only by file");
  } else if (a.is_array()) {
    if (a.size() != b.size()) out.push_back(fmt::format("{}: {} vs {} items", at, a.size(), b.size()));
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) differences(a[i], b[i], fmt::format("{}[{}]", at, i), out);
  } else if (a != b) {
    out.push_back(at + ": " + a.dump().substr(0, 80) + " vs " + b.dump().substr(0, 80));
  }
}

std::vector<std::string> report_differences(const std::vector<std::string>& paths, bool align,
                                            const BreakdownOptions& breakdown = {},
                                            std::optional<KernelSequenceOptions> sequences = std::nullopt) {
  RunLoadOptions o;
  o.align = align;
  o.threads = 2;
  const Trace merged = load_run(paths, o);
  Analyses whole = analyze(merged, {}, breakdown, 2);
  if (sequences) {
    auto ko = *sequences;
    ko.window = breakdown.rank_window;
    whole.kernel_sequences = frequent_kernel_sequences(merged, ko);
  }
  const RunAnalysis by_file =
      analyze_run_by_file(paths, o, breakdown, kMaxCostSamples, sequences.value_or(KernelSequenceOptions{}));
  ReportOptions ro;
  ro.per_rank = ro.per_iteration = true;
  auto a = report_json(merged, whole, ro), b = report_json(by_file.trace, by_file.analyses, ro);
  // What only the merged run has, and the flag that says so.
  EXPECT_TRUE(a["critical_path"].contains("across_ranks"));
  EXPECT_FALSE(b["critical_path"].contains("across_ranks"));
  a["critical_path"].erase("across_ranks");
  // Efficiency (rows from each file, collectives from every rank's calls)
  // and the kernel sequences (from the rank's file) are computed, as equal
  // as the rest.
  EXPECT_FALSE(b["efficiency"].contains("not_computed"));
  EXPECT_EQ(b["efficiency"]["ranks"].size(), static_cast<std::size_t>(kRanks));
  EXPECT_FALSE(b["efficiency"]["collectives"]["buckets"].empty());
  EXPECT_TRUE(b["efficiency"]["collectives"]["wait_separated"].get<bool>());
  EXPECT_FALSE(b["kernel_sequences"].contains("not_computed"));
  // The fits pool every rank's ops, and their collectives join ranks.
  EXPECT_FALSE(b["fitted_models"]["compute"].empty());
  EXPECT_FALSE(b["fitted_models"]["collectives"].empty());
  EXPECT_FALSE(a["ranks"]["run"]["by_file"].get<bool>());
  EXPECT_TRUE(b["ranks"]["run"]["by_file"].get<bool>());
  a["ranks"]["run"].erase("by_file");
  b["ranks"]["run"].erase("by_file");
  std::vector<std::string> out;
  differences(a, b, "", out);
  return out;
}

TEST(RunByFile, EveryOtherSectionEqualsTheMergedRunsOnCorrectedClocks) {
  const auto paths = rank_files("skewed");
  RunLoadOptions o;
  const Trace merged = load_run(paths, o);
  // The construction's clocks are found and corrected (the premise of the
  // comparison: pass 2 moves each file's times as the merge does).
  ASSERT_TRUE(merged.files->aligned());
  for (const auto& c : merged.files->clocks.ranks) EXPECT_TRUE(c.usable()) << c.rank << ": " << c.refused;
  EXPECT_NEAR(merged.files->clocks.ranks[1].offset_ns, 5e6, 1e3);
  EXPECT_NEAR(merged.files->clocks.ranks[2].drift_ppm, -10, 0.5);
  EXPECT_EQ(report_differences(paths, true), std::vector<std::string>{});
}

TEST(RunByFile, EqualsTheMergedRunWithoutAlignmentAndInTheStepsWindow) {
  const auto paths = rank_files("unaligned");
  EXPECT_EQ(report_differences(paths, false), std::vector<std::string>{});
  BreakdownOptions steps;
  steps.rank_window = RankWindow::kSteps;
  EXPECT_EQ(report_differences(paths, true, steps), std::vector<std::string>{});
}

// The kernel sequences of another rank than 0, of ops that each launch one
// kernel (the framework's aten:: ranges above each launch): every rank's
// file holds its own, and the one rank's must be found in its file.
TEST(RunByFile, KernelSequencesOfARankFromItsFile) {
  const auto paths = rank_files("sequences");
  KernelSequenceOptions o;
  o.operator_name = "aten::";
  o.min_pattern_len = 1;
  o.rank = 2;
  o.top_k = 0;
  EXPECT_EQ(report_differences(paths, true, {}, o), std::vector<std::string>{});
  RunLoadOptions lo;
  lo.threads = 2;
  const auto r = analyze_run_by_file(paths, lo, {}, kMaxCostSamples, o);
  EXPECT_EQ(r.analyses.kernel_sequences.rank, 2);
  // Rank 2's ops per layer: gate, dispatch, expert, combine; then the
  // optimizer per iteration. Each op's range spans its start - 3.5 us to
  // - 1.5 us: the dispatch's (from t0 - 1.9 us) opens before the gate's
  // closes (t0 - 1.5 us), and call stacks nest by start as HTA's do, so
  // the dispatch hangs under the gate and is no root: 4 patterns,
  // gate|gate_kernel|dispatch_all_to_all_kernel, expert_ffn and combine,
  // 3 iterations x 2 layers = 6 of each, and the optimizer's 3.
  std::string patterns;
  for (const auto& k : r.analyses.kernel_sequences.sequences) patterns += k.pattern() + " ";
  ASSERT_EQ(r.analyses.kernel_sequences.sequences.size(), 4u) << patterns;
  for (const auto& k : r.analyses.kernel_sequences.sequences) {
    EXPECT_EQ(k.count, k.op == "aten::optimizer" ? 3 : 6) << k.pattern();
    if (k.op == "aten::gate") {
      EXPECT_EQ(k.pattern(), "aten::gate|gate_kernel|dispatch_all_to_all_kernel");
    }
  }
  // A rank the run lacks: one clear error before the second pass.
  o.rank = 9;
  EXPECT_THROW(analyze_run_by_file(paths, lo, {}, kMaxCostSamples, o), ConfigError);
}

TEST(RunByFile, SaysWhatItLeavesOutInEveryFormat) {
  auto paths = rank_files("said");
  paths.insert(paths.begin() + 1, "/nonexistent/said9.db");
  const RunAnalysis r = analyze_run_by_file(paths);
  ASSERT_TRUE(r.trace.files);
  EXPECT_TRUE(r.trace.files->by_file);
  // A missing file is left out and named, as load_run does.
  ASSERT_EQ(r.trace.files->left_out.size(), 1u);
  EXPECT_EQ(r.trace.files->left_out[0].first, "/nonexistent/said9.db");
  const auto warnings = r.trace.files->warnings();
  EXPECT_NE(std::find_if(warnings.begin(), warnings.end(),
                         [](const std::string& w) { return w.find("one at a time") != std::string::npos; }),
            warnings.end());
  // The trace holds no events: memory bounded by the run's summaries.
  EXPECT_TRUE(r.trace.activities.empty());
  EXPECT_TRUE(r.trace.ops.empty());
  EXPECT_EQ(r.trace.rank_ids().size(), static_cast<std::size_t>(kRanks));
  // Every analysis the comparison above covers has something to compare.
  EXPECT_GT(r.analyses.nvtx.ranges, 0);
  EXPECT_EQ(r.analyses.memory.buffers.size(), static_cast<std::size_t>(kRanks * kLayers * kIterations));
  EXPECT_TRUE(r.analyses.expert_load.has_load);
  EXPECT_TRUE(r.analyses.locality.has_load);
  ASSERT_EQ(r.analyses.launch_queue.launches.size(), static_cast<std::size_t>(kRanks));
  ASSERT_FALSE(r.analyses.launch_queue.launches[0].worst.empty());
  EXPECT_TRUE(r.analyses.launch_queue.launches[0].worst[0].name.ends_with("_kernel"));
  EXPECT_TRUE(r.analyses.rank_waits.has_collectives);
  EXPECT_EQ(r.analyses.breakdown.rows.size(), static_cast<std::size_t>(kRanks * kLayers * kIterations));
  EXPECT_FALSE(r.analyses.critical_path_across_ranks);
  EXPECT_EQ(r.analyses.critical_path.size(), static_cast<std::size_t>(kRanks));
  std::ostringstream text;
  write_text_report(text, r.trace, r.analyses, {});
  const auto s = text.str();
  EXPECT_NE(s.find("The path across ranks is not computed: the run's 4 files were analysed one at a time"),
            std::string::npos);
  // The recommendations: not computed, and why (not --no-recommendations).
  // The models are fitted.
  // Efficiency is computed one file at a time too.
  EXPECT_NE(s.find("Efficiency against datasheet peaks\n----------------------------------\nExpert GEMMs:"),
            std::string::npos);
  EXPECT_EQ(s.find("Efficiency against datasheet peaks\n----------------------------------\nNot computed"),
            std::string::npos);
  EXPECT_EQ(s.find("--no-recommendations"), std::string::npos);
  EXPECT_NE(s.find("Recommendations\n---------------\nNot computed: the run's 4 files were analysed one at a time"),
            std::string::npos);
  EXPECT_EQ(s.find("nothing could be fitted"), std::string::npos);
  EXPECT_FALSE(r.analyses.cost_model.compute.empty());
}

// The fits keep one sample per op: a run with more ops than the bound gets
// no fits, and says why, rather than memory that grows with its ops.
TEST(RunByFile, TooManyOpsForTheFitsLeaveThemOutAndSayWhy) {
  const auto paths = rank_files("bounded");
  const RunAnalysis all = analyze_run_by_file(paths, {}, {}, 1'000'000);
  EXPECT_TRUE(all.analyses.fits_not_computed_reason.empty());
  EXPECT_FALSE(all.analyses.cost_model.compute.empty());
  // Each rank has kLayers x kIterations x 4 + kIterations ops with GPU time.
  constexpr std::size_t kOps = kRanks * (kLayers * kIterations * 4 + kIterations);
  const RunAnalysis exact = analyze_run_by_file(paths, {}, {}, kOps);
  EXPECT_FALSE(exact.analyses.cost_model.compute.empty());
  const RunAnalysis over = analyze_run_by_file(paths, {}, {}, kOps - 1);
  EXPECT_TRUE(over.analyses.cost_model.compute.empty());
  EXPECT_EQ(over.analyses.fits_not_computed_reason,
            fmt::format("the run's 4 files were analysed one at a time, in bounded memory, and their {} ops are "
                        "more than the {} whose samples the fits keep (moetrace report --merged fits them)",
                        kOps, kOps - 1));
  std::ostringstream text;
  write_text_report(text, over.trace, over.analyses, {});
  EXPECT_NE(text.str().find("Fitted models\n-------------\nt(x) = alpha"), std::string::npos);
  EXPECT_NE(text.str().find("Not computed: the run's 4 files were analysed one at a time, in bounded memory, and "
                            "their"),
            std::string::npos);
}

// What `info` shows of a run, read one file at a time and never merged:
// the same run, files, ranks and clocks as the merged run's, and its events
// counted file by file (each rank file holds kLayers x kIterations x 4 +
// kIterations ops, each with a kernel, a launch call and an NVTX range, and
// rank 0 six memory events more).
TEST(RunByFile, OverviewIsTheMergedRunsWithoutItsEvents) {
  auto paths = rank_files("overview");
  paths.insert(paths.begin() + 2, "/nonexistent/overview9.db");
  for (bool align : {true, false}) {
    RunLoadOptions o;
    o.align = align;
    const Trace merged = load_run(paths, o);
    const RunOverview v = overview_run(paths, o);
    constexpr std::int64_t kOpsPerRank = kLayers * kIterations * 4 + kIterations;
    EXPECT_EQ(v.events, merged.event_count());
    EXPECT_EQ(v.events, kRanks * kOpsPerRank * 4 + 6);
    EXPECT_TRUE(v.trace.ops.empty());
    EXPECT_TRUE(v.trace.activities.empty());
    ASSERT_TRUE(v.trace.files);
    EXPECT_FALSE(v.trace.files->by_file);  // nothing left out that `info` would show
    EXPECT_EQ(v.trace.files->aligned(), align);
    EXPECT_EQ(rank_files_json(*v.trace.files), rank_files_json(*merged.files));
    EXPECT_EQ(run_json(v.trace.run), run_json(merged.run));
    EXPECT_EQ(v.trace.streams.size(), merged.streams.size());
    EXPECT_EQ(v.trace.rank_ids(), merged.rank_ids());
  }
}

// A trace's estimate counts its rows (from the writer's integrity record,
// or counted where it has none), not its bytes on disk: 2 kernels, 1 op
// range and 1 memory event are 4 event rows; 2 expert-load rows; 1 rank.
TEST(RunByFile, EstimatesTheMergedRunFromTheFilesRows) {
  const auto path = ::moetrace::testing::temp_path("estimate-rows.db");
  ::moetrace::testing::write_text_trace(path, R"(
    run world_size=1
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100
    kernel rank=0 stream=0 start=0 end=50 name=gemm op=1
    kernel rank=0 stream=0 start=50 end=90 name=gemm op=1
    alloc rank=0 ts=0 address=4096 bytes=1024 memory_kind=1
    load iteration=0 layer=0 src=0 expert=0 tokens=30
    load iteration=0 layer=0 src=0 expert=1 tokens=10
  )");
  const auto expected = static_cast<std::int64_t>(kMergedBaseBytes + 4 * kMergedBytesPerEventRow +
                                                  2 * kMergedBytesPerLoadRow + kMergedBytesPerRank);
  EXPECT_EQ(estimated_merged_bytes({path}), expected);
  { sqlite::Database(path, sqlite::Database::Mode::kReadWrite).exec("DELETE FROM meta WHERE key = 'integrity'"); }
  EXPECT_EQ(estimated_merged_bytes({path}), expected);  // counted instead
  EXPECT_EQ(estimated_merged_bytes({path, path}), 2 * expected - static_cast<std::int64_t>(kMergedBaseBytes));
  EXPECT_EQ(estimated_merged_bytes({"/nonexistent/x.db"}), 0);
}

// PyTorch-profiler files are read into memory: their JSON's size counts, a
// gzipped file's from the content size in its last four bytes (ISIZE,
// little-endian), or 8x the file where that says less than the file holds.
TEST(RunByFile, EstimatesJsonFilesFromTheirContent) {
  const auto dir = ::moetrace::testing::temp_path("estimate-json");
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  };
  const auto plain = write("rank0.json", std::string(1000, ' '));
  constexpr double base = kMergedBaseBytes;
  EXPECT_EQ(estimated_merged_bytes({plain}), static_cast<std::int64_t>(1000 * kMergedBytesPerJsonByte + base));
  // 100 bytes holding 1,000,000 (0x000F4240) bytes of JSON.
  const auto packed = write("rank1.json.gz", std::string(96, 'x') + std::string("\x40\x42\x0f\x00", 4));
  EXPECT_EQ(estimated_merged_bytes({packed}), static_cast<std::int64_t>(1000000 * kMergedBytesPerJsonByte + base));
  // ISIZE 16 in a 100-byte file: a wrapped size; 800 bytes instead.
  const auto wrapped = write("rank2.json.gz", std::string(96, 'x') + std::string("\x10\x00\x00\x00", 4));
  EXPECT_EQ(estimated_merged_bytes({wrapped}), static_cast<std::int64_t>(800 * kMergedBytesPerJsonByte + base));
  EXPECT_EQ(estimated_merged_bytes({plain, packed}),
            static_cast<std::int64_t>(1000 * kMergedBytesPerJsonByte + 1000000 * kMergedBytesPerJsonByte + base));
}

}  // namespace
}  // namespace by_file_test
}  // namespace moetrace::analyzer
