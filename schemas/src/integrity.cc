#include "moetrace/schema/integrity.h"

#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <cstring>

#include "moetrace/schema/sqlite.h"

namespace moetrace::schema {
namespace {

// splitmix64's finalizer: a bijection of 64-bit words, so a value that
// differs in any bit gives a different word.
constexpr std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

enum Tag : std::uint64_t { kInt = 1, kReal = 2, kText = 3, kBlob = 4, kNull = 5 };

std::uint64_t hash_bytes(std::string_view s, std::uint64_t tag) {
  std::uint64_t h = mix64(tag * 0x9e3779b97f4a7c15ULL + s.size());
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = mix64(h ^ w);
  }
  if (i < s.size()) {
    std::uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = mix64(h ^ w);
  }
  return h;
}

// A column's term: its value's hash moved by its position (a bijection of the
// value hash for a given position).
std::uint64_t term(int column, std::uint64_t value_hash) {
  return mix64(value_hash ^ (static_cast<std::uint64_t>(column) + 1) * 0xd6e8feb86659fd93ULL);
}

}  // namespace

void RowHash::add_int(int column, std::int64_t v) {
  sum_ += term(column, mix64(static_cast<std::uint64_t>(v) + kInt));
}
void RowHash::add_real(int column, double v) {
  sum_ += term(column, mix64(std::bit_cast<std::uint64_t>(v) ^ (kReal << 60)));
}
void RowHash::add_text(int column, std::string_view v) { sum_ += term(column, hash_bytes(v, kText)); }
void RowHash::add_null(int column) { sum_ += term(column, mix64(kNull << 56)); }

void RowHash::add_column(const sqlite::Statement& st, int column, int position) {
  using T = sqlite::Statement::Type;
  switch (st.type(column)) {
    case T::kInteger: add_int(position, st.int64(column)); break;
    case T::kReal: add_real(position, st.real(column)); break;
    case T::kText: add_text(position, st.text(column)); break;
    case T::kBlob: sum_ += term(position, hash_bytes(st.blob(column), kBlob)); break;
    case T::kNull: add_null(position); break;
  }
}

std::uint64_t RowHash::value() const { return mix64(sum_); }

void TableDigest::add_row(const sqlite::Statement& st, int columns) {
  RowHash h;
  for (int c = 0; c < columns; ++c) h.add_column(st, c, c);
  add(h.value());
}

std::string encode_integrity(const IntegrityRecord& record) {
  std::string out = "v1";
  for (const auto& [table, d] : record) out += fmt::format(" {}={}:{:016x}", table, d.rows, d.sum);
  return out;
}

std::optional<IntegrityRecord> parse_integrity(std::string_view text) {
  if (!text.starts_with("v1")) return std::nullopt;
  IntegrityRecord record;
  text.remove_prefix(2);
  while (!text.empty()) {
    if (text.front() != ' ') return std::nullopt;
    text.remove_prefix(1);
    const auto end = std::min(text.find(' '), text.size());
    const auto item = text.substr(0, end);
    text.remove_prefix(end);
    const auto eq = item.find('='), colon = item.find(':');
    if (eq == std::string_view::npos || colon == std::string_view::npos || colon < eq || eq == 0) return std::nullopt;
    TableDigest d;
    const auto rows = item.substr(eq + 1, colon - eq - 1), sum = item.substr(colon + 1);
    if (std::from_chars(rows.data(), rows.data() + rows.size(), d.rows).ptr != rows.data() + rows.size() ||
        d.rows < 0 || sum.size() != 16 ||
        std::from_chars(sum.data(), sum.data() + sum.size(), d.sum, 16).ptr != sum.data() + sum.size())
      return std::nullopt;
    if (!record.emplace(std::string(item.substr(0, eq)), d).second) return std::nullopt;
  }
  return record;
}

}  // namespace moetrace::schema
