#include "moetrace/schema/sqlite.h"

#include <sqlite3.h>

#include <cmath>
#include <cstdlib>
#include <string>

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
  if (n < 0 || n > kMaxColumns) throw Error("a row of " + std::to_string(n) + " columns, over the bound of " +
                                            std::to_string(kMaxColumns));
  n_ = n;
  for (int c = 0; c < n; ++c) {
    sqlite3_value* v = sqlite3_column_value(st.handle(), c);
    const int t = sqlite3_value_type(v);
    value_[c] = v;
    type_[c] = static_cast<unsigned char>(t);
    int_[c] = t == SQLITE_INTEGER ? sqlite3_value_int64(v) : 0;
  }
}

namespace {

// The leading number of a text as SQLite reads one (sqlite3Atoi64: spaces,
// a sign, digits; past them nothing counts; beyond the range, its end).
std::int64_t text_int64(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) ++i;
  bool negative = false;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) negative = s[i++] == '-';
  std::uint64_t v = 0;
  bool over = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    const auto d = static_cast<std::uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) over = true;
    else v = v * 10 + d;
  }
  if (negative) return over || v > std::uint64_t{1} << 63 ? INT64_MIN : static_cast<std::int64_t>(0 - v);
  return over || v > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(v);
}

// A real's int64 as SQLite's doubleToInt64 gives it: clamped to the range.
std::int64_t real_int64(double r) {
  if (std::isnan(r)) return 0;
  if (r <= static_cast<double>(INT64_MIN)) return INT64_MIN;
  if (r >= static_cast<double>(INT64_MAX)) return INT64_MAX;
  return static_cast<std::int64_t>(r);
}

// The leading decimal number of a text (SQLite's sqlite3AtoF reads no hex,
// inf or nan, which strtod would): 0 where there is none.
double text_real(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) ++i;
  const std::size_t begin = i;
  const auto digits = [&] {
    const std::size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > from;
  };
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  bool any = digits();
  if (i < s.size() && s[i] == '.') {
    ++i;
    any = digits() || any;
  }
  if (!any) return 0.0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    std::size_t mark = i++;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (!digits()) i = mark;
  }
  return std::strtod(std::string(s.substr(begin, i - begin)).c_str(), nullptr);
}

}  // namespace

std::int64_t Row::converted(int col) const {
  if (value_[col]) return sqlite3_value_int64(value_[col]);
  return type_[col] == kFloat ? real_int64(real_[col]) : text_int64(bytes_[col]);
}

double Row::real(int col) const {
  if (value_[col]) return sqlite3_value_double(value_[col]);
  switch (type_[col]) {
    case kFloat: return real_[col];
    case kInteger: return static_cast<double>(int_[col]);
    case kText:
    case kBlob: return text_real(bytes_[col]);
    default: return 0.0;
  }
}

std::string_view Row::text(int col) const {
  if (value_[col]) {
    const auto* p = reinterpret_cast<const char*>(sqlite3_value_text(value_[col]));
    return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_value_bytes(value_[col]))) : std::string_view();
  }
  if (type_[col] == kNull) return {};
  if (type_[col] == kText || type_[col] == kBlob) return bytes_[col];
  // A number's text as SQLite writes it (sqlite3VdbeMemStringify).
  if (!text_of_) text_of_ = std::make_unique<std::string[]>(kMaxColumns);
  char buf[64];
  if (type_[col] == kInteger) sqlite3_snprintf(sizeof buf, buf, "%lld", static_cast<sqlite3_int64>(int_[col]));
  else sqlite3_snprintf(sizeof buf, buf, "%!.15g", real_[col]);
  return text_of_[static_cast<std::size_t>(col)] = buf;
}

std::string_view Row::bytes(int col) const {
  if (!value_[col]) return type_[col] == kText || type_[col] == kBlob ? bytes_[col] : std::string_view();
  const void* p = nullptr;
  if (type_[col] == kText) p = sqlite3_value_text(value_[col]);
  else if (type_[col] == kBlob) p = sqlite3_value_blob(value_[col]);
  else return {};
  return p ? std::string_view(static_cast<const char*>(p), static_cast<std::size_t>(sqlite3_value_bytes(value_[col])))
           : std::string_view();
}

}  // namespace moetrace::sqlite
