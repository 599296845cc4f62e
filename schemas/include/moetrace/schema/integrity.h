// The integrity record of a trace: per table, the number of rows the writer
// stored and an order-independent digest of their values (the sum of a
// 64-bit hash of each row), kept in `meta` under the key `integrity`
// (schemas/README.md, "Integrity record"). The writer computes it while it
// binds rows (append-only tables) or by reading the table back at close
// (tables whose rows may be replaced); the loader hashes the rows it reads
// and refuses a table whose count or digest differs.
//
// A row's hash depends on each column's value, its SQLite type (integer,
// real, text, NULL) and its position in the column list, not on the order in
// which the columns are hashed: writer and reader must use the same column
// positions (the writer's INSERT column lists).
#pragma once

#include <bit>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "moetrace/schema/sqlite.h"

namespace moetrace::schema {

// meta key of the record.
inline constexpr std::string_view kIntegrityKey = "integrity";
// Columns of the run row that the digest "run" covers, as the loader selects
// them.
inline constexpr std::string_view kRunDigestColumns =
    "name, backend, variant, simulated, world_size, host, moetrace_version, created_unix_s, start_ns, "
    "end_ns, config_json, dropped_records";
inline constexpr int kRunDigestColumnCount = 12;
// The meta rows that the digest "meta" covers.
inline constexpr std::string_view kMetaDigestQuery =
    "SELECT key, value FROM meta WHERE key <> 'integrity'";
// Pseudo-table "op_links": per op_ranges row, the hash of (id, deps, buffers)
// at positions 0, 1, 2 (the writer updates these columns after the row is
// written); the digest "op_ranges" covers its columns before them, the
// writer's positions 0 .. kOpLinkColumn - 1.
inline constexpr int kOpLinkColumn = 18;

// A row's hash, column by column. Inline but for texts: the loader hashes
// every row it reads (a call per column was a tenth of a large trace's load).
class RowHash {
 public:
  void add_int(int column, std::int64_t v) { sum_ += term(column, kInt, static_cast<std::uint64_t>(v)); }
  void add_real(int column, double v) { sum_ += term(column, kReal, std::bit_cast<std::uint64_t>(v)); }
  void add_text(int column, std::string_view v) { sum_ += term(column, kText, hash_bytes(v, kText)); }
  void add_null(int column) { sum_ += term(column, kNull, 0); }
  // Column `column` of a fetched row (sqlite::Row), by its SQLite type, at
  // position `position`.
  void add_column(const sqlite::Row& row, int column, int position) {
    switch (row.type(column)) {
      case sqlite::Row::kInteger: add_int(position, row.int64(column)); break;
      case sqlite::Row::kFloat: add_real(position, row.real(column)); break;
      case sqlite::Row::kText: add_text(position, row.bytes(column)); break;
      case sqlite::Row::kBlob: add_blob(position, row.bytes(column)); break;
      default: add_null(position); break;
    }
  }
  std::uint64_t value() const { return mix64(sum_); }

 private:
  enum Tag : std::uint64_t { kInt = 1, kReal = 2, kText = 3, kBlob = 4, kNull = 5 };

  // splitmix64's finalizer: a bijection of 64-bit words, so a value that
  // differs in any bit gives a different word.
  static constexpr std::uint64_t mix64(std::uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
  }
  // A column's term: one mix of its value (or its text's hash) and a salt of
  // its position and type, a bijection of the value for a given salt.
  static constexpr std::uint64_t term(int column, std::uint64_t tag, std::uint64_t value) {
    return mix64(value ^
                 ((static_cast<std::uint64_t>(column) + 1) * 0xd6e8feb86659fd93ULL + tag * 0x9e3779b97f4a7c15ULL));
  }
  static std::uint64_t hash_bytes(std::string_view s, std::uint64_t tag);
  void add_blob(int column, std::string_view v) { sum_ += term(column, kBlob, hash_bytes(v, kBlob)); }

  std::uint64_t sum_ = 0;
};

struct TableDigest {
  std::int64_t rows = 0;
  std::uint64_t sum = 0;
  void add(std::uint64_t row_hash) { ++rows; sum += row_hash; }
  void remove(std::uint64_t row_hash) { --rows; sum -= row_hash; }
  // Hashes columns [0, columns) of the statement's current row and adds it.
  void add_row(const sqlite::Statement& st, int columns);
  void add_row(const sqlite::Row& row, int columns);
  bool operator==(const TableDigest&) const = default;
};

using IntegrityRecord = std::map<std::string, TableDigest, std::less<>>;

// "v1 table=rows:hex table=rows:hex ..." and back; nullopt: not a record.
std::string encode_integrity(const IntegrityRecord& record);
std::optional<IntegrityRecord> parse_integrity(std::string_view text);

}  // namespace moetrace::schema
