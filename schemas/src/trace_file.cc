#include "moetrace/schema/trace_file.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "moetrace/schema/error.h"
#include "moetrace/schema/schema.h"

namespace moetrace::schema {

std::string folder_without_traces(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> names;
  std::size_t files = 0, folders = 0;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    (e.is_directory(ec) ? folders : files) += 1;
    names.push_back(e.path().filename().string() + (e.is_directory(ec) ? "/" : ""));
  }
  if (ec) return path + ": a folder that cannot be read (permission denied?)";
  if (names.empty()) return path + ": an empty folder, so no trace to read";
  std::sort(names.begin(), names.end());
  constexpr std::size_t kNamed = 5;
  std::string listed;
  for (std::size_t i = 0; i < names.size() && i < kNamed; ++i) listed += (i ? ", " : "") + names[i];
  if (names.size() > kNamed) listed += ", ...";
  auto count = [](std::size_t n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  return path + ": a folder of " +
         (files && folders ? count(files, "file") + " and " + count(folders, "folder")
                           : files ? count(files, "file") : count(folders, "folder")) +
         " (" + listed + "), with no trace file among them (*.db; else *.json, *.json.gz, *.sqlite)";
}

sqlite::Database open_trace(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw Error(path + ": no such file");
  if (fs::is_directory(status)) throw Error(folder_without_traces(path));
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
    throw Error(path + ": not JSON, not SQLite, not a trace moetrace reads (moetrace traces, Nsight Systems SQLite "
                       "exports, PyTorch-profiler JSON, gzipped or not)");
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
