// Runs of several rank files on the command line: merged, split, read one
// file at a time, imported as a cluster's tasks, warned of file by file, and
// the memory they take read together against its estimate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "moetrace/schema/sqlite.h"
#include "cli_run.h"
#include "shared_data.h"
#include "text_trace.h"
#include "test_paths.h"

namespace moetrace {
namespace {

using testing::run_cli;
using testing::read_text;

// A run of two rank files, one clean and one without an integrity record,
// with events of devices not read and a damaged reference: every way of
// reading the run (merged, --by-file, info) warns of that file by name, on
// stderr and in text, JSON and HTML.
TEST(CliRankFiles, EachFilesWarningsNameTheFile) {
  const auto dir = testing::temp_path("warned-run");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto clean = dir + "/run.rank0.db", bad = dir + "/run.rank1.db";
  testing::write_text_trace(clean, R"(
run    world_size=2 backend=test variant=dpmoe
stream id=0 rank=0 role=compute
op     id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 phase=fwd start=0 end=100
kernel rank=0 stream=0 start=0 end=50 name=gemm op=1
)");
  testing::write_text_trace(bad, R"(
run    world_size=2 backend=test variant=dpmoe
config import.skipped.mtia_ccp_events=2
stream id=1 rank=1 role=compute
op     id=2 rank=1 stream=1 kind=gate layer=0 iteration=0 phase=fwd start=0 end=100
kernel rank=1 stream=1 start=0 end=50 name=gemm op=2
)");
  testing::alter_trace(bad, "DELETE FROM meta WHERE key = 'integrity'; UPDATE kernels SET op_id = 9");
  const std::vector<std::string> lines = {
      bad + ": damaged trace: 1 kernels, memcpy or memset rows name ops that op_ranges lacks (left unattributed)",
      bad + ": the trace has no integrity record",
      bad + ": 2 events of MTIA devices were not imported (mtia_ccp_events 2)",
  };
  for (const std::string how : {"", "--by-file ", "--merged "}) {
    for (const std::string format : {"text", "json", "html"}) {
      SCOPED_TRACE(how + format);
      const auto r = run_cli("report --no-recommendations " + how + "--format " + format + " " + clean + " " + bad);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      for (const auto& line : lines) {
        EXPECT_NE(r.err.find("moetrace: warning: " + line), std::string::npos) << r.err;
        EXPECT_NE(r.out.find(line), std::string::npos) << r.out.substr(0, 2000);
      }
      if (format == "json") {
        const auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j["run"]["integrity"], "mixed");
        EXPECT_EQ(j["run"]["damage"].size(), 1u);
      }
    }
  }
  const auto info = run_cli("info " + dir);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  for (const auto& line : lines) EXPECT_NE(info.out.find("warning:    " + line), std::string::npos) << info.out;
  const auto info_json = run_cli("info --format json " + dir);
  ASSERT_EQ(info_json.exit_code, 0) << info_json.err;
  const auto j = nlohmann::json::parse(info_json.out);
  EXPECT_EQ(j["run"]["integrity"], "mixed");
  ASSERT_EQ(j["run"]["warnings"].size(), 3u);
  for (std::size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(j["run"]["warnings"][i].get<std::string>().rfind(lines[i], 0), 0u) << j["run"]["warnings"][i];
}



// merge keeps what the analyzer reads of each row, down to a copy's source and
// destination memory (pinned host -> device here).
TEST(CliRankFiles, MergeKeepsACopysMemoryKinds) {
  const auto in = testing::temp_path("copies.db"), out = testing::temp_path("copies-merged.db");
  testing::write_text_trace(in, R"(
    stream id=0 rank=0 role=copy
    memcpy rank=0 stream=0 start=0 end=50 bytes=4096 copy_kind=1 src_kind=2 dst_kind=1
  )");
  const auto r = run_cli("merge " + in + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  sqlite::Database db(out, sqlite::Database::Mode::kReadOnly);
  auto st = db.prepare("SELECT copy_kind, src_kind, dst_kind FROM memcpy");
  ASSERT_TRUE(st.step());
  EXPECT_EQ(st.int64(0), 1);  // host to device
  EXPECT_EQ(st.int64(1), 2);  // pinned host
  EXPECT_EQ(st.int64(2), 1);  // device
}

// A simulated run split by rank reads as the run written whole: the same
// report but for its first line and the section on its ranks.
TEST(CliRankFiles, SplitRunReportsAsTheWholeRun) {
  const auto dir = testing::temp_path("split");
  std::filesystem::create_directories(dir);
  auto r = run_cli("run --preset pipemoe-solver-example -q -o " + dir + "/whole.db");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("run --preset pipemoe-solver-example -q --split-ranks -o " + dir + "/run.db");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(std::filesystem::exists(dir + "/run.rank15.db"));
  const auto whole = run_cli("report --no-recommendations " + dir + "/whole.db");
  const auto split = run_cli("report --no-recommendations '" + dir + "/run.rank*.db'");
  ASSERT_EQ(split.exit_code, 0) << split.err;
  EXPECT_EQ(split.err, "");
  auto body = [](std::string s) {
    s = s.substr(s.find('\n'));
    const auto a = s.find("\nRanks of the run");
    if (a != std::string::npos) s.erase(a, s.find("\nGPU activity attributed") - a);
    return s;
  };
  EXPECT_NE(split.out.find("16 files analysed as one run: ranks 0-15 of world size 16."), std::string::npos);
  EXPECT_EQ(body(split.out), body(whole.out));
  // merge writes the same run as one file.
  r = run_cli("merge " + dir + "/run.rank*.db -o " + dir + "/merged.db");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto merged = run_cli("report --no-recommendations " + dir + "/merged.db");
  EXPECT_EQ(body(merged.out), body(whole.out));
  // A missing rank: named, the rest analysed.
  std::filesystem::remove(dir + "/run.rank3.db");
  r = run_cli("report --no-recommendations " + dir + "/run.rank1.db " + dir + "/run.rank3.db " + dir +
              "/run.rank0.db");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "moetrace: warning: " + dir + "/run.rank3.db: no such file; left out, the other files are analysed\n"
                   "moetrace: warning: ranks 2-15 of 16 missing: no file given holds them\n");
  // A rank of another run: refused in one line naming it.
  r = run_cli("run --preset pipemoe-solver-example -q -r 4 --split-ranks -o " + dir + "/other.db");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("info " + dir + "/run.rank0.db " + dir + "/run.rank1.db " + dir + "/other.rank2.db");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.find("moetrace: " + dir + "/other.rank2.db: a rank of another run (run id "), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
}

// `report --by-file` (run_by_file.h): the same report as the files merged,
// fitted models included, but for what needs every rank's events at once,
// which it names on stderr and in the report; --by-file and --merged exclude
// each other.
TEST(CliRankFiles, ByFileReportsAsTheMergedRunButWhatNeedsEveryRank) {
  const auto dir = testing::temp_path("byfile");
  std::filesystem::create_directories(dir);
  auto r = run_cli("run --variant mpipemoe --ranks 4 --layers 2 --iterations 3 -q --split-ranks -o " + dir + "/run.db");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto merged = run_cli("report --merged --no-recommendations -f json " + dir);
  const auto by_file = run_cli("report --by-file -f json " + dir);
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  ASSERT_EQ(by_file.exit_code, 0) << by_file.err;
  EXPECT_EQ(merged.err, "");
  EXPECT_EQ(by_file.err,
            "moetrace: warning: the 4 files were analysed one at a time, in bounded memory: the critical path across "
            "ranks and the recommendations need every rank's events at once and are not computed (--merged reads "
            "them together)\n");
  auto m = nlohmann::json::parse(merged.out), b = nlohmann::json::parse(by_file.out);
  EXPECT_TRUE(b["ranks"]["run"]["by_file"].get<bool>());
  EXPECT_EQ(b["recommendations"]["status"], "not_computed");
  // Efficiency and the kernel sequences are computed one file at a time
  // too, equal to the merged run's (compared with the rest below).
  EXPECT_FALSE(b["efficiency"].contains("not_computed"));
  EXPECT_EQ(b["efficiency"]["ranks"].size(), 4u);
  for (auto* j : {&m, &b}) {
    (*j)["critical_path"].erase("across_ranks");
    (*j)["ranks"]["run"].erase("by_file");
  }
  EXPECT_EQ(m, b);
  // `info` reads the files one at a time too, and says what they hold.
  const auto info = run_cli("info -f json " + dir);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const auto ij = nlohmann::json::parse(info.out);
  EXPECT_EQ(ij["ranks"], 4);
  EXPECT_EQ(ij["rank_files"]["files"].size(), 4u);
  EXPECT_GT(ij["events"].get<std::int64_t>(), 0);
  EXPECT_EQ(ij["rank_files"]["clock_alignment"], m["ranks"]["run"]["clock_alignment"]);
  r = run_cli("report --by-file --merged " + dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("excludes"), std::string::npos) << r.err;
}

// The cluster recipe (docs/multi-rank.md): one `moetrace import` per
// rank file as independent tasks (a Slurm job array; here xargs -P), into one
// folder that `report` reads as one run. A failed task leaves no file there,
// and a second run skips the ranks already done.
// The memory `report` would take reading a run's files together is
// estimated from the rows they hold (run_by_file.h), and the estimate that
// `info` gives is within 2x of the peak resident memory `report --merged`
// then takes: on a run of few ranks with many events each, and on one of
// more ranks with fewer events and expert-load tables.
// Whether this build runs under AddressSanitizer (gcc's macro, clang's feature).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

TEST(CliRankFiles, MemoryEstimateIsWithinTwiceThePeak) {
  // Under AddressSanitizer the peak holds its shadow memory and quarantine
  // (13-22x the estimate on these runs): the estimate is of a plain build.
  if (kAddressSanitizer) GTEST_SKIP() << "the memory estimate is of a build without AddressSanitizer";
  const std::pair<const char*, const char*> runs[] = {
      {"few-ranks", "-v mpipemoe --ranks 4 --layers 8 -i 10"},
      {"many-ranks", "-v pipemoe --ranks 32 --experts 32 --layers 2 -i 2 --routing zipf --skew 1.2"},
  };
  for (const auto& [name, spec] : runs) {
    SCOPED_TRACE(name);
    const auto dir = testing::temp_path(std::string("estimate-") + name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    ASSERT_EQ(run_cli(fmt::format("run --backend sim {} --split-ranks -q -o {}/run.db", spec, dir)).exit_code, 0);
    const auto info = run_cli("info --format json " + dir);
    ASSERT_EQ(info.exit_code, 0) << info.err;
    const auto estimate = nlohmann::json::parse(info.out)["estimated_bytes_together"].get<double>();
    const auto peak = testing::run_cli_peak("report --merged -o /dev/null " + dir);
    ASSERT_EQ(peak.exit_code, 0);
    const double ratio = estimate / static_cast<double>(peak.peak_rss_bytes);
    EXPECT_GE(ratio, 0.5) << estimate << " estimated, " << peak.peak_rss_bytes << " peak";
    EXPECT_LE(ratio, 2.0) << estimate << " estimated, " << peak.peak_rss_bytes << " peak";
    RecordProperty(std::string("estimate_over_peak_") + name, fmt::format("{:.2f}", ratio));
  }
}

TEST(CliRankFiles, ClusterRecipeImportsRankFilesAsIndependentTasks) {
  const auto dir = testing::temp_path("cluster");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/traces");
  std::filesystem::create_directories(dir + "/run");
  for (int rank = 0; rank < 3; ++rank)
    std::ofstream(dir + "/traces/rank" + std::to_string(rank) + ".json") << fmt::format(
        R"({{"distributedInfo": {{"rank": {0}, "world_size": 4, "backend": "nccl"}}, "traceEvents": [
          {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 2,
            "args": {{"correlation": 7}}}},
          {{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": {1},
            "args": {{"correlation": 7, "stream": 7, "device": 0}}}}]}})",
        rank, 10 + rank);
  std::ofstream(dir + "/traces/rank3.json") << R"({"traceEvents": [)";  // cut short: its task fails
  // The task, exactly as a job array's would run it for one file.
  const std::string task =
      "o=run/$(basename \"$0\" .json).db; [ -e \"$o\" ] || " + std::string(MOETRACE_CLI) + " import \"$0\" -o \"$o\"";
  const std::string recipe = "cd " + dir + " && ls traces/*.json | xargs -P 2 -n 1 sh -c '" + task + "' 2>/dev/null";
  EXPECT_NE(std::system(recipe.c_str()), 0);  // one task failed
  std::vector<std::string> made;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/run")) made.push_back(e.path().filename().string());
  std::sort(made.begin(), made.end());
  EXPECT_EQ(made, (std::vector<std::string>{"rank0.db", "rank1.db", "rank2.db"}));  // nothing of rank3
  const auto r = run_cli("report --no-recommendations --format json " + dir + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ranks"]["run"]["files"].size(), 3u);
  EXPECT_EQ(j["ranks"]["run"]["missing_ranks"], nlohmann::json::array({3}));
  // Again: the done ranks are skipped (their files untouched), the failed one retried.
  const auto before = std::filesystem::last_write_time(dir + "/run/rank0.db");
  EXPECT_NE(std::system(recipe.c_str()), 0);
  EXPECT_EQ(std::filesystem::last_write_time(dir + "/run/rank0.db"), before);
}

