#include "moetrace/schema/sqlite.h"

#include <sqlite3.h>

#include "moetrace/schema/error.h"

namespace moetrace::sqlite {

Database::Database(const std::string& path, Mode mode) : path_(path) {
  // SQLite counts every allocation under a global mutex unless told not to
  // (before its first use); nothing here reads those counters.
  static const bool configured = [] { return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) == SQLITE_OK; }();
  (void)configured;
  int flags = SQLITE_OPEN_NOMUTEX;
  switch (mode) {
    case Mode::kReadOnly: flags |= SQLITE_OPEN_READONLY; break;
    case Mode::kReadWrite: flags |= SQLITE_OPEN_READWRITE; break;
    case Mode::kCreate: flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE; break;
  }
  if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(path + ": cannot open: " + msg);
  }
  sqlite3_busy_timeout(db_, 5000);
}

Database::~Database() {
  if (db_) sqlite3_close_v2(db_);
}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

void Database::fail(std::string_view what) const {
  if (db_) {
    int code = sqlite3_errcode(db_) & 0xff;
    if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB)
      throw Error(path_ + ": the file is damaged or truncated (SQLite: " + sqlite3_errmsg(db_) + ")");
    if (code == SQLITE_FULL) throw Error(path_ + ": disk full while writing");
  }
  std::string msg = path_ + ": " + std::string(what);
  if (db_) msg += std::string(": ") + sqlite3_errmsg(db_);
  throw Error(msg);
}

void Database::exec(std::string_view sql) {
  std::string s(sql);
  char* err = nullptr;
  if (sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    fail(msg);
  }
}

Statement Database::prepare(std::string_view sql) { return Statement(*this, sql); }

std::optional<std::int64_t> Database::pragma_int(std::string_view name) {
  return query_int("PRAGMA " + std::string(name));
}

std::optional<std::int64_t> Database::query_int(std::string_view sql) {
  Statement st(*this, sql);
  if (!st.step() || st.is_null(0)) return std::nullopt;
  return st.int64(0);
}

bool Database::has_table(std::string_view name) {
  Statement st(*this, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1");
  st.bind(1, name);
  return st.step();
}

bool Database::has_column(std::string_view table, std::string_view column) {
  Statement st(*this, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2");
  st.bind(1, table);
  st.bind(2, column);
  return st.step();
}

Statement::Statement(Database& db, std::string_view sql) : db_(&db) {
  if (sqlite3_prepare_v2(db.handle(), sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) !=
      SQLITE_OK)
    db.fail("cannot prepare \"" + std::string(sql.substr(0, 60)) + "\"");
}

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

void Statement::bind(int i, std::int64_t v) {
  if (sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK) db_->fail("bind");
}
void Statement::bind(int i, double v) {
  if (sqlite3_bind_double(stmt_, i, v) != SQLITE_OK) db_->fail("bind");
}
void Statement::bind(int i, std::string_view v) {
  if (sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) !=
      SQLITE_OK)
    db_->fail("bind");
}
void Statement::bind_static(int i, std::string_view v) {
  if (sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC) != SQLITE_OK)
    db_->fail("bind");
}
void Statement::bind_null(int i) {
  if (sqlite3_bind_null(stmt_, i) != SQLITE_OK) db_->fail("bind");
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_->fail("query failed");
}

void Statement::run() {
  int rc = sqlite3_step(stmt_);
  sqlite3_reset(stmt_);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) db_->fail("write failed");
}

void Statement::reset() { sqlite3_reset(stmt_); }

std::int64_t Statement::int64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::real(int col) const { return sqlite3_column_double(stmt_, col); }
std::string_view Statement::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col)))
           : std::string_view();
}
bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

static_assert(Row::kInteger == SQLITE_INTEGER && Row::kFloat == SQLITE_FLOAT && Row::kText == SQLITE_TEXT &&
              Row::kBlob == SQLITE_BLOB && Row::kNull == SQLITE_NULL);

void Row::fetch(const Statement& st, int n) {
  n_ = n;
  for (int c = 0; c < n; ++c) {
    sqlite3_value* v = sqlite3_column_value(st.handle(), c);
    const int t = sqlite3_value_type(v);
    value_[c] = v;
    type_[c] = static_cast<unsigned char>(t);
    int_[c] = t == SQLITE_INTEGER ? sqlite3_value_int64(v) : 0;
  }
}

std::int64_t Row::converted(int col) const { return sqlite3_value_int64(value_[col]); }
double Row::real(int col) const { return sqlite3_value_double(value_[col]); }
std::string_view Row::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_value_text(value_[col]));
  return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_value_bytes(value_[col]))) : std::string_view();
}

}  // namespace moetrace::sqlite
