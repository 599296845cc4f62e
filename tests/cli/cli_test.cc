// The CLI on bad input: one clear line on stderr naming the file and the
// problem, nothing on stdout, a non-zero exit; never a crash.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "moetrace/schema/sqlite.h"
#include "../../analyzer/cli/fatal_signals.h"
#include "cli_run.h"
#include "shared_data.h"
#include "text_trace.h"
#include "test_paths.h"

namespace moetrace {
namespace {

using Result = testing::CliResult;
using testing::run_cli;
using testing::run_import;
using testing::read_text;

class CliErrors : public ::testing::TestWithParam<std::string> {};

void expect_one_line_error(const Result& r, const std::string& line, int code = 1) {
  EXPECT_EQ(r.exit_code, code);
  EXPECT_EQ(r.err, "moetrace: " + line + "\n");
  EXPECT_EQ(r.out, "");
}

TEST_P(CliErrors, MissingFile) {
  expect_one_line_error(run_cli(GetParam() + " /nonexistent/run.db"),
                        "/nonexistent/run.db: no such file");
}

TEST_P(CliErrors, NotASqliteFile) {
  const auto path = testing::temp_path("notes.txt");
  std::ofstream(path) << "just some text that is clearly not a SQLite database\n";
  expect_one_line_error(run_cli(GetParam() + " " + path),
                        path + ": not JSON, not SQLite, not a trace moetrace reads (moetrace traces, Nsight "
                               "Systems SQLite exports, PyTorch-profiler JSON, gzipped or not)");
}

TEST_P(CliErrors, SqliteButNotATrace) {
  const auto path = testing::temp_path("other.sqlite");
  std::filesystem::remove(path);
  { sqlite::Database(path, sqlite::Database::Mode::kCreate).exec("CREATE TABLE x (a)"); }
  expect_one_line_error(run_cli(GetParam() + " " + path),
                        path + ": a SQLite database but not a moetrace trace");
}

TEST_P(CliErrors, NewerSchemaVersion) {
  const auto path = testing::temp_path("future.db");
  testing::write_text_trace(path, "kernel rank=0 stream=0 start=0 end=1\n");
  { sqlite::Database(path, sqlite::Database::Mode::kReadWrite).exec("PRAGMA user_version=7"); }
  expect_one_line_error(
      run_cli(GetParam() + " " + path),
      path + ": trace schema version 7 is newer than this moetrace reads (up to 2); upgrade moetrace");
}

TEST_P(CliErrors, EmptyTrace) {
  const auto path = testing::temp_path("nothing.db");
  testing::write_text_trace(path, "");
  expect_one_line_error(
      run_cli(GetParam() + " " + path),
      path + ": the trace holds no events (was the run empty, or killed before its first flush?)");
}

TEST_P(CliErrors, Directory) {
  const auto dir = testing::temp_path("a-directory");
  std::filesystem::create_directories(dir);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  expect_one_line_error(run_cli(GetParam() + " " + dir), dir + ": an empty folder, so no trace to read");
  // What it holds instead, named.
  std::filesystem::create_directories(dir + "/logs");
  std::ofstream(dir + "/notes.txt") << "text\n";
  std::ofstream(dir + "/b.csv") << "1,2\n";
  expect_one_line_error(run_cli(GetParam() + " " + dir),
                        dir + ": a folder of 2 files and 1 folder (b.csv, logs/, notes.txt), with no trace file "
                              "among them (*.db; else *.json, *.json.gz, *.sqlite)");
}

// Every command imports a trace of another tool first (into a temporary
// trace): info says what the import holds, the others analyse it.
TEST_P(CliErrors, NsightExportPointsToImportOrIsImported) {
  const std::string path = testing::shared_data("nsys/nsys-ai-mock.sqlite");
  MOETRACE_NEED_SHARED(path);
  const auto r = run_cli(GetParam() + " " + path);
  if (GetParam() == "info") {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("trace:      " + path + "\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("kernels"), std::string::npos) << r.out;
    return;
  }
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find(std::filesystem::temp_directory_path().string() + "/moetrace-"), std::string::npos)
      << "the temporary trace's name is shown";
}

TEST_P(CliErrors, JsonFilePointsToImportOrGetsTheImportersError) {
  const auto path = testing::temp_path("trace.json");
  std::ofstream(path) << "{\"traceEvents\": []}\n";
  // Every command imports it first (info too: it says what the import holds).
  expect_one_line_error(run_cli(GetParam() + " " + path),
                        path + ": no events to import (no kernels, copies, API calls or ranges)");
}

// `report TRACE.json.gz` is `import` then `report` of the imported trace:
// the same report but for the trace's name, and no file left behind.
TEST(CliImport, ReportOfAKinetoFileIsTheReportOfItsImport) {
  const auto dir = testing::temp_path("report-json");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto json = dir + "/rank0.pt.trace.json";
  std::ofstream(json) << R"({"traceEvents": [
      {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 2,
       "args": {"correlation": 7}},
      {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllToAll", "pid": 0, "tid": 7, "ts": 20, "dur": 30,
       "args": {"correlation": 7, "stream": 7, "device": 0}},
      {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 60, "dur": 10,
       "args": {"stream": 7, "device": 0}}]})";
  auto r = run_cli("import " + json + " -o " + dir + "/rank0.db");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto imported = run_cli("report --format json " + dir + "/rank0.db");
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  // The temporary trace goes where TMPDIR says: a folder of this test's own.
  const auto tmp = dir + "/tmp";
  std::filesystem::create_directories(tmp);
  const char* old_tmp = std::getenv("TMPDIR");
  const std::string saved = old_tmp ? old_tmp : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  const auto direct = run_cli("report --format json " + json);
  const auto info = run_cli("info --format json " + json);  // what the import holds
  if (old_tmp) ::setenv("TMPDIR", saved.c_str(), 1); else ::unsetenv("TMPDIR");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const auto ij = nlohmann::json::parse(info.out);
  EXPECT_EQ(ij["run"]["path"], json);
  EXPECT_EQ(ij["tables"]["kernels"], 2);
  EXPECT_EQ(ij["tables"]["api_calls"], 1);
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  auto a = nlohmann::json::parse(imported.out), b = nlohmann::json::parse(direct.out);
  EXPECT_EQ(b["run"]["path"], json);
  EXPECT_EQ(b["breakdown"]["ranks"][0]["busy_ns"], 40000);  // 30 us all-to-all + 10 us GEMM
  EXPECT_EQ(a["run"]["integrity"], "verified");
  EXPECT_EQ(b["run"]["integrity"], "imported in memory");  // read without a file between
  for (auto* j : {&a, &b}) {  // the trace's name, wherever it is shown
    (*j)["run"].erase("path");
    (*j)["run"].erase("integrity");
    (*j)["fitted_models"]["source"].erase("trace");
    (*j)["recommendations"].erase("trace");
  }
  EXPECT_EQ(a, b);
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "a temporary trace was left behind";
  // The other commands that read traces read it so too; export used to
  // read the trace file again (for NCCL args) and refused the JSON.
  const auto exported = run_cli("export chrome " + json + " -o " + dir + "/perfetto.json");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_NE(read_text(dir + "/perfetto.json").find("ncclDevKernel_AllToAll"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(InfoReportFit, CliErrors, ::testing::Values("info", "report", "fit"));

// Many ranks: beyond 32, the per-rank table lists the three least busy, the
// median and the three busiest ranks (the straggler last) with a line giving
// min, median and max, unless --per-rank asks for all. Rank r is busy for
// 100 (r + 1) ns, so of 40 ranks 0-2 are the least busy, 37-39 the busiest,
// and the median (the 21st in order) is rank 20 at 2.1 us.
TEST(Cli, ReportSummarisesManyRanks) {
  auto ranks_trace = [](int n) {
    std::string text;
    for (int k = 0; k < n; ++k)
      text += "stream id=" + std::to_string(k) + " rank=" + std::to_string(k) + " role=comm\n" + "op rank=" +
              std::to_string(k) + " stream=" + std::to_string(k) +
              " kind=dispatch_all_to_all layer=0 iteration=0 start=0 end=" + std::to_string(100 * (k + 1)) + "\n";
    const auto path = testing::temp_path("ranks" + std::to_string(n) + ".db");
    testing::write_text_trace(path, text);
    return path;
  };
  const auto path = ranks_trace(40);
  auto r = run_cli("report " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto table = r.out.substr(r.out.find("Per rank (window: "));
  const auto note = table.find("40 ranks by busy time");
  ASSERT_NE(note, std::string::npos) << r.out;
  const auto listed = table.substr(0, note);
  auto has_row = [&](int rank) { return listed.find("\n  " + std::to_string(rank) + " ") != std::string::npos; };
  for (int rank : {0, 1, 2, 20, 37, 38, 39}) EXPECT_TRUE(has_row(rank)) << rank;
  for (int rank : {3, 19, 21, 36}) EXPECT_FALSE(has_row(rank)) << rank;
  EXPECT_NE(table.find("(rank 0)", note), std::string::npos);
  EXPECT_NE(table.find("(rank 20)", note), std::string::npos);
  EXPECT_NE(table.find("(rank 39)", note), std::string::npos);
  // Up to 32 ranks every rank is listed.
  r = run_cli("report " + ranks_trace(32));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("32 ranks by"), std::string::npos);
  r = run_cli("report --per-rank " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("40 ranks by"), std::string::npos);
}

// A trace truncated by another program while SQLite has it mapped raises
// SIGBUS on the next page read: one line and exit status 1, not a crash.
TEST(Cli, SigbusOfATruncatedFileIsOneLine) {
  EXPECT_EXIT(
      {
        moetrace::cli::report_truncated_files();
        raise(SIGBUS);
      },
      ::testing::ExitedWithCode(1), "^moetrace: a file being read was truncated or changed by another program");
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(run_cli("").exit_code, 2);
  EXPECT_EQ(run_cli("frobnicate").exit_code, 2);
  const auto r = run_cli("report x.db --format yaml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--format"), std::string::npos) << r.err;
}

TEST(Cli, HelpListsTheSubcommands) {
  const auto r = run_cli("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* sub : {"info", "report", "synth", "fit", "diff", "import", "export"})
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
}

TEST(Cli, ReportJsonAndText) {
  const auto path = testing::temp_path("ok.db");
  testing::write_text_trace(path, testing::kFortyPercentLayer);
  auto r = run_cli("report " + path + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"all_to_all_share\": 0.4"), std::string::npos);
  r = run_cli("report " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("all-to-all: 40.0% of MoE-layer time"), std::string::npos) << r.out;
  r = run_cli("info " + path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("op_ranges"), std::string::npos) << r.out;
}

TEST(Cli, ImportThenInfoReportAndExport) {
  const auto json = testing::temp_path("cli-kineto.json"), db = testing::temp_path("cli-imported.db"),
             chrome = testing::temp_path("cli-chrome.json");
  std::ofstream(json) << R"json({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
     "args": {"correlation": 3}},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(x)", "pid": 0, "tid": 9, "ts": 2, "dur": 4,
     "args": {"correlation": 3}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "a", "pid": 0, "tid": 9, "ts": 2, "dur": 4}]})json";
  auto r = run_cli("import " + json + " -o " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "imported 1 kineto file into " + db +
                       ": 1 rank, 2 events (1 api_calls, 1 kernels); 1 source records not imported "
                       "(see `moetrace info`)\n");
  r = run_cli("info " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("backend:    kineto"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("import.skipped.gpu_user_annotation = 1"), std::string::npos) << r.out;
  r = run_cli("report " + db + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("export chrome " + db + " -o " + chrome);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(read_text(chrome).find("\"name\":\"ncclDevKernel_SendRecv(x)\""), std::string::npos);
  EXPECT_NE(r.err.find("1 launch flows"), std::string::npos) << r.err;
}

// A real PyTorch-profiler trace (HTA's NCCL test trace, one rank): its NCCL
// kernels are classified by name (analyzer/data/kernel_classes.json). The
// expected times were computed from the JSON with Python's decimal module
// (exact ns, union of each kind's intervals): 15 ncclKernel_AllReduce_* ->
// 46,762,159 ns all-reduce; 6 ncclKernel_Broadcast_* -> 114,334 ns other
// communication; no all-to-all. The report says which sections it cannot fill.
TEST(Cli, ImportedKinetoTraceClassifiesItsNcclKernels) {
  const std::string path = testing::shared_data("kineto/hta-nccl_data.json.gz");
  MOETRACE_NEED_SHARED(path);
  const auto db = testing::temp_path("cli-hta-nccl.db");
  auto r = run_import(path, db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("report " + db + " --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["breakdown"]["ranks"].size(), 1u);
  const auto& ns = j["breakdown"]["ranks"][0]["category_ns"];
  EXPECT_EQ(ns["all_reduce"].get<std::int64_t>(), 46762159);
  EXPECT_EQ(ns["other_comm"].get<std::int64_t>(), 114334);
  EXPECT_EQ(ns["all_to_all"].get<std::int64_t>(), 0);
  // ProfilerStep#4..6 give iterations (op ranges by MoE recognition), but
  // nothing in this ResNet-style trace is MoE: no layer, and the report says
  // what would unlock the MoE sections.
  EXPECT_TRUE(j["breakdown"]["has_op_ranges"].get<bool>());
  EXPECT_EQ(j["breakdown"]["summary"]["iterations"].get<int>(), 3);
  EXPECT_TRUE(j["recognition"]["ran"].get<bool>());
  EXPECT_FALSE(j["recognition"]["moe"].get<bool>());
  EXPECT_FALSE(j["recognition"]["missing"].empty());
  EXPECT_FALSE(j["recognition"]["unclassified_kernels"].empty());
  // The empty layer table is left out, with the reason.
  EXPECT_TRUE(j["breakdown"]["layers"].empty());
  EXPECT_NE(j["breakdown"]["no_layers_reason"].get<std::string>().find("no range or kernel matched an MoE rule"),
            std::string::npos);
  r = run_cli("report " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no MoE layer in the trace: no range or kernel matched an MoE rule"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("Per MoE layer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MoE layers (per-layer breakdown"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("No expert load in the trace."), std::string::npos) << r.out;
}

TEST(Cli, MoeRulesErrorsAreOneLine) {
  const std::string path = testing::shared_data("kineto/hta-sampled_rank-0.json.gz");
  MOETRACE_NEED_SHARED(path);
  const auto db = testing::temp_path("cli-rules.db");
  ASSERT_EQ(run_import(path, db).exit_code, 0);
  expect_one_line_error(run_cli("report " + db + " --moe-rules /nonexistent/rules.json"),
                        "/nonexistent/rules.json: cannot open the rules file");
  const auto rules = testing::temp_path("bad-rules.json");
  std::ofstream(rules) << R"({"version": 1, "ranges": [{"label": "my layer", "name": "(", "role": "layer"}]})";
  const auto bad = run_cli("report " + db + " --moe-rules " + rules);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.err.rfind("moetrace: " + rules + ": ranges[0] (\"my layer\"): invalid regular expression", 0), 0u)
      << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1);
  // --no-moe-recognition reads the trace as it is: no op ranges.
  const auto r = run_cli("report " + db + " --no-moe-recognition --format json --no-recommendations");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["breakdown"]["has_op_ranges"].get<bool>());
  EXPECT_FALSE(j["recognition"]["ran"].get<bool>());
}

// --window steps-but-last reproduces HTA's temporal breakdown and
// communication overlap on HTA's own traces: idle 53.558 % and 54.717 %,
// overlap 11.810 % and 20.051 % (ranks 0 and 1), computed from the JSON
// events by HTA's definitions (its kernels launched before the last
// ProfilerStep; idle = their span minus their union; overlap = the
// communication kernels' union meeting the computation kernels', over the
// former), re-stated without HTA or moetrace in tests/cli/hta_reference.py
// (which ctest runs as hta_reference_script: it must give these numbers).
TEST(Cli, WindowLikeHtaGivesHtasIdleAndOverlap) {
  const std::string data = testing::shared_data("kineto/");
  MOETRACE_NEED_SHARED(data + "hta-sampled_rank-0.json.gz");
  MOETRACE_NEED_SHARED(data + "hta-sampled_rank-1.json.gz");
  const double idle[] = {53.558, 54.717}, overlap[] = {11.810, 20.051};
  for (int r : {0, 1}) {
    const auto db = testing::temp_path(fmt::format("cli-window-{}.db", r));
    ASSERT_EQ(run_import(fmt::format("{}hta-sampled_rank-{}.json.gz", data, r), db).exit_code, 0);
    const auto out = run_cli("report " + db + " --window steps-but-last --no-recommendations --format json");
    ASSERT_EQ(out.exit_code, 0) << out.err;
    const auto j = nlohmann::json::parse(out.out)["breakdown"];
    EXPECT_EQ(j["rank_window"]["name"], "steps-but-last");
    const auto& row = j["ranks"][0];
    const double window = row["window_ns"].get<double>();
    EXPECT_NEAR(100 * row["idle_ns"].get<double>() / window, idle[r], 0.1) << r;
    EXPECT_NEAR(100 * row["comm_hidden_ns"].get<double>() / row["comm_ns"].get<double>(), overlap[r], 0.1) << r;
    const auto text = run_cli("report " + db + " --window steps-but-last --no-recommendations");
    EXPECT_NE(text.out.find("Per rank (window: the GPU work of the profiler steps (iterations) but the last"),
              std::string::npos);
  }
  const auto bad = run_cli("report x.db --window last");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_EQ(bad.err.rfind("--window: last not in {span,steps,steps-but-last,hta}", 0), 0u) << bad.err;
}

// recommend --model on an imported PyTorch-profiler trace of one MoE layer
// (tests/data/gpu: recorded on an H200, no all-to-all, no expert load): the
// config gives the shapes, --tokens the tokens a rank holds; a bad model file
// is one line.
TEST(Cli, RecommendOnAnImportedTraceWithAModelFile) {
  const auto in = MOETRACE_SOURCE_DIR + "/tests/data/gpu/torch_moe_peer.json.gz";
  const auto db = testing::temp_path("cli-peer.db");
  ASSERT_EQ(run_import(in, db).exit_code, 0);
  // The layer of tools/gpu_bench.py: M = 4096, H = 14336 (Mixtral 8x7B's
  // expert), top-2 of 8, 16384 tokens.
  const auto config = testing::temp_path("peer-config.json");
  std::ofstream(config) << R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                               "num_local_experts": 8, "num_experts_per_tok": 2, "torch_dtype": "bfloat16"})";
  auto r = run_cli("recommend " + db + " --model " + config + " --tokens 16384 --no-simulate -f json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["layers"].size(), 1u) << r.out;
  const auto notes = j["notes"].dump();
  EXPECT_NE(notes.find("hidden size M = 4096 (" + config + ": hidden_size)"), std::string::npos) << notes;
  EXPECT_NE(notes.find("routing assumed balanced, 16384 tokens a rank (--tokens)"), std::string::npos) << notes;
  // Without the model file nor --tokens: the trace was recorded with
  // record_shapes=True, and the GEMMs of its router and experts give the
  // same layer as the recording's own settings (the README beside the
  // fixture): M 4096, H 14336, E 8, top-2 (the experts' down projections
  // multiply twice the router's rows), 16384 tokens (the router's rows), bf16.
  r = run_cli("recommend " + db + " --no-simulate -f json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  {
    const auto k = nlohmann::json::parse(r.out);
    ASSERT_EQ(k["layers"].size(), 1u) << r.out;
    const auto& w = k["layers"][0]["workload"];
    EXPECT_EQ(w["model_dim"], 4096);
    EXPECT_EQ(w["hidden"], 14336);
    EXPECT_EQ(w["experts"], 8);
    EXPECT_EQ(w["top_k"], 2);
    EXPECT_EQ(w["elem_bytes"], 2);
    EXPECT_EQ(w["max_tokens_per_rank"], 16384);
    const auto n = k["notes"].dump();
    EXPECT_NE(n.find("from the Input Dims of"), std::string::npos) << n;
    EXPECT_NE(n.find("16384 tokens a rank (the rows of the router's GEMM"), std::string::npos) << n;
  }
  // A model file that disagrees with the recorded shapes: one line naming both.
  const auto other = testing::temp_path("peer-other.json");
  std::ofstream(other) << R"({"model_type": "mixtral", "hidden_size": 5120, "intermediate_size": 14336,
                              "num_local_experts": 8, "num_experts_per_tok": 2})";
  r = run_cli("recommend " + db + " --model " + other + " --no-simulate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("the hidden size is 4096 in the trace (the Input Dims of"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("but 5120 in " + other + ": hidden_size"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const auto bad = testing::temp_path("dense-config.json");
  std::ofstream(bad) << R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008})";
  expect_one_line_error(run_cli("recommend " + db + " --model " + bad),
                        "invalid configuration: " + bad + ": no routed-expert count (n_routed_experts, num_local_experts, num_experts, "
                              "moe_num_experts, ffn_config.moe_num_experts): not the config.json of an MoE model",
                        2);
  // --tokens of recommend and replay: a positive whole number, said so.
  for (const char* cmd : {"recommend ", "replay "}) {
    r = run_cli(cmd + db + " --tokens 0");
    EXPECT_NE(r.exit_code, 0) << cmd;
    EXPECT_NE(r.err.find("--tokens: a positive whole number of tokens a rank holds, not \"0\""), std::string::npos)
        << r.err;
  }
}