// The same on one machine without a launcher: `import FOLDER -o RUN/` makes
// one trace per rank file, several at once (--jobs); a failed file is named,
// leaves nothing and makes the exit status 1; --skip-existing redoes only it.
TEST(CliRankFiles, ImportIntoAFolderOneTracePerFileSeveralAtOnce) {
  const auto dir = testing::temp_path("import-folder");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/prof");
  for (int rank = 0; rank < 4; ++rank)
    std::ofstream(dir + "/prof/worker" + std::to_string(rank) + ".pt.trace.json") << fmt::format(
        R"({{"traceEvents": [
          {{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 2,
            "args": {{"correlation": 7}}}},
          {{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": {1},
            "args": {{"correlation": 7, "stream": 7, "device": 0}}}}],
          "distributedInfo": {{"rank": {0}, "world_size": 5, "backend": "nccl"}}}})",
        rank, 10 + rank);
  std::ofstream(dir + "/prof/worker4.pt.trace.json") << R"({"traceEvents": [)";  // cut short
  std::ofstream(dir + "/prof/notes.txt") << "not a trace";                         // left out
  auto r = run_cli("import " + dir + "/prof -o " + dir + "/run/ --jobs 3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("] moetrace: " + dir + "/prof/worker4.pt.trace.json: invalid JSON at byte "), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("4 of 5 files imported into " + dir + "/run/; 1 failed (above), and left no trace"),
            std::string::npos)
      << r.err;
  std::vector<std::string> made;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/run")) made.push_back(e.path().filename().string());
  std::sort(made.begin(), made.end());
  EXPECT_EQ(made, (std::vector<std::string>{"worker0.db", "worker1.db", "worker2.db", "worker3.db"}));
  r = run_cli("report --no-recommendations --format json " + dir + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ranks"]["run"]["files"].size(), 4u);
  EXPECT_EQ(j["ranks"]["run"]["missing_ranks"], nlohmann::json::array({4}));
  // Once the file is whole, a rerun with --skip-existing imports it alone.
  std::ofstream(dir + "/prof/worker4.pt.trace.json") << R"({"traceEvents": [
      {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 14,
       "args": {"correlation": 7, "stream": 7, "device": 0}}], "distributedInfo": {"rank": 4, "world_size": 5}})";
  const auto before = std::filesystem::last_write_time(dir + "/run/worker0.db");
  r = run_cli("import " + dir + "/prof -o " + dir + "/run --skip-existing");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("1 of 1 file imported into " + dir + "/run; 4 skipped, their trace already there"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::filesystem::last_write_time(dir + "/run/worker0.db"), before);
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/worker4.db"));
  // The rank files themselves, read into memory together or one at a time
  // (--by-file): each rank's row as from the imported folder.
  const auto imported = run_cli("report --no-recommendations -f json " + dir + "/run");
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const auto expected = nlohmann::json::parse(imported.out)["breakdown"]["ranks"];
  EXPECT_EQ(expected.size(), 5u);
  for (const std::string reading : {"--merged", "--by-file"}) {
    r = run_cli("report --no-recommendations -f json " + reading + " " + dir + "/prof");
    ASSERT_EQ(r.exit_code, 0) << reading << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["breakdown"]["ranks"], expected) << reading;
  }
  // Two inputs that would make one trace: refused before anything is written.
  std::filesystem::create_directories(dir + "/other");
  std::filesystem::copy_file(dir + "/prof/worker0.pt.trace.json", dir + "/other/worker0.json");
  r = run_cli("import " + dir + "/prof/worker0.pt.trace.json " + dir + "/other/worker0.json -o " + dir + "/twice/");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "moetrace: " + dir + "/other/worker0.json and " + dir +
                       "/prof/worker0.pt.trace.json would both be imported into " + dir +
                       "/twice/worker0.db; rename one\n");
  // --jobs without a folder: one line.
  r = run_cli("import " + dir + "/prof/worker0.pt.trace.json -o " + dir + "/one.db --jobs 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "moetrace: --jobs and --skip-existing need an output folder (-o FOLDER/): one trace per input\n");
}

