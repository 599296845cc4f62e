// Reading a trace the GPU tests wrote: one number a query gives.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdint>

namespace moetrace::testing {

// The first column of the first row of `sql`, -1 where there is none.
inline std::int64_t count_rows(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sql;
  std::int64_t n = -1;
  if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return n;
}

}  // namespace moetrace::testing
