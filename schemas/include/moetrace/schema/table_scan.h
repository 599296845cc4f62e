// The rows of `SELECT columns FROM table [WHERE rowid BETWEEN first AND
// last]`, read straight from the database file's pages where the file and
// the table allow it, else by SQLite.
//
// SQLite spends most of a large trace's load in its virtual machine: a
// column's value costs an OP_Column and an sqlite3_column_value, a row a
// dozen of them. A rowid table's rows lie in its b-tree's leaves in rowid
// order, each a record of varints (the SQLite file format, sqlite.org
// fileformat2.html, sections 1.6 and 2.1); reading them there gives the
// values the query gives, in the order a full scan gives them, at a fraction
// of the cost.
//
// Read from the pages only where that is certain to be what SQLite reads:
// - the main database of a read-only connection outside a transaction (a
//   writer's pages may wait in its cache), a file in rollback-journal mode
//   (not WAL, whose newest pages lie in another file), its text UTF-8;
// - an ordinary table (not virtual, no generated columns), every column
//   asked for a declared column or the rowid, each default NULL or an
//   integer (a record written before an ALTER TABLE ADD COLUMN lacks the
//   column: it reads as its default). A WITHOUT ROWID table's rows come from
//   its index b-tree in key order (the interior cells rows too, read between
//   their children; the key's columns first in each record), as a full scan
//   of it returns them.
// Elsewhere SQLite runs the query. While the scan lasts it holds a read
// transaction (a statement on sqlite_schema left mid-step), so no writer can
// change the file under it. A page that breaks the format throws the error
// SQLite gives a damaged file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "moetrace/schema/sqlite.h"

namespace moetrace::sqlite {

class TableScan {
 public:
  struct Rowids {
    std::int64_t first = 0, last = 0;
  };

  // `columns`: a comma-separated list of the table's column names (at most
  // Row::kMaxColumns), as in a SELECT.
  TableScan(Database& db, std::string_view table, std::string_view columns, std::optional<Rowids> rowids = {});
  ~TableScan();
  TableScan(const TableScan&) = delete;
  TableScan& operator=(const TableScan&) = delete;

  // The next row's columns into `row`: false at the end of the rows.
  bool step(Row& row);
  // Whether the rows come from the pages (false: from SQLite).
  bool direct() const { return pages_ != nullptr; }
  int columns() const { return n_; }

 private:
  class Pages;

  int n_ = 0;
  std::optional<Statement> schema_;  // holds the read transaction
  std::unique_ptr<Pages> pages_;
  std::optional<Statement> query_;  // where SQLite reads the rows
};

}  // namespace moetrace::sqlite