// A simulated run exported as a Chrome/Kineto trace and imported again gives
// the same advice: the export's op ranges are read back as they were (no
// recognition needed), the layer's shape comes from the job's Megatron-Core
// arguments (the trace no longer has its layers table) and the hardware
// model is the preset the run used (the export has no run_config). Without
// expert load the routing is assumed balanced, which the pipemoe preset's is.
TEST(Cli, KinetoRoundTripGivesTheSameAdvice) {
  const auto db = testing::temp_path("rt-sim.db"), json = testing::temp_path("rt-sim.json"),
             back = testing::temp_path("rt-back.db"), args = testing::temp_path("rt-args.txt");
  for (const auto& f : {db, back}) std::filesystem::remove(f);
  ASSERT_EQ(run_cli("run -b sim -p pipemoe-tm1-p16 -i 2 --ranks 4 -q -o " + db).exit_code, 0);
  ASSERT_EQ(run_cli("export chrome " + db + " -o " + json).exit_code, 0);
  ASSERT_EQ(run_cli("import " + json + " -o " + back).exit_code, 0);
  std::ofstream(args) << "--num-experts 16 --moe-router-topk 2 --hidden-size 512 --moe-ffn-hidden-size 1024 "
                         "--expert-model-parallel-size 4\n";
  auto advice = [&](const std::string& trace) {
    const auto r = run_cli("recommend " + trace + " --model " + args + " --cost-model pipemoe-2080ti-ib100 -f json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  const auto a = advice(db), b = advice(back);
  ASSERT_EQ(a["items"].size(), b["items"].size());
  ASSERT_FALSE(a["items"].empty());
  for (std::size_t i = 0; i < a["items"].size(); ++i) {
    SCOPED_TRACE(a["items"][i]["subject"].get<std::string>());
    EXPECT_EQ(a["items"][i]["action"], b["items"][i]["action"]);
    if (a["items"][i].contains("predicted_gain")) {
      const double g = a["items"][i]["predicted_gain"].get<double>();
      EXPECT_NEAR(b["items"][i]["predicted_gain"].get<double>(), g, 0.05 * std::max(0.01, std::fabs(g)));
    }
  }
  const auto& ra = a["layers"][0]["replay"];
  const auto& rb = b["layers"][0]["replay"];
  EXPECT_NEAR(rb["simulated_s"].get<double>() / ra["simulated_s"].get<double>(), 1.0, 0.05);
  EXPECT_NEAR(rb["measured_s"].get<double>() / ra["measured_s"].get<double>(), 1.0, 0.05);
}

// A trace without the writer's integrity record (older writer, killed run)
// is read, with a warning on stderr and in the report.
TEST(Cli, NoIntegrityRecordIsWarnedOf) {
  const auto db = testing::temp_path("cli-no-integrity.db");
  testing::write_text_trace(db, testing::kOneGateOp);
  { sqlite::Database(db, sqlite::Database::Mode::kReadWrite).exec("DELETE FROM meta WHERE key = 'integrity'"); }
  const auto r = run_cli("report --no-recommendations " + db);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("moetrace: warning: " + db + ": the trace has no integrity record", 0), 0u) << r.err;
  EXPECT_NE(r.out.find("warning: the trace has no integrity record"), std::string::npos) << r.out;
}

// A PyTorch-profiler trace of Meta's MTIA: its device events (Kineto's
// mtia_ccp_events, mtia_runtime; libkineto's ActivityType names) are not
// read; import, info and report say so, naming the device and the count.
TEST(Cli, UnreadDeviceEventsAreWarnedOf) {
  // MTIA's runtime calls and kernels (libkineto's mtia_runtime and
  // mtia_ccp_events) are read; an HPU op (hpu_op) is not, and is warned of.
  const auto json = testing::temp_path("mtia.json");
  std::ofstream(json) << R"({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
    {"ph": "X", "cat": "mtia_runtime", "name": "mtiaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 2},
    {"ph": "X", "cat": "mtia_ccp_events", "name": "gemm_kernel", "pid": 0, "tid": 3, "ts": 12, "dur": 4},
    {"ph": "X", "cat": "mtia_ccp_events", "name": "gemm_kernel", "pid": 0, "tid": 3, "ts": 17, "dur": 4},
    {"ph": "X", "cat": "hpu_op", "name": "synLaunch", "pid": 1, "tid": 1, "ts": 22, "dur": 1}]})";
  const auto db = testing::temp_path("mtia.db");
  const auto imp = run_import(json, db);
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  EXPECT_NE(imp.err.find("(1 api_calls, 2 kernels, 1 nvtx_ranges)"), std::string::npos) << imp.err;
  const std::string line =
      "1 events of Intel Gaudi (HPU) devices were not imported (hpu_op 1): moetrace reads the activity "
      "of CUDA devices only, so their device timeline is missing from every number";
  EXPECT_NE(imp.err.find("moetrace: warning: " + line + "\n"), std::string::npos) << imp.err;
  EXPECT_EQ(imp.err.find("MTIA"), std::string::npos) << imp.err;
  const auto info = run_cli("info " + db);
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("warning:    " + line), std::string::npos) << info.out;
  const auto rep = run_cli("report --no-recommendations " + db);
  EXPECT_NE(rep.out.find("warning: " + line), std::string::npos) << rep.out << rep.err;
}

