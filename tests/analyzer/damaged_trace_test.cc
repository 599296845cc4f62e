// A damaged trace is never reported as if it were whole: the loader refuses
// it with one line, or reports it with a warning naming the damaged table
// and what was left out, or (damage where nothing is read) reports exactly
// what the undamaged trace gives.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/run_by_file.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/synthetic/synthetic_trace.h"
#include "loaded_trace.h"
#include "text_trace.h"

namespace moetrace::analyzer {
namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The whole report (every section, per rank and iteration) as JSON text.
std::string report_of(const Trace& t) {
  ReportOptions o;
  o.per_rank = o.per_iteration = true;
  return report_json(t, analyze(t), o).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A small synthetic run (ops, kernels, API calls, buffers, memory events,
// expert load) in 1 KiB pages, so that byte flips land in rows rather than
// in empty page space.
std::string small_trace(const std::string& name, bool keep_integrity_record) {
  const auto path = testing::temp_path(name);
  synthetic::SyntheticConfig c{.ranks = 2, .layers = 1, .iterations = 2, .chunks = 2, .kernels_per_op = 1};
  synthetic::write_synthetic_trace(path, c);
  sqlite::Database db(path, sqlite::Database::Mode::kReadWrite);
  if (!keep_integrity_record) db.exec("DELETE FROM meta WHERE key = 'integrity'");
  db.exec("PRAGMA journal_mode=DELETE; PRAGMA page_size=1024; VACUUM;");
  return path;
}

struct Outcomes {
  int refused = 0, warned = 0, identical = 0, silent = 0;
  std::string first_silent;  // the flips of the first copy reported differently without a word
};

// `copies` copies of the trace, each with 1-3 random bytes changed
// (deterministic seeds), loaded and reported like `moetrace report` does.
Outcomes damage(const std::string& clean, int copies) {
  const auto bytes = testing::read_text(clean);
  const auto path = testing::temp_path("damaged-copy.db");  // one path: the report names it
  std::filesystem::copy_file(clean, path, std::filesystem::copy_options::overwrite_existing);
  const auto clean_trace = load_trace(path);
  const auto baseline = report_of(clean_trace);
  Outcomes out;
  for (int i = 0; i < copies; ++i) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(i) * 7919 + 17);
    auto damaged = bytes;
    std::string flips;
    for (int f = 0, n = 1 + static_cast<int>(rng() % 3); f < n; ++f) {
      const auto at = rng() % damaged.size();
      const auto x = static_cast<char>(1 + rng() % 255);
      damaged[at] = static_cast<char>(damaged[at] ^ x);
      flips += " byte " + std::to_string(at);
    }
    write_file(path, damaged);
    try {
      const auto trace = load_trace(path);
      const auto report = report_of(trace);
      if (report == baseline) ++out.identical;
      // Warned: damage found, or an integrity record lost (its key or row
      // damaged), which every report warns of.
      else if (!trace.run.damage.empty() || trace.run.integrity != clean_trace.run.integrity) ++out.warned;
      else if (++out.silent == 1) out.first_silent = "copy " + std::to_string(i) + ":" + flips;
    } catch (const Error& e) {
      ++out.refused;
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    }
  }
  for (const auto& [key, n] : {std::pair{"refused", out.refused}, {"warned", out.warned},
                               {"identical", out.identical}, {"silent", out.silent}})
    ::testing::Test::RecordProperty(key, n);
  return out;
}

// Without the writer's integrity record (as traces were before it), byte
// flips in a timestamp, a byte count or a buffer access change the report
// with no word about it; this shows the test can tell.
TEST(DamagedTrace, WithoutTheIntegrityRecordSomeDamageGoesUnnoticed) {
  const auto o = damage(small_trace("unrecorded.db", false), 120);
  EXPECT_GT(o.silent, 0) << "refused " << o.refused << ", identical " << o.identical;
}

TEST(DamagedTrace, EveryRandomlyDamagedCopyIsRefusedWarnedOrReportedUnchanged) {
  const auto o = damage(small_trace("recorded.db", true), 120);
  EXPECT_EQ(o.silent, 0) << o.first_silent;
  EXPECT_GT(o.refused, 0);
  EXPECT_EQ(o.refused + o.warned + o.identical + o.silent, 120);
}

constexpr std::string_view kTwoRankTrace = R"(
  run world_size=2
  stream id=0 rank=0 role=compute
  stream id=1 rank=1 role=compute
  op id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100
  op id=2 rank=1 stream=1 kind=expert_ffn layer=0 iteration=0 start=0 end=300
  kernel rank=0 stream=0 start=0 end=50 name=gemm op=1
  buffer id=1 rank=0 tag=T_DI bytes=1024 layer=0 alloc=0 free=500
  alloc rank=0 ts=0 address=4096 bytes=1024 buffer=1 memory_kind=1
  use op=1 buffer=1 access=rw
  dep op=2 on=1
)";

