#include "moetrace/schema/integrity.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>

#include "moetrace/schema/sqlite.h"

namespace moetrace::schema {

std::uint64_t RowHash::hash_bytes(std::string_view s, std::uint64_t tag) {
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

void TableDigest::add_row(const sqlite::Statement& st, int columns) {
  sqlite::Row row;
  row.fetch(st, columns);
  add_row(row, columns);
}

void TableDigest::add_row(const sqlite::Row& row, int columns) {
  RowHash h;
  for (int c = 0; c < columns; ++c) h.add_column(row, c, c);
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
