// One Nsight Systems SQLite export, opened read-only, and the prescan of its
// processes (which become ranks) before any event is read.
//
// Tables exist only when they hold data and columns come and go between
// versions: every query is built from the columns the file has.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "../common/trace_builder.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/sqlite.h"

namespace moetrace::importers::nsys {

constexpr const char* kKernel = "CUPTI_ACTIVITY_KIND_KERNEL";
constexpr const char* kMemcpy = "CUPTI_ACTIVITY_KIND_MEMCPY";
constexpr const char* kMemset = "CUPTI_ACTIVITY_KIND_MEMSET";
constexpr const char* kRuntime = "CUPTI_ACTIVITY_KIND_RUNTIME";
constexpr const char* kSync = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";
constexpr const char* kOverhead = "CUPTI_ACTIVITY_KIND_OVERHEAD";
constexpr const char* kNvtx = "NVTX_EVENTS";
constexpr const char* kMemory = "CUDA_GPU_MEMORY_USAGE_EVENTS";

// NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE).
constexpr int kNvtxCategory = 33;
constexpr int kNvtxMark = 34;
constexpr int kNvtxThread = 39;
constexpr int kNvtxPushPop = 59;
constexpr int kNvtxStartEnd = 60;
constexpr int kNvtxDomainCreate = 75;
constexpr int kNvtxDomainDestroy = 76;

// ENUM_NSYS_EVENT_CLASS of CUPTI_ACTIVITY_KIND_RUNTIME rows.
constexpr int kClassRuntime = 0;
constexpr int kClassDriver = 1;
constexpr int kClassBacktrace = 67;

constexpr std::int64_t pid_of(std::int64_t global_id) { return (global_id >> 24) & 0xFFFFFF; }
constexpr std::int64_t tid_of(std::int64_t global_tid) { return global_tid & 0xFFFFFF; }

// One export, opened read-only, with what the prescan learnt about it.
class ExportFile {
 public:
  explicit ExportFile(const std::string& path) : path_(path), label_(file_name(path)) {
    {
      std::ifstream in(path, std::ios::binary);
      std::array<char, 16> header{};
      in.read(header.data(), header.size());
      if (in.gcount() < 16 || std::memcmp(header.data(), "SQLite format 3", 16) != 0)
        throw Error(path + ": not a SQLite database, so not an Nsight Systems export");
    }
    db_ = sqlite::Database(path, sqlite::Database::Mode::kReadOnly);
    if (db_.pragma_int("application_id").value_or(0) == schema::kApplicationId)
      throw Error(path + ": already a moetrace trace; nothing to import");
    {
      auto st = db_.prepare("SELECT name FROM sqlite_master WHERE type = 'table'");
      while (st.step()) tables_.emplace(std::string(st.text(0)), std::set<std::string>{});
    }
    for (auto& [table, cols] : tables_) {
      auto st = db_.prepare("SELECT name FROM pragma_table_info(?1)");
      st.bind(1, std::string_view(table));
      while (st.step()) cols.emplace(st.text(0));
    }
    read_metadata();
    check_schema();
  }

  const std::string& path() const { return path_; }
  const std::string& label() const { return label_; }
  sqlite::Database& db() { return db_; }
  const std::string& schema_version() const { return schema_version_; }
  const std::string& product_version() const { return product_version_; }
  const std::string& host() const { return host_; }
  std::optional<std::int64_t> session_start_utc_ns() const { return session_start_; }

  bool has(const std::string& table) const { return tables_.count(table) != 0; }
  bool has(const std::string& table, const std::string& column) const {
    auto it = tables_.find(table);
    return it != tables_.end() && it->second.count(column) != 0;
  }
  // The column, or NULL where this export lacks it; quoted ("end" is an SQL keyword).
  std::string col(const std::string& table, const std::string& column) const {
    return has(table, column) ? "\"" + column + "\"" : "NULL";
  }

  std::string_view str(std::int64_t id) {
    if (!strings_loaded_) load_strings();
    auto it = strings_.find(id);
    return it == strings_.end() ? std::string_view() : std::string_view(it->second);
  }
  std::int64_t rows(const std::string& table) {
    return has(table) ? db_.query_int("SELECT count(*) FROM \"" + table + "\"").value_or(0) : 0;
  }

