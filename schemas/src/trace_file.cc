#include "moetrace/schema/trace_file.h"

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "moetrace/schema/error.h"
#include "moetrace/schema/schema.h"

namespace moetrace::schema {

sqlite::Database open_trace(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw Error(path + ": no such file");
  if (fs::is_directory(status)) throw Error(path + ": is a directory, not a trace file");
  if (!fs::is_regular_file(status)) throw Error(path + ": not a regular file");

  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read the file (permission denied?)");
  std::array<char, 16> header{};
  in.read(header.data(), header.size());
  if (in.gcount() == 0) throw Error(path + ": empty file, not a moetrace trace");
  if (in.gcount() < 16 || std::memcmp(header.data(), "SQLite format 3", 16) != 0) {
    // JSON or gzip: most likely a PyTorch-profiler (Kineto) trace, which the
    // importer converts.
    const auto first = static_cast<unsigned char>(header[0]);
    if (first == '{' || first == '[' || (first == 0x1f && static_cast<unsigned char>(header[1]) == 0x8b))
      throw Error(path + ": a JSON or gzip file, not a moetrace trace; if it is a PyTorch-profiler "
                         "trace, convert it with `moetrace import`");
    throw Error(path + ": not a SQLite database, so not a moetrace trace");
  }

  sqlite::Database db(path, sqlite::Database::Mode::kReadOnly);
  // Pages straight from the page cache instead of a pread into a buffer of
  // SQLite's each (traces use 64 KiB pages: most tables of a small trace are
  // one page, read once).
  db.exec("PRAGMA mmap_size = 1099511627776");
  const auto app_id = db.pragma_int("application_id").value_or(0);
  if (app_id != kApplicationId) {
    if (db.has_table("StringIds") || db.has_table("TARGET_INFO_GPU") ||
        db.has_table("CUPTI_ACTIVITY_KIND_KERNEL"))
      throw Error(path + ": an Nsight Systems export, not a moetrace trace; convert it with `moetrace import`");
    throw Error(path + ": a SQLite database but not a moetrace trace");
  }
  const auto version = db.pragma_int("user_version").value_or(0);
  if (version > kVersion)
    throw Error(path + ": trace schema version " + std::to_string(version) +
                " is newer than this moetrace reads (up to " + std::to_string(kVersion) +
                "); upgrade moetrace");
  if (version < kOldestVersion)
    throw Error(path + ": trace schema version " + std::to_string(version) + " is not supported");
  if (!db.has_table("run") || !db.has_table("op_ranges"))
    throw Error(path + ": a moetrace trace with missing tables (damaged file?)");
  return db;
}

}  // namespace moetrace::schema