TEST(Cli, ImportErrorsAreOneLine) {
  expect_one_line_error(run_cli("import /nonexistent/a.json -o " + testing::temp_path("x.db")),
                        "/nonexistent/a.json: no such file");
  const auto text = testing::temp_path("notes.txt");
  std::ofstream(text) << "plain text\n";
  expect_one_line_error(run_cli("import " + text + " -o " + testing::temp_path("x.db")),
                        text + ": not a format moetrace imports (Nsight Systems SQLite export, or "
                               "PyTorch-profiler/Kineto JSON, optionally gzipped)");
  const auto rep = testing::temp_path("profile.nsys-rep");
  std::ofstream(rep) << "binary";
  expect_one_line_error(run_cli("import " + rep + " -o " + testing::temp_path("x.db")),
                        rep + ": an Nsight Systems report; export it to SQLite first (nsys export "
                              "--type sqlite " + rep + ")");
  const auto trace = testing::temp_path("already.db");
  testing::write_text_trace(trace, "kernel rank=0 stream=0 start=0 end=1\n");
  expect_one_line_error(run_cli("import " + trace + " -o " + testing::temp_path("x.db")),
                        trace + ": already a moetrace trace; nothing to import");
  EXPECT_EQ(run_cli("import " + text + " -o x.db --format yaml").exit_code, 2);
  EXPECT_EQ(run_cli("import " + text).exit_code, 2);  // -o is required
  expect_one_line_error(run_cli("export chrome /nonexistent/run.db -o " + testing::temp_path("x.json")),
                        "/nonexistent/run.db: no such file");
}

