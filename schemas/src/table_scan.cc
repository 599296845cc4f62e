#include "moetrace/schema/table_scan.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <string>
#include <vector>

#include "moetrace/schema/ascii.h"
#include "moetrace/schema/error.h"

namespace moetrace::sqlite {
namespace {

std::uint32_t get16(const unsigned char* p) { return static_cast<std::uint32_t>(p[0] << 8 | p[1]); }
std::uint32_t get32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) << 24 | static_cast<std::uint32_t>(p[1]) << 16 |
         static_cast<std::uint32_t>(p[2]) << 8 | p[3];
}

// Bytes readable past the end of every buffer a record is decoded from (a
// page, an overflowing payload), so that an integer field is read with one
// 8-byte load whatever its size.
constexpr std::size_t kPad = 8;

// The 8 bytes at p as a big-endian word (the file's byte order).
std::uint64_t big_endian64(const unsigned char* p) {
  std::uint64_t u;
  std::memcpy(&u, p, 8);
  if constexpr (std::endian::native == std::endian::little) u = __builtin_bswap64(u);
  return u;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// The text lowered, each run of white space one space.
std::string normalised(std::string_view sql) {
  std::string out;
  for (char c : sql) {
    const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
    if (space) {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += ascii_lower(c);
    }
  }
  return out;
}

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// SQLite's rule for a column's affinity from its declared type (datatype3
// section 3.1): REAL where the type names no INT, CHAR, CLOB, TEXT or BLOB and
// names REAL, FLOA or DOUB.
bool real_affinity(std::string_view declared) {
  const auto t = normalised(declared);
  if (contains(t, "int") || contains(t, "char") || contains(t, "clob") || contains(t, "text") || contains(t, "blob") ||
      t.empty())
    return false;
  return contains(t, "real") || contains(t, "floa") || contains(t, "doub");
}

// An integer literal (a default as PRAGMA table_info gives it), else nullopt.
std::optional<std::int64_t> integer_literal(std::string_view s) {
  s = trim(s);
  if (s.size() > 2 && s.front() == '(' && s.back() == ')') s = trim(s.substr(1, s.size() - 2));
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

// The table's b-tree read page by page (pread: a fault per 4 KiB page of a
// mapping costs more than copying a whole 64 KiB page on the machines we
// measured), its leaves in order, each cell's record decoded.
class TableScan::Pages {
 public:
  // A column asked for: its field in the record, or the rowid.
  struct Column {
    static constexpr int kRowid = -1;
    int field = kRowid;
    bool real = false;                 // REAL affinity: an integer stored reads as a real (OP_RealAffinity)
    std::optional<std::int64_t> dflt;  // for a record without the field; nullopt: NULL
  };

  // `index`: the table is WITHOUT ROWID, its rows in an index b-tree.
  Pages(int fd, std::string path, std::string table, std::uint32_t page_size, std::uint32_t usable,
        std::uint32_t pages, std::vector<Column> columns, bool index)
      : index_(index),
        fd_(fd),
        path_(std::move(path)),
        table_(std::move(table)),
        page_size_(page_size),
        usable_(usable),
        pages_(pages),
        columns_(std::move(columns)) {
    for (const auto& c : columns_) fields_ = std::max(fields_, c.field + 1);
    type_.resize(static_cast<std::size_t>(fields_));
    at_.resize(static_cast<std::size_t>(fields_));
  }
  ~Pages() { ::close(fd_); }
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;

  void start(std::uint32_t root, std::optional<Rowids> rowids) {
    if (rowids) {
      first_ = rowids->first;
      last_ = rowids->last;
      if (first_ > last_) return;
    }
    descend(root, rowids.has_value());
  }

  // Where each column of `names` lies in a record of `table`; nullopt where
  // that is not certain (a generated or hidden column, a name that is not a
  // column, a default other than NULL or an integer).
  static std::optional<std::vector<Column>> record_columns(Database& db, std::string_view table,
                                                           const std::vector<std::string>& names, bool without_rowid) {
    // The declared columns, in the table's order.
    struct Declared {
      std::string name, type;
      std::optional<std::string> dflt;
      int pk = 0;
    };
    std::vector<Declared> declared;
    {
      Statement info(db, "SELECT name, type, dflt_value, pk, hidden FROM pragma_table_xinfo(?1) ORDER BY cid");
      info.bind(1, table);
      while (info.step()) {
        if (info.int64(4) != 0) return std::nullopt;  // a generated or hidden column
        Declared d{std::string(info.text(0)), std::string(info.text(1)), std::nullopt,
                   static_cast<int>(info.int64(3))};
        if (!info.is_null(2)) d.dflt = std::string(info.text(2));
        declared.push_back(std::move(d));
      }
    }
    int keys = 0;
    for (const auto& d : declared) keys += d.pk > 0;
    std::vector<int> field(declared.size());  // of each declared column, in the record
    for (std::size_t i = 0, rest = static_cast<std::size_t>(keys); i < declared.size(); ++i) {
      if (!without_rowid) field[i] = static_cast<int>(i);
      else if (declared[i].pk > 0) field[i] = declared[i].pk - 1;
      else field[i] = static_cast<int>(rest++);
    }
    if (without_rowid) {  // the key's positions: 1 .. keys, each once
      std::vector<int> sorted(field.begin(), field.end());
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t i = 0; i < sorted.size(); ++i)
        if (sorted[i] != static_cast<int>(i)) return std::nullopt;
    }
    std::vector<Column> asked;
    for (const auto& name : names) {
      const auto lower = to_ascii_lower(name);
      Column c;
      std::size_t i = 0;
      while (i < declared.size() && to_ascii_lower(declared[i].name) != lower) ++i;
      if (i == declared.size()) {
        if (without_rowid || (lower != "rowid" && lower != "oid" && lower != "_rowid_")) return std::nullopt;
      } else {
        const auto& d = declared[i];
        // INTEGER PRIMARY KEY: the rowid itself, NULL in the record.
        const bool alias = !without_rowid && d.pk == 1 && keys == 1 && to_ascii_lower(d.type) == "integer";
        if (!alias) {
          c.field = field[i];
          c.real = real_affinity(d.type);
          if (d.dflt && d.dflt != "NULL") {
            c.dflt = integer_literal(*d.dflt);
            if (!c.dflt) return std::nullopt;
          }
        }
      }
      asked.push_back(c);
    }
    return asked;
  }

  // The scan of `table` from the pages of `file`: nullptr where the file is
  // not one read so (WAL, not UTF-8, a page size or schema SQLite does not
  // read, a root page of the other kind of b-tree).
  static std::unique_ptr<Pages> open(Database& db, const char* file, std::string_view table, std::uint32_t root,
                                     bool without_rowid, std::vector<Column> asked, std::optional<Rowids> rowids) {
    // The file: rollback journal (not WAL), UTF-8, the page size SQLite reads.
    const int fd = ::open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    unsigned char h[100];
    struct stat st {};
    const bool header_read = ::pread(fd, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) && ::fstat(fd, &st) == 0;
    std::uint32_t page_size = header_read ? get16(h + 16) : 0;
    if (page_size == 1) page_size = 65536;
    const bool readable = header_read && std::memcmp(h, "SQLite format 3", 16) == 0 && h[18] == 1 && h[19] == 1 &&
                          page_size >= 512 && page_size <= 65536 && std::has_single_bit(page_size) &&
                          page_size - h[20] >= 480 && get32(h + 56) == 1 &&
                          db.pragma_int("page_size") == static_cast<std::int64_t>(page_size) &&
                          db.pragma_int("schema_version") == static_cast<std::int64_t>(get32(h + 40));
    const auto pages = readable ? static_cast<std::uint64_t>(st.st_size) / page_size : 0;
    // The root page's type says which b-tree the rows are in: it must be the
    // one the table's definition says.
    unsigned char type = 0;
    const auto type_at = static_cast<off_t>(root - 1) * static_cast<off_t>(page_size) + (root == 1 ? 100 : 0);
    if (!readable || pages > UINT32_MAX || root > pages ||
        ::pread(fd, &type, 1, type_at) != 1 || (type == 0x02 || type == 0x0a) != without_rowid) {
      ::close(fd);
      return nullptr;
    }
    auto p = std::make_unique<Pages>(fd, db.path(), std::string(table), page_size, page_size - h[20],
                                     static_cast<std::uint32_t>(pages), std::move(asked), without_rowid);
    p->start(root, rowids);
    return p;
  }

  bool next(Row& row) {
    for (;;) {
      if (pending_) {  // the child after the interior cell last read
        pending_ = false;
        descend(child(levels_[depth_ - 1]), false);
      }
      if (at_leaf_) {
        auto& leaf = levels_[depth_];
        if (leaf.cell < leaf.cells) {
          if (read_cell(row, leaf, cell_offset(leaf, 8, leaf.cell))) {
            ++leaf.cell;
            return true;
          }
          at_leaf_ = false;  // past the last rowid asked for
          depth_ = 0;
          return false;
        }
        at_leaf_ = false;
      }
      // Up to the next cell of an interior page: of an index b-tree a row
      // itself, read between its two children (in order); of a table b-tree
      // a key only.
      while (depth_ > 0 && levels_[depth_ - 1].cell == levels_[depth_ - 1].cells) --depth_;
      if (depth_ == 0) return false;
      auto& up = levels_[depth_ - 1];
      pending_ = true;
      if (index_) {
        const auto off = cell_offset(up, 12, up.cell);
        ++up.cell;
        read_cell(row, up, off + 4);
        return true;
      }
      ++up.cell;
    }
  }

 private:
  static constexpr std::size_t kMaxDepth = 40;  // SQLite's own bound on a b-tree's depth is 20

  // A page on the way down from the root: of a leaf, `cell` is the next
  // cell to read; of an interior page, the cell whose child is read (`cells`:
  // the right-most child).
  struct Level {
    std::vector<unsigned char> bytes;
    std::uint32_t page = 0, header = 0;
    std::uint32_t cell = 0, cells = 0;
  };

  [[noreturn]] void damaged(std::uint32_t page) const {
    throw Error(path_ + ": the file is damaged or truncated (table " + table_ + ", page " + std::to_string(page) + ")");
  }

  // Page `n` into `out`; the offset of its b-tree header (100 on page 1).
  std::uint32_t read_page(std::uint32_t n, std::vector<unsigned char>& out) {
    if (n == 0 || n > pages_ || ++pages_read_ > pages_) damaged(n);  // a page read twice: a cycle
    out.resize(page_size_ + kPad);
    const auto at = static_cast<off_t>(n - 1) * static_cast<off_t>(page_size_);
    std::size_t got = 0;
    while (got < page_size_) {
      const auto r = ::pread(fd_, out.data() + got, page_size_ - got, at + static_cast<off_t>(got));
      if (r <= 0) damaged(n);
      got += static_cast<std::size_t>(r);
    }
    return n == 1 ? 100 : 0;
  }

  // A varint at p (section 1.6 of the format: up to 9 bytes, 7 bits each but
  // the ninth's 8), within [p, end).
  std::uint64_t varint(const unsigned char*& p, const unsigned char* end, std::uint32_t page) const {
    if (p < end && *p < 0x80) return *p++;  // one byte: the serial types and sizes of most records
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
      if (p >= end) damaged(page);
      const auto b = *p++;
      v = v << 7 | (b & 0x7f);
      if (!(b & 0x80)) return v;
    }
    if (p >= end) damaged(page);
    return v << 8 | *p++;
  }

  // The offset of cell `i` of a page whose cell pointers follow its header
  // after `pointers` bytes (8 on a leaf, 12 on an interior page).
  std::uint32_t cell_offset(const Level& level, std::uint32_t pointers, std::uint32_t i) const {
    const auto off = get16(level.bytes.data() + level.header + pointers + 2 * i);
    if (off < level.header + pointers || off >= usable_) damaged(level.page);
    return off;
  }

  // The first cell of a page whose rowid (a leaf's) or key (an interior
  // page's: the largest rowid under its child) is at or past first_.
  std::uint32_t first_cell_from(const Level& level, bool leaf) const {
    const auto* p = level.bytes.data();
    std::uint32_t lo = 0, hi = level.cells;
    while (lo < hi) {
      const auto mid = (lo + hi) / 2;
      const auto off = cell_offset(level, leaf ? 8 : 12, mid);
      if (!leaf && off + 4 > usable_) damaged(level.page);
      const auto* c = p + off + (leaf ? 0 : 4);  // past an interior cell's child
      if (leaf) varint(c, p + usable_, level.page);  // the payload's size
      if (static_cast<std::int64_t>(varint(c, p + usable_, level.page)) < first_) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  // Reads down from `page` to a leaf: with `seek`, toward the first rowid at
  // or past first_; else the leftmost.
  void descend(std::uint32_t page, bool seek) {
    for (;;) {
      if (depth_ == kMaxDepth) damaged(page);
      auto& level = levels_.size() > depth_ ? levels_[depth_] : levels_.emplace_back();
      level.header = read_page(page, level.bytes);
      level.page = page;
      level.cells = get16(level.bytes.data() + level.header + 3);
      const auto type = level.bytes[level.header];
      const bool leaf = type == (index_ ? 0x0a : 0x0d);           // of an index or a table b-tree
      if (!leaf && type != (index_ ? 0x02 : 0x05)) damaged(page);  // nor an interior page
      if (level.header + (leaf ? 8 : 12) + 2 * level.cells > usable_) damaged(page);
      level.cell = seek ? first_cell_from(level, leaf) : 0;
      if (leaf) {
        at_leaf_ = true;
        return;
      }
      ++depth_;
      page = child(level);
    }
  }

  std::uint32_t child(const Level& level) const {
    const auto* p = level.bytes.data();
    if (level.cell == level.cells) return get32(p + level.header + 8);
    const auto off = cell_offset(level, 12, level.cell);
    if (off + 4 > usable_) damaged(level.page);
    return get32(p + off);
  }

  // The cell at `offset` of a page into `row` (of an index b-tree's
  // interior page: past its child pointer): false where its rowid is past
  // last_.
  bool read_cell(Row& row, const Level& level, std::uint32_t offset) {
    const auto* p = level.bytes.data();
    const auto page = level.page;
    if (offset >= usable_) damaged(page);
    const auto* c = p + offset;
    const auto* end = p + usable_;
    const auto size = varint(c, end, page);
    std::int64_t rowid = 0;
    if (!index_) {
      rowid = static_cast<std::int64_t>(varint(c, end, page));
      if (rowid > last_) return false;
    }
    // The payload: on the page up to a bound, the rest on a chain of
    // overflow pages (section 1.6, "Cell Payload Overflow Pages"; the bound
    // is lower in an index b-tree).
    const std::uint64_t inline_max = index_ ? (usable_ - 12) * 64 / 255 - 23 : usable_ - 35;
    const unsigned char* payload = c;
    if (size > inline_max) {
      if (size > (std::uint64_t{1} << 31)) damaged(page);
      const std::uint64_t min_local = (usable_ - 12) * 32 / 255 - 23;
      const std::uint64_t k = min_local + (size - min_local) % (usable_ - 4);
      const std::uint64_t local = k <= inline_max ? k : min_local;
      if (c + local + 4 > end) damaged(page);
      overflow_.assign(c, c + local);
      std::uint32_t next = get32(c + local);
      while (overflow_.size() < size) {
        read_page(next, chain_);
        const auto n = std::min<std::uint64_t>(size - overflow_.size(), usable_ - 4);
        overflow_.insert(overflow_.end(), chain_.data() + 4, chain_.data() + 4 + n);
        next = get32(chain_.data());
      }
      overflow_.resize(size + kPad);
      payload = overflow_.data();
    } else if (c + size > end) {
      damaged(page);
    }
    decode(row, payload, size, rowid, page);
    return true;
  }

  // The record's fields (section 2.1: a header of serial types, then their
  // values) into the columns asked for.
  void decode(Row& row, const unsigned char* record, std::uint64_t size, std::int64_t rowid, std::uint32_t page) {
    const auto* h = record;
    const auto header_size = varint(h, record + size, page);
    if (header_size > size || record + header_size < h) damaged(page);
    const auto* header_end = record + header_size;
    std::uint64_t at = header_size;
    int fields = 0;
    for (; fields < fields_ && h < header_end; ++fields) {
      const auto type = varint(h, header_end, page);
      const auto length = type >= 12 ? (type - 12) / 2 : kFixedSize[type];
      if (type == 10 || type == 11 || length > size - at) damaged(page);
      type_[static_cast<std::size_t>(fields)] = type;
      at_[static_cast<std::size_t>(fields)] = at;
      at += length;
    }
    row.n_ = static_cast<int>(columns_.size());
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const auto& col = columns_[i];
      row.value_[i] = nullptr;
      auto& t = row.type_[i];
      auto& v = row.int_[i];
      v = 0;
      if (col.field == Column::kRowid) {
        t = Row::kInteger;
        v = rowid;
      } else if (col.field >= fields) {  // written before the column was added
        t = col.dflt ? Row::kInteger : Row::kNull;
        v = col.dflt.value_or(0);
      } else {
        const auto type = type_[static_cast<std::size_t>(col.field)];
        const auto* f = record + at_[static_cast<std::size_t>(col.field)];
        if (type - 1 < 6) {  // a big-endian integer of 1, 2, 3, 4, 6 or 8 bytes, sign-extended (kPad)
          t = Row::kInteger;
          v = static_cast<std::int64_t>(big_endian64(f)) >> (64 - 8 * kFixedSize[type]);
        } else if (type == 0) {
          t = Row::kNull;
        } else if (type == 8 || type == 9) {
          t = Row::kInteger;
          v = static_cast<std::int64_t>(type - 8);
        } else if (type == 7) {
          t = Row::kFloat;
          row.real_[i] = std::bit_cast<double>(big_endian64(f));
        } else {
          t = type & 1 ? Row::kText : Row::kBlob;
          row.bytes_[i] = std::string_view(reinterpret_cast<const char*>(f), static_cast<std::size_t>((type - 12) / 2));
        }
      }
      if (col.real && t == Row::kInteger) {
        t = Row::kFloat;
        row.real_[i] = static_cast<double>(v);
        v = 0;
      }
    }
  }

  // The size of a value of serial type 0..11 (10 and 11 reserved).
  static constexpr std::uint64_t kFixedSize[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0};

  bool index_;
  bool pending_ = false;  // descend into the child after the interior cell read last
  int fd_;
  std::string path_, table_;
  std::uint32_t page_size_, usable_, pages_;
  std::uint64_t pages_read_ = 0;
  std::vector<Column> columns_;
  int fields_ = 0;
  std::int64_t first_ = INT64_MIN, last_ = INT64_MAX;
  std::vector<Level> levels_;
  std::size_t depth_ = 0;  // interior levels above the leaf
  bool at_leaf_ = false;   // levels_[depth_] is the leaf being read
  std::vector<unsigned char> overflow_, chain_;
  std::vector<std::uint64_t> type_, at_;  // of the record's fields [0, fields_)
};

TableScan::TableScan(Database& db, std::string_view table, std::string_view columns, std::optional<Rowids> rowids) {
  std::vector<std::string> names;
  for (std::size_t from = 0; from <= columns.size();) {
    const auto comma = std::min(columns.find(',', from), columns.size());
    names.emplace_back(trim(columns.substr(from, comma - from)));
    from = comma + 1;
  }
  n_ = static_cast<int>(names.size());
  if (n_ > Row::kMaxColumns) throw Error(db.path() + ": a scan of " + std::to_string(n_) + " columns, over the bound");
  const auto direct = [&]() -> std::unique_ptr<Pages> {
    // A read-only connection outside a transaction: the pages of one that
    // writes may wait in its cache, not yet in the file.
    const char* file = sqlite3_db_filename(db.handle(), "main");
    if (file == nullptr || *file == '\0' || sqlite3_db_readonly(db.handle(), "main") != 1 ||
        sqlite3_get_autocommit(db.handle()) == 0)
      return nullptr;
    schema_.emplace(db, "SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?1 COLLATE NOCASE");
    schema_->bind(1, table);
    if (!schema_->step() || schema_->is_null(0) || schema_->is_null(1)) return nullptr;  // the query says why
    const auto root = schema_->int64(0);
    const auto create = normalised(schema_->text(1));
    // A WITHOUT ROWID table's rows lie in an index b-tree, the primary key's
    // columns first (in its order), then the others in the table's.
    const bool without_rowid = contains(create, "without rowid");
    if (root <= 0 || root > UINT32_MAX || (without_rowid && rowids) ||
        (!without_rowid && contains(create, "primary key desc")))  // a key that is not the rowid
      return nullptr;
    auto asked = Pages::record_columns(db, table, names, without_rowid);
    if (!asked) return nullptr;
    return Pages::open(db, file, table, static_cast<std::uint32_t>(root), without_rowid, std::move(*asked), rowids);
  };
  pages_ = direct();
  if (pages_) return;
  schema_.reset();
  query_.emplace(db, "SELECT " + std::string(columns) + " FROM " + std::string(table) +
                         (rowids ? " WHERE rowid BETWEEN ?1 AND ?2" : ""));
  if (rowids) {
    query_->bind(1, rowids->first);
    query_->bind(2, rowids->last);
  }
}

TableScan::~TableScan() = default;

bool TableScan::step(Row& row) {
  if (pages_) return pages_->next(row);
  if (!query_->step()) return false;
  row.fetch(*query_, n_);
  return true;
}

}  // namespace moetrace::sqlite
