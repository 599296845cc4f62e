// Reading a trace file's tables on two threads gives what reading them one
// after the other gives: the same events in the same order, and on a damaged
// file the same error. The API calls are read from both ends of the table at
// once, in blocks of 65,536 rowids (loader_event_tables.cc), so the trace
// here has several blocks of them.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/synthetic/synthetic_trace.h"
#include "text_trace.h"

namespace moetrace::analyzer {
namespace {

// A synthetic run with about 250,000 API calls (one per kernel): four
// blocks of rowids.
const std::string& threads_trace() {
  static const std::string path = [] {
    const auto p = testing::temp_path("loader-threads.db");
    synthetic::SyntheticConfig c{.ranks = 2, .layers = 2, .chunks = 2, .kernels_per_op = 2};
    c.iterations = synthetic::iterations_for_events(c, 600'000);
    synthetic::write_synthetic_trace(p, c);
    return p;
  }();
  return path;
}

std::int64_t api_rows(const std::string& path) {
  sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
  return db.query_int("SELECT count(*) FROM api_calls").value_or(0);
}

Trace load_with(const std::string& path, int threads) {
  LoadOptions o;
  o.threads = threads;
  return load_trace(path, o);
}

// The error a load throws ("" where it loads).
std::string error_of(const std::string& path, int threads) {
  try {
    load_with(path, threads);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A copy of the trace with `sql` applied (the schema's CHECKs off: damage
// is not bound by them).
std::string damaged(const std::string& name, const std::string& sql) {
  const auto path = testing::temp_path(name);
  std::filesystem::copy_file(threads_trace(), path, std::filesystem::copy_options::overwrite_existing);
  sqlite::Database db(path, sqlite::Database::Mode::kReadWrite);
  db.exec("PRAGMA ignore_check_constraints = ON");
  db.exec(sql);
  return path;
}

TEST(LoaderThreads, TheTraceHasSeveralBlocksOfApiCalls) {
  EXPECT_GT(api_rows(threads_trace()), 3 * 65536);
}

TEST(LoaderThreads, ApiCallsComeInTheOrderReadOneAfterTheOther) {
  const auto one = load_with(threads_trace(), 1);
  const auto two = load_with(threads_trace(), 2);
  EXPECT_EQ(two.run.integrity, "verified");
  ASSERT_EQ(one.api_calls.size(), static_cast<std::size_t>(api_rows(threads_trace())));
  ASSERT_EQ(two.api_calls.size(), one.api_calls.size());
  for (std::size_t i = 0; i < one.api_calls.size(); ++i) {
    const auto &a = one.api_calls[i], &b = two.api_calls[i];
    ASSERT_TRUE(a.start_ns == b.start_ns && a.end_ns == b.end_ns && a.correlation_id == b.correlation_id &&
                a.thread_id == b.thread_id && a.rank == b.rank && a.name == b.name && a.api == b.api &&
                a.return_code == b.return_code)
        << "API call " << i;
  }
  EXPECT_EQ(two.activities.size(), one.activities.size());
  EXPECT_EQ(two.ops.size(), one.ops.size());
}

// Each damaged copy throws the error of the first damage in the order the
// tables are read one after the other (kernels, op ranges, API calls by
// rowid, their check against the integrity record, syncs and NVTX, memory
// and MoE tables), whichever thread meets which damage first.
TEST(LoaderThreads, ADamagedFileGivesTheErrorOfReadingItOneAfterTheOther) {
  const struct {
    const char* name;
    std::string sql;
    const char* expected;  // a part of the error
  } cases[] = {
      // An early block's rank before a late block's API kind: the rank.
      {"two-blocks.db",
       "UPDATE api_calls SET rank = 99 WHERE rowid = 70000; "
       "UPDATE api_calls SET api = 9 WHERE rowid = (SELECT max(rowid) - 10 FROM api_calls)",
       "api_calls has rank 99"},
      // The last block alone.
      {"last-block.db", "UPDATE api_calls SET api = 9 WHERE rowid = (SELECT max(rowid) - 10 FROM api_calls)",
       "api_calls has api 9"},
      // A kernel before the last block of API calls: the kernel.
      {"kernel-first.db",
       "UPDATE kernels SET rank = 99 WHERE rowid = 5; "
       "UPDATE api_calls SET api = 9 WHERE rowid = (SELECT max(rowid) - 10 FROM api_calls)",
       "kernels has rank 99"},
      // A row missing from the API calls before a damaged memory event: the
      // API calls' check against the record.
      {"check-first.db",
       "DELETE FROM api_calls WHERE rowid = 131072; UPDATE memory_events SET rank = 99 WHERE id = (SELECT min(id) FROM memory_events)",
       "table api_calls is damaged"},
      // A damaged memory event alone.
      {"memory.db", "UPDATE memory_events SET rank = 99 WHERE id = (SELECT min(id) FROM memory_events)", "memory_events has rank 99"},
  };
  for (const auto& c : cases) {
    const auto path = damaged(c.name, c.sql);
    const auto one = error_of(path, 1);
    EXPECT_NE(one.find(c.expected), std::string::npos) << c.name << ": " << one;
    for (int run = 0; run < 3; ++run) EXPECT_EQ(error_of(path, 2), one) << c.name;
  }
}

}  // namespace
}  // namespace moetrace::analyzer