TEST(Cli, SynthRejectsImpossibleConfigNamingTheField) {
  const auto r = run_cli("synth " + testing::temp_path("bad.db") + " --chunks 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "moetrace: invalid configuration: chunks (0) must be at least 1\n");
}

// One MoE layer, all-to-all = (dispatch 200 + combine) of the window; the
// combine ends at `combine_end`, the unpermute 200 ns later.
std::string forty_percent_layer(int combine_end) {
  return "stream id=0 rank=0 role=compute\nstream id=1 rank=0 role=comm\n"
         "op rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100\n"
         "op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=100 end=300 bytes=1000\n"
         "op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=300 end=700 flops=1e6\n"
         "op rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 start=600 end=" +
         std::to_string(combine_end) + " bytes=1000\n" +
         "op rank=0 stream=0 kind=unpermute layer=0 iteration=0 start=" + std::to_string(combine_end) +
         " end=" + std::to_string(combine_end + 200) + "\n";
}

// a2a share 40 % (base) -> 50 % (new): +25 % relative, +10 points.
TEST(CliDiff, ThresholdsGateWithExitFourAndOneLinePerViolation) {
  const auto base = testing::temp_path("diff-base.db"), next = testing::temp_path("diff-new.db");
  testing::write_text_trace(base, forty_percent_layer(800));
  testing::write_text_trace(next, forty_percent_layer(1000));
  auto r = run_cli("diff " + base + " " + next + " --fail-if 'a2a_share > +5%' --fail-if 'a2a_share > +30%'" +
                   " --fail-if 'layer0.time > +100ns'");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_EQ(r.err,
            "moetrace: threshold violated: a2a_share > +5%: 40.0% -> 50.0% (+10.0pp, +25.0%)\n"
            "moetrace: threshold violated: layer0.time > +100ns: 1 us -> 1.2 us (+200 ns, +20.0%)\n");
  EXPECT_NE(r.out.find("a2a_share"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("VIOLATED  a2a_share > +5%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok        a2a_share > +30%"), std::string::npos) << r.out;
  // Within every threshold: exit 0, nothing on stderr.
  r = run_cli("diff " + base + " " + next + " --fail-if 'a2a_share > +30%' --format json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["violations"], 0);
  EXPECT_EQ(j["thresholds"][0]["violated"], false);
  // The same trace twice changes nothing.
  r = run_cli("diff " + base + " " + base + " --fail-if 'a2a_share > +0%'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(CliDiff, BadThresholdIsAUsageError) {
  const auto base = testing::temp_path("diff-base2.db");
  testing::write_text_trace(base, forty_percent_layer(800));
  const auto r = run_cli("diff " + base + " " + base + " --fail-if 'a2a_shar > +5%'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown metric \"a2a_shar\""), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(CliDiff, MissingTraceIsOneLine) {
  const auto base = testing::temp_path("diff-base3.db");
  testing::write_text_trace(base, forty_percent_layer(800));
  expect_one_line_error(run_cli("diff " + base + " /nonexistent/new.db"), "/nonexistent/new.db: no such file");
}

TEST(Cli, FitWritesTheCostModel) {
  const auto path = testing::temp_path("fit.db");
  testing::write_text_trace(path, forty_percent_layer(800));
  const auto out = testing::temp_path("cost_model.json");
  auto r = run_cli("fit " + path + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto sim = nlohmann::json::parse(read_text(out));
  EXPECT_TRUE(sim["compute_by_kind"].contains("expert_ffn"));
  EXPECT_TRUE(sim["collectives"].contains("all_to_all_v"));
  r = run_cli("fit " + path + " --format fits");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["cost_model_version"], 1);
  EXPECT_EQ(j["compute"][0]["op_kind"], "expert_ffn");
  EXPECT_EQ(j["collectives"][0]["collective"], "all_to_all");
  r = run_cli("fit " + path + " --format text");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Fitted models"), std::string::npos) << r.out;
}

// Calibration round trip on the simulator: a run on the h100-nvlink-ib
// preset (GEMMs: 5 us per launch, 600 TFLOP/s), fitted, gives back those
// numbers, and re-simulating with the fitted model gives the same run time
// within 2 %.
TEST(Cli, FitRecoversTheSimulatorsCostModel) {
  const auto run = testing::temp_path("sim-fit.db"), model = testing::temp_path("sim-fit.json"),
             rerun = testing::temp_path("sim-refit.db");
  const std::string workload =
      " --variant mpipemoe --ranks 4 --experts 4 -r 4 --strategy S1 --layers 2 -i 3 --routing zipf --skew 1.0 -q";
  auto r = run_cli("run" + workload + " --cost-model h100-nvlink-ib -o " + run);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_cli("fit " + run + " -o " + model);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(read_text(model));
  const auto& ffn = j["compute_by_kind"]["expert_ffn"];
  EXPECT_NEAR(ffn["alpha_s"].get<double>(), 5e-6, 5e-8);
  EXPECT_NEAR(ffn["seconds_per_flop"].get<double>(), 1.0 / 600e12, 0.01 / 600e12);
  EXPECT_NEAR(j["copy"]["d2h"]["beta_s"].get<double>(), 1.0 / 50e9, 0.01 / 50e9);
  r = run_cli("run" + workload + " --cost-model " + model + " -o " + rerun);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto span = [&](const std::string& path) {
    const auto info = nlohmann::json::parse(run_cli("info --format json " + path).out);
    return info["run"]["end_ns"].get<double>() - info["run"]["start_ns"].get<double>();
  };
  EXPECT_NEAR(span(rerun) / span(run), 1.0, 0.02);
}

TEST(Cli, ReportMarkdownAndHtml) {
  const auto path = testing::temp_path("formats.db");
  testing::write_text_trace(path, forty_percent_layer(800));
  auto r = run_cli("report " + path + " --format markdown");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("## Where the time goes"), std::string::npos) << r.out;
  const auto html = testing::temp_path("report.html");
  r = run_cli("report " + path + " --format html -o " + html);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto h = read_text(html);
  EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(h.find("http"), std::string::npos);
}

}  // namespace
}  // namespace moetrace