// Writes kTwoRankTrace, applies `sql` to it, optionally without the record.
std::string changed(const std::string& name, const std::string& sql, bool keep_record) {
  const auto path = testing::temp_path(name);
  testing::write_text_trace(path, kTwoRankTrace);
  sqlite::Database db(path, sqlite::Database::Mode::kReadWrite);
  if (!keep_record) db.exec("DELETE FROM meta WHERE key = 'integrity'");
  db.exec("PRAGMA ignore_check_constraints = ON");  // damage is not bound by the schema's CHECKs
  db.exec(sql);
  return path;
}

TEST(DamagedTrace, ATraceAsWrittenIsVerified) {
  const auto t = load_trace(changed("whole.db", "SELECT 1", true));
  EXPECT_EQ(t.run.integrity, "verified");
  EXPECT_EQ(t.run.damage, std::vector<std::string>{});
  EXPECT_EQ(load_trace(changed("whole-unrecorded.db", "SELECT 1", false)).run.integrity, "not recorded");
}

// A change to kTwoRankTrace (in file `name`) and the error loading it gives
// (after the file's path and ": ").
struct Refused {
  const char* name;
  const char* sql;
  const char* error;
};

void expect_refused(const std::vector<Refused>& cases, bool keep_record) {
  for (const auto& c : cases) {
    const auto p = changed(c.name, c.sql, keep_record);
    EXPECT_EQ(testing::load_error(p), p + ": " + c.error);
  }
}

// What the record catches that no range check can: a value changed within
// its range, a row gone, a row added.
TEST(DamagedTrace, TheRecordNamesTheTableThatDiffers) {
  expect_refused(
      {
          {"end.db", "UPDATE kernels SET end_ns = end_ns + 1",
           "table kernels is damaged: its rows differ from those the writer recorded"},
          {"gone.db", "DELETE FROM buffers", "table buffers is damaged: 0 rows read, the writer recorded 1"},
          {"access.db", "UPDATE op_ranges SET buffers = '[[1,1]]' WHERE id = 1",
           "table op_links is damaged: its rows differ from those the writer recorded"},
          {"config.db", "INSERT INTO run_config VALUES ('x', 'y')",
           "table run_config is damaged: 1 rows read, the writer recorded 0"},
          {"record.db", "UPDATE meta SET value = 'v1 kernels=x' WHERE key = 'integrity'",
           "the integrity record in meta is damaged; damaged trace"},
      },
      true);
}

// Without a record: values out of their range are refused.
TEST(DamagedTrace, ValuesOutOfRangeAreRefused) {
  expect_refused(
      {
          {"phase.db", "UPDATE op_ranges SET phase = 7 WHERE id = 1",
           "op_ranges has phase 7 (expected 0 .. 2); damaged trace"},
          {"rank.db", "UPDATE kernels SET rank = 9", "kernels has rank 9 but the run has 2 ranks; damaged trace"},
          {"name.db", "UPDATE kernels SET name_id = 4000",
           "kernels names string 4000 that the strings table lacks; damaged trace"},
          {"kind.db", "UPDATE memory_events SET memory_kind = 12",
           "memory_events has memory_kind 12 (expected 0 .. 4); damaged trace"},
      },
      false);
}

// Without a record: references that point nowhere are left out, and every
// report format says so.
TEST(DamagedTrace, DanglingReferencesAreLeftOutWithAWarningInEveryFormat) {
  const auto p = changed("dangling.db",
                         "UPDATE op_ranges SET buffers = '[[5,3]]', deps = '[9]' WHERE id = 1; "
                         "UPDATE op_ranges SET deps = '[8]' WHERE id = 2; "
                         "UPDATE memory_events SET buffer_id = 6; UPDATE kernels SET op_id = 44",
                         false);
  const auto t = load_trace(p);
  EXPECT_TRUE(t.op_deps.empty());
  EXPECT_TRUE(t.op_buffers.empty());
  ASSERT_EQ(t.memory_events.size(), 1u);
  EXPECT_FALSE(t.memory_events[0].buffer.valid());
  const std::vector<std::string> expected = {
      "2 dependencies in op_ranges.deps name ops that op_ranges lacks (left out)",
      "1 buffer accesses in op_ranges.buffers name buffers or ops that the trace lacks (left out)",
      "1 memory_events rows name buffers that table buffers lacks (their buffer left out)",
      "1 kernels, memcpy or memset rows name ops that op_ranges lacks (left unattributed)",
  };
  EXPECT_EQ(t.run.damage, expected);
  const auto a = analyze(t);
  for (auto format : {ReportFormat::kText, ReportFormat::kMarkdown, ReportFormat::kHtml, ReportFormat::kJson}) {
    const std::string report = testing::report_in(format, t, a);
    if (format != ReportFormat::kJson) {  // JSON: run.damage, below
      EXPECT_NE(report.find("damaged trace"), std::string::npos) << static_cast<int>(format);
    }
    EXPECT_NE(report.find(expected[1]), std::string::npos) << static_cast<int>(format);
    // No integrity record: said in every format, not only JSON's run.integrity.
    EXPECT_NE(report.find("no integrity record"), std::string::npos) << static_cast<int>(format);
  }
  ReportOptions o;
  const auto j = report_json(t, a, o);
  EXPECT_EQ(j["run"]["damage"].size(), 4u);
  EXPECT_EQ(j["run"]["integrity"], "not recorded");
  EXPECT_EQ(j["run"]["warnings"].size(), 5u);  // four damaged tables, no integrity record
}