 private:
  void read_metadata() {
    for (const char* meta : {"META_DATA_EXPORT", "EXPORT_META_DATA"}) {
      if (!has(meta, "name") || !has(meta, "value")) continue;
      auto st = db_.prepare(std::string("SELECT name, value FROM ") + meta);
      while (st.step()) {
        if (st.text(0) == "EXPORT_SCHEMA_VERSION") schema_version_ = st.text(1);
        if (st.text(0) == "EXPORT_PRODUCT_VERSION") product_version_ = st.text(1);
      }
    }
    if (has("TARGET_INFO_SYSTEM_ENV", "name") && has("TARGET_INFO_SYSTEM_ENV", "value")) {
      auto st = db_.prepare("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'");
      if (st.step()) host_ = st.text(0);
    }
    if (has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs")) {
      auto st = db_.prepare("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME");
      if (st.step() && !st.is_null(0)) session_start_ = st.int64(0);
    }
  }

  void check_schema() {
    const bool nsys_tables = has("StringIds") || has(kKernel) || has(kRuntime) || has(kNvtx) ||
                             has("TARGET_INFO_GPU");
    if (schema_version_.empty() && !nsys_tables)
      throw Error(path_ + ": a SQLite database but not an Nsight Systems export (no StringIds, "
                          "CUPTI or NVTX tables)");
    if (!schema_version_.empty()) {
      const int major = std::atoi(schema_version_.c_str());
      if (major != 2 && major != 3)
        throw Error(path_ + ": Nsight Systems export schema " + schema_version_ +
                    " is not one this importer reads (2.x and 3.x); export with a supported nsys");
    }
    const std::string version = schema_version_.empty() ? "unknown" : schema_version_;
    auto need = [&](const char* table, std::initializer_list<const char*> columns) {
      if (!has(table)) return;
      for (const char* c : columns)
        if (!has(table, c))
          throw Error(path_ + ": table " + table + " lacks column " + c +
                      "; incompatible Nsight Systems export (schema " + version + ")");
    };
    need(kKernel, {"start", "end", "streamId"});
    need(kMemcpy, {"start", "end", "streamId", "bytes", "copyKind"});
    need(kMemset, {"start", "end", "streamId", "bytes"});
    need(kRuntime, {"start", "end", "nameId"});
    need(kSync, {"start", "end"});
    need(kOverhead, {"start", "end"});
    need(kNvtx, {"start", "eventType"});
    need(kMemory, {"start", "address", "bytes", "memoryOperationType"});
    need("StringIds", {"id", "value"});
    if (has(kKernel) && !has(kKernel, "demangledName") && !has(kKernel, "shortName") &&
        !has(kKernel, "mangledName"))
      throw Error(path_ + ": table " + std::string(kKernel) +
                  " has no kernel name column; incompatible Nsight Systems export (schema " +
                  version + ")");
    if ((has(kKernel) || has(kRuntime)) && !has("StringIds"))
      throw Error(path_ + ": no StringIds table, so kernel and API names cannot be read; "
                          "incompatible Nsight Systems export (schema " + version + ")");
  }

  void load_strings() {
    strings_loaded_ = true;
    if (!has("StringIds")) return;
    auto st = db_.prepare("SELECT id, value FROM StringIds");
    while (st.step()) strings_.emplace(st.int64(0), std::string(st.text(1)));
  }

  std::string path_, label_;
  sqlite::Database db_;
  std::map<std::string, std::set<std::string>> tables_;
  std::string schema_version_, product_version_, host_;
  std::optional<std::int64_t> session_start_;
  std::unordered_map<std::int64_t, std::string> strings_;
  bool strings_loaded_ = false;
};

// What the prescan of all files decides before any event is read: the
// processes that become ranks, their rank numbers, and each file's clock offset.
struct ProcessInfo {
  std::size_t file = 0;
  std::int64_t pid = 0;
  std::string name;
  std::optional<int> mpi_rank;  // from an "MPI Rank N" thread name
};
std::set<std::int64_t> cuda_pids(ExportFile& f);
// Processes with NVTX ranges (push/pop or start/end).
std::set<std::int64_t> nvtx_pids(ExportFile& f);
// MPI tracing in nsys names the rank's main thread "MPI Rank N" (ThreadNames,
// and NVTX thread-name events); that is the only rank number an export holds.
std::map<std::int64_t, int> mpi_rank_names(ExportFile& f);
std::map<std::int64_t, std::string> process_names(ExportFile& f);

}  // namespace moetrace::importers::nsys
