// Helpers of the importer tests: shared third-party traces (skipped when
// absent), SQL probes of an imported trace, and the one-line error of a call.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "moetrace/importers/import.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/sqlite.h"
#include "text_trace.h"
#include "test_paths.h"

namespace moetrace::testing {

inline std::string shared_data(const std::string& relative) {
  return std::string(MOETRACE_SHARED_DATA) + "/external/" + relative;
}

// Skips the test when the shared trace is absent (a checkout without ../shared/data).
#define MOETRACE_NEED_SHARED(path) \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared data absent: " << (path)

inline std::int64_t sql_int(const std::string& db_path, const std::string& query) {
  sqlite::Database db(db_path, sqlite::Database::Mode::kReadOnly);
  return db.query_int(query).value_or(-1);
}

inline std::string sql_text(const std::string& db_path, const std::string& query) {
  sqlite::Database db(db_path, sqlite::Database::Mode::kReadOnly);
  auto st = db.prepare(query);
  return st.step() ? std::string(st.text(0)) : std::string("(no row)");
}

inline std::string config_value(const std::string& db_path, const std::string& key) {
  return sql_text(db_path, "SELECT value FROM run_config WHERE key = '" + key + "'");
}

// The moetrace::Error message of `f`, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline std::string import_error(const std::vector<std::string>& inputs,
                                importers::Format format = importers::Format::kAuto) {
  importers::ImportOptions options;
  options.format = format;
  return error_of([&] { importers::import_traces(inputs, temp_path("error-out.db"), options); });
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace moetrace::testing
