// The analyses of one trace run side by side (analyses.cc, critical_path.cc
// through parallel.h). Also run under ThreadSanitizer (label tsan).
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/run_by_file.h"
#include "moetrace/synthetic/synthetic_trace.h"
#include "parallel.h"
#include "text_trace.h"

namespace moetrace::analyzer {
namespace {

// The analyses run side by side (analyze's threads, and the ranks' critical
// paths): any number of threads gives the report of one thread, byte for
// byte, and an analysis's error still reaches the caller.
TEST(ParallelAnalysis, SeveralThreadsGiveTheReportOfOne) {
  const auto path = testing::temp_path("report-threads.db");
  synthetic::SyntheticConfig c{.ranks = 4, .layers = 2, .iterations = 3};
  synthetic::write_synthetic_trace(path, c);
  const auto trace = load_trace(path);
  ReportOptions o;
  o.per_rank = o.per_iteration = true;
  std::vector<std::string> stages;
  const auto one = report_json(trace, analyze(trace, {}, {}, 1), o).dump();
  for (int threads : {2, 3, 8}) {
    stages.clear();
    const auto a = analyze(
        trace, [&](std::string_view stage, double) { stages.emplace_back(stage); }, {}, threads);
    EXPECT_EQ(report_json(trace, a, o).dump(), one) << threads << " threads";
    EXPECT_GE(stages.size(), 10u);  // "analysing", then each analysis as it ends
    EXPECT_EQ(a.critical_path.size(), 4u);
  }
}

// A run's files read one at a time (run_by_file.h), several at once: the
// report of one thread, whether the fits keep their samples or drop them
// as the parts end.
TEST(ParallelAnalysis, FilesReadOneAtATimeOnSeveralThreadsGiveTheReportOfOne) {
  std::vector<std::string> paths;
  for (int r = 0; r < 6; ++r) {
    std::string t = "run world_size=6 backend=test variant=dpmoe\n";
    t += "stream id=0 rank=" + std::to_string(r) + " role=compute\nstream id=1 rank=" + std::to_string(r) +
         " role=comm\n";
    int id = 1;
    for (int it = 0; it < 3; ++it) {
      const long t0 = 1'000'000 + it * 10'000;
      const std::string at = " layer=0 iteration=" + std::to_string(it) + " phase=fwd start=";
      t += "op id=" + std::to_string(id) + " rank=" + std::to_string(r) + " stream=0 kind=expert_ffn flops=1e9" + at +
           std::to_string(t0) + " end=" + std::to_string(t0 + 1000 + 100 * r) + "\n";
      t += "kernel rank=" + std::to_string(r) + " stream=0 start=" + std::to_string(t0) + " end=" +
           std::to_string(t0 + 1000 + 100 * r) + " name=gemm op=" + std::to_string(id) + "\n";
      t += "op id=" + std::to_string(id + 1) + " rank=" + std::to_string(r) +
           " stream=1 kind=combine_all_to_all bytes=" + std::to_string(4096 * (it + 1)) + at +
           std::to_string(t0 + 2000) + " end=" + std::to_string(t0 + 3000) + "\n";
      t += "kernel rank=" + std::to_string(r) + " stream=1 start=" + std::to_string(t0 + 2000) + " end=" +
           std::to_string(t0 + 3000) + " name=a2a op=" + std::to_string(id + 1) + "\n";
      id += 2;
    }
    paths.push_back(testing::temp_path("byfile-threads-" + std::to_string(r) + ".db"));
    testing::write_text_trace(paths.back(), t);
  }
  for (std::size_t bound : {std::size_t{1000}, std::size_t{10}}) {
    RunLoadOptions one;
    one.threads = 1;
    const auto a = analyze_run_by_file(paths, one, {}, bound);
    EXPECT_EQ(a.analyses.cost_model.compute.empty(), bound == 10);
    const auto expected = report_json(a.trace, a.analyses, {}).dump();
    for (int threads : {2, 4}) {
      RunLoadOptions o;
      o.threads = threads;
      const auto b = analyze_run_by_file(paths, o, {}, bound);
      EXPECT_EQ(report_json(b.trace, b.analyses, {}).dump(), expected) << threads << " threads";
    }
  }
}

TEST(ParallelAnalysis, EveryPieceRunsOnceAndTheFirstErrorReachesTheCaller) {
  for (int threads : {1, 4}) {
    std::vector<std::atomic<int>> runs(50);
    std::vector<std::size_t> done;
    detail::parallel_for(
        runs.size(), threads, [&](std::size_t i) { ++runs[i]; }, [&](std::size_t i) { done.push_back(i); });
    for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
    EXPECT_EQ(done.size(), runs.size());
    std::atomic<int> ran{0};
    try {
      detail::parallel_for(10, threads, [&](std::size_t i) {
        ++ran;
        if (i == 3) throw std::runtime_error("three");
        if (i == 7) throw std::runtime_error("seven");
      });
      ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "three");
    }
    EXPECT_EQ(ran.load(), 10);  // the others still ran (each writes its own result)
    // A progress callback that throws: the pieces still all run, and its
    // error reaches the caller once they have (no worker outlives the call).
    ran = 0;
    EXPECT_THROW(detail::parallel_for(
                     10, threads, [&](std::size_t) { ++ran; },
                     [&](std::size_t) { throw std::runtime_error("progress"); }),
                 std::runtime_error);
    EXPECT_EQ(ran.load(), 10);
  }
}

}  // namespace
}  // namespace moetrace::analyzer