// The two sampled ranks of HTA's 128-rank job, imported one file each, read
// as one run: both ranks, 126 missing, their collectives compared.
TEST(CliRankFiles, TwoImportedRanksOfOneJob) {
  const std::string data = testing::shared_data("kineto/");
  MOETRACE_NEED_SHARED(data + "hta-sampled_rank-0.json.gz");
  MOETRACE_NEED_SHARED(data + "hta-sampled_rank-1.json.gz");
  const auto r0 = testing::temp_path("hta0.db"), r1 = testing::temp_path("hta1.db");
  ASSERT_EQ(run_cli("import " + data + "hta-sampled_rank-0.json.gz -o " + r0).exit_code, 0);
  ASSERT_EQ(run_cli("import " + data + "hta-sampled_rank-1.json.gz -o " + r1).exit_code, 0);
  const auto r = run_cli("report --no-recommendations --format json " + r0 + " " + r1);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ranks 2-127 of 128 missing"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& run = j["ranks"]["run"];
  EXPECT_EQ(run["files"].size(), 2u);
  EXPECT_EQ(run["files"][1]["ranks"], nlohmann::json::array({1}));
  EXPECT_EQ(run["missing_ranks"].size(), 126u);
  EXPECT_EQ(j["breakdown"]["ranks"].size(), 2u);
  // Both ranks ran 10 NCCL SendRecv kernels; their "nccl:*" ranges pair 7 by
  // (collective, size, order), of which 4 (two all-reduces, two all-gathers)
  // agree on an offset near 0 (a pair of SendRecv kernels ends in the same
  // microsecond on both ranks); the other 3 lie 600 ms off, each its own way.
  // The 4 give +24 us with an uncertainty of 110.578 us (run_loader_test.cc,
  // ClockAlign.AnOffsetSmallerThanItsUncertaintyIsNotApplied): not applied.
  const auto& clock = run["clock_alignment"]["ranks"][1];
  EXPECT_EQ(clock["collectives"].get<int>(), 4);
  EXPECT_EQ(clock["rejected"].get<int>(), 3);
  EXPECT_DOUBLE_EQ(clock["offset_ns"].get<double>(), 24e3);
  EXPECT_FALSE(clock["usable"].get<bool>());
  EXPECT_NE(clock["refused"].get<std::string>().find("smaller than its uncertainty (110.578 us"), std::string::npos)
      << clock["refused"];
  EXPECT_NE(r.err.find("rank 1: clock not aligned against rank 0: the offset found, +24.000 us"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("ranks 0"), std::string::npos) << r.err;
  EXPECT_TRUE(j["ranks"]["waits"]["has_collectives"].get<bool>());
}

}  // namespace
}  // namespace moetrace
