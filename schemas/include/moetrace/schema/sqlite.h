// Thin RAII wrapper over the SQLite C API, used by the trace writer and the
// trace reader. Every failure throws moetrace::Error naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

struct sqlite3;
struct sqlite3_stmt;
struct sqlite3_value;

namespace moetrace::sqlite {

class Statement;
class Row;

class Database {
 public:
  enum class Mode { kReadOnly, kReadWrite, kCreate };

  Database() = default;
  Database(const std::string& path, Mode mode);
  ~Database();
  Database(Database&& other) noexcept
      : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}
  Database& operator=(Database&& other) noexcept;
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(std::string_view sql);
  Statement prepare(std::string_view sql);
  // Value of "PRAGMA name", or nullopt where it yields no row.
  std::optional<std::int64_t> pragma_int(std::string_view name);
  bool has_table(std::string_view name);
  // Whether `table` has a column `column` (one added within a version).
  bool has_column(std::string_view table, std::string_view column);
  // First column of the first row of a query, or nullopt where there is none.
  std::optional<std::int64_t> query_int(std::string_view sql);
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }
  [[noreturn]] void fail(std::string_view what) const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

class Statement {
 public:
  Statement(Database& db, std::string_view sql);
  ~Statement();
  Statement(Statement&& other) noexcept
      : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Parameters are numbered from 1, as in SQLite.
  void bind(int i, std::int64_t v);
  void bind(int i, double v);
  void bind(int i, std::string_view v);
  // Binds text without copying it: `v` must outlive the statement's next
  // step (the writer binds rows of its pending batch and steps at once).
  void bind_static(int i, std::string_view v);
  void bind_null(int i);
  // Binds NULL where the value is negative (the writer's "absent" sentinel).
  void bind_id(int i, std::int64_t v) {
    if (v < 0) bind_null(i); else bind(i, v);
  }
  // Steps once: true while a row is available.
  bool step();
  // Steps a statement that returns no rows, then resets it for reuse.
  void run();
  void reset();

  std::int64_t int64(int col) const;
  double real(int col) const;
  std::string_view text(int col) const;
  bool is_null(int col) const;
  sqlite3_stmt* handle() const { return stmt_; }
  // int64 where the column is not NULL, else the given default.
  std::int64_t int64_or(int col, std::int64_t dflt) const { return is_null(col) ? dflt : int64(col); }

 private:
  Database* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// Columns [0, n) of a statement's current row, each fetched from SQLite
// once: its value, type and, for an integer, the integer. For loops that
// read (and hash: schema/integrity.h) most columns of many rows, where typed
// reads per column (sqlite3_column_type, then sqlite3_column_int64) cost
// twice the calls. Reads give what the Statement's reads give, converting
// between types as SQLite does; valid until the statement steps again. A
// TableScan (table_scan.h) fills it from the file's pages alike.
class Row {
 public:
  static constexpr int kMaxColumns = 24;
  // SQLite's fundamental types (SQLITE_INTEGER .. SQLITE_NULL).
  enum Type : int { kInteger = 1, kFloat = 2, kText = 3, kBlob = 4, kNull = 5 };

  // Steps `st` and fetches its columns [0, n) (n <= kMaxColumns): false at
  // the end of the rows.
  bool step(Statement& st, int n) {
    if (!st.step()) return false;
    fetch(st, n);
    return true;
  }
  // Its columns [0, n) of the current row; more than kMaxColumns throws.
  void fetch(const Statement& st, int n);

  int columns() const { return n_; }
  Type type(int col) const { return static_cast<Type>(type_[col]); }
  bool is_null(int col) const { return type_[col] == kNull; }
  std::int64_t int64(int col) const { return type_[col] == kInteger || type_[col] == kNull ? int_[col] : converted(col); }
  std::int64_t int64_or(int col, std::int64_t dflt) const { return is_null(col) ? dflt : int64(col); }
  double real(int col) const;
  std::string_view text(int col) const;
  // A text's or a blob's bytes as stored (empty for other types).
  std::string_view bytes(int col) const;

 private:
  friend class TableScan;
  std::int64_t converted(int col) const;  // the int64 of a real, text or blob

  int n_ = 0;
  unsigned char type_[kMaxColumns] = {};
  std::int64_t int_[kMaxColumns] = {};
  sqlite3_value* value_[kMaxColumns] = {};  // from SQLite; nullptr: from a TableScan, in the fields below
  double real_[kMaxColumns] = {};
  std::string_view bytes_[kMaxColumns];
  mutable std::unique_ptr<std::string[]> text_of_;  // a number's text, where one is asked for
};

}  // namespace moetrace::sqlite