// A run of several files: each file's own state (no integrity record,
// damage, events of devices not read) is warned of under its name, however
// the run is read (merged, one file at a time, `info`'s overview), and in
// every report format; a clean file beside it hides nothing.
TEST(DamagedTrace, EveryFileOfARunWarnsUnderItsName) {
  const auto clean = testing::temp_path("run-rank0.db");
  testing::write_text_trace(clean, R"(
    run world_size=2
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100
    kernel rank=0 stream=0 start=0 end=50 name=gemm op=1
  )");
  const auto damaged = testing::temp_path("run-rank1.db");
  testing::write_text_trace(damaged, R"(
    run world_size=2
    config import.skipped.mtia_runtime=2
    stream id=1 rank=1 role=compute
    op id=2 rank=1 stream=1 kind=expert_ffn layer=0 iteration=0 start=0 end=300
    kernel rank=1 stream=1 start=0 end=50 name=gemm op=2
  )");
  testing::alter_trace(damaged, "DELETE FROM meta WHERE key = 'integrity'; UPDATE kernels SET op_id = 44");
  const std::vector<std::string> expected = {
      damaged + ": damaged trace: 1 kernels, memcpy or memset rows name ops that op_ranges lacks (left unattributed)",
      damaged + ": the trace has no integrity record (an older writer, or the run was killed before it closed): "
                "checked by references and value ranges only, rows lost from a table would go unnoticed",
      damaged + ": 2 events of MTIA devices were not imported (mtia_runtime 2): moetrace reads the activity of CUDA "
                "devices only, so their device timeline is missing from every number",
  };
  for (const auto& paths : {std::vector<std::string>{clean, damaged}, std::vector<std::string>{damaged, clean}}) {
    const auto merged = load_run(paths);
    EXPECT_EQ(merged.run.integrity, "mixed");
    EXPECT_EQ(run_warnings(merged.run), expected);
    EXPECT_EQ(run_damage(merged.run), std::vector<std::string>{damaged + ": " + expected[0].substr(damaged.size() + 17)});
    const auto by_file = analyze_run_by_file(paths);
    EXPECT_EQ(run_warnings(by_file.trace.run), expected);
    EXPECT_EQ(run_warnings(overview_run(paths).trace.run), expected);
    const auto a = analyze(merged);
    for (auto format : {ReportFormat::kText, ReportFormat::kMarkdown, ReportFormat::kHtml, ReportFormat::kJson}) {
      const std::string report = testing::report_in(format, merged, a);
      for (const auto& line : expected)  // HTML escapes nothing in these lines
        EXPECT_NE(report.find(line.substr(damaged.size() + 2)), std::string::npos) << static_cast<int>(format);
      EXPECT_NE(report.find(damaged + ": "), std::string::npos) << static_cast<int>(format);
    }
    const auto j = report_json(merged, a, {});
    EXPECT_EQ(j["run"]["warnings"], expected);
    EXPECT_EQ(j["run"]["integrity"], "mixed");
    EXPECT_EQ(j["run"]["config"]["import.skipped.mtia_runtime"], "2");
  }
  // Two files without a record: the run's integrity says so, each warns.
  const auto other = testing::temp_path("run-rank0-unrecorded.db");
  std::filesystem::copy_file(clean, other, std::filesystem::copy_options::overwrite_existing);
  testing::alter_trace(other, "DELETE FROM meta WHERE key = 'integrity'");
  const auto both = load_run({other, damaged});
  EXPECT_EQ(both.run.integrity, "not recorded");
  EXPECT_EQ(run_warnings(both.run).size(), 4u);
  EXPECT_EQ(run_warnings(both.run).front().rfind(other + ": the trace has no integrity record", 0), 0u);
}

}  // namespace
}  // namespace moetrace::analyzer
