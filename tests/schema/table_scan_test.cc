// sqlite::TableScan (table_scan.h): the rows it reads from the file's pages
// are the rows SQLite's own query returns, value, type and conversion alike,
// on files SQLite writes (every serial type, overflow chains, reserved bytes,
// page sizes 512 to 65536, deep trees, columns added later); where it cannot
// be certain it lets SQLite read; a damaged page is an error, never a crash.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "moetrace/schema/error.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/table_scan.h"

namespace moetrace::sqlite {
namespace {

// A path in a folder of this process's own, the file there removed.
std::string fresh(const std::string& name) {
  static const auto dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("moetrace-table-scan-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  const auto path = (dir / name).string();
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(path + suffix);
  return path;
}

// A fresh file `name`, written by `fill` on a connection that creates it (in
// pages of `page_size` bytes where given), then closed.
std::string written(const std::string& name, int page_size, const std::function<void(Database&)>& fill) {
  const auto path = fresh(name);
  Database db(path, Database::Mode::kCreate);
  if (page_size > 0) db.exec("PRAGMA page_size=" + std::to_string(page_size));
  fill(db);
  return path;
}

// Every row of both, column by column: type, bytes, and each typed read
// (int64, real, text), which convert between types.
void expect_same_rows(TableScan& scan, Statement& query, int n, const std::string& what) {
  Row a, b;
  std::int64_t rows = 0;
  for (;;) {
    const bool more = scan.step(a);
    ASSERT_EQ(more, b.step(query, n)) << what << ": row " << rows;
    if (!more) break;
    for (int c = 0; c < n; ++c) {
      SCOPED_TRACE(what + ": row " + std::to_string(rows) + ", column " + std::to_string(c));
      ASSERT_EQ(a.type(c), b.type(c));
      EXPECT_EQ(a.is_null(c), b.is_null(c));
      EXPECT_EQ(a.int64(c), b.int64(c));
      const double ra = a.real(c), rb = b.real(c);
      EXPECT_TRUE(ra == rb || (ra != ra && rb != rb)) << ra << " vs " << rb;
      EXPECT_EQ(a.bytes(c), b.bytes(c));
      EXPECT_EQ(a.text(c), b.text(c));
    }
    ++rows;
  }
}

void expect_same_table(Database& db, const std::string& table, const std::string& columns, int n,
                       bool direct = true) {
  TableScan scan(db, table, columns);
  EXPECT_EQ(scan.direct(), direct) << table;
  auto query = db.prepare("SELECT " + columns + " FROM " + table);
  expect_same_rows(scan, query, n, table);
}

// A table with a value of every serial type (SQLite's file format, section
// 2.1), in columns of each affinity, and texts and blobs long enough for
// chains of overflow pages.
void fill_every_type(Database& db) {
  db.exec("CREATE TABLE Values_ (ID integer primary key, i INTEGER, r REAL, t TEXT, b BLOB, n, d DOUBLE PRECISION)");
  auto ins = db.prepare("INSERT INTO Values_ (i, r, t, b, n, d) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  const std::int64_t ints[] = {0,          1,           -1,          127,        -128,       255,
                               32767,      -32768,      8388607,     -8388608,   2147483647, -2147483648LL,
                               (1LL << 47) - 1, -(1LL << 47), INT64_MAX, INT64_MIN, 1LL << 40, 42};
  const double reals[] = {1.5, -0.0, 3.0, 1e300, -2.5e-300, 0.1, 12345678901234.0};
  std::mt19937 rng(7);
  int row = 0;
  for (auto i : ints) {
    ins.bind(1, i);
    ins.bind(2, reals[row % 7]);  // 3.0 and 12345678901234.0 are stored as integers (REAL affinity)
    std::string text(static_cast<std::size_t>(row * row * 97 % 70000), 'x');
    for (auto& ch : text) ch = static_cast<char>('a' + rng() % 26);
    ins.bind(3, text);
    sqlite3_bind_blob(ins.handle(), 4, text.data(), static_cast<int>(text.size() / 2), SQLITE_TRANSIENT);
    if (row % 3 == 0) ins.bind_null(5);
    else if (row % 3 == 1) ins.bind(5, "12.5e1 apples");
    else ins.bind(5, 2.75);
    ins.bind(6, i);  // an integer in a REAL-affinity column of another spelling
    ins.run();
    ++row;
  }
  // Values in columns of another affinity: text and a real in the INTEGER
  // column, a text number in the REAL one, an empty text and blob.
  db.exec("INSERT INTO Values_ (i, r, t, b, n) VALUES ('  -17xyz', '8.25', '', x'', 99)");
  db.exec("INSERT INTO Values_ (i, r, t, b, n) VALUES (2.5e30, NULL, NULL, NULL, -3.75)");
  db.exec("INSERT INTO Values_ (i, r, t, b, n) VALUES ('99999999999999999999', 'abc', 7, 1.25, x'00ff')");
}

TEST(TableScan, RowsAsSqliteReadsThemAtEveryPageSize) {
  for (int page_size : {512, 1024, 4096, 65536}) {
    for (int reserved : {0, 32}) {
      const auto path = fresh("table_scan_types_" + std::to_string(page_size) + "_" + std::to_string(reserved) + ".db");
      {
        Database db(path, Database::Mode::kCreate);
        db.exec("PRAGMA page_size=" + std::to_string(page_size));
        int r = reserved;
        ASSERT_EQ(sqlite3_file_control(db.handle(), "main", SQLITE_FCNTL_RESERVE_BYTES, &r), SQLITE_OK);
        fill_every_type(db);
      }
      Database db(path, Database::Mode::kReadOnly);
      ASSERT_EQ(db.pragma_int("page_size"), page_size);
      SCOPED_TRACE("page size " + std::to_string(page_size) + ", reserved " + std::to_string(reserved));
      expect_same_table(db, "Values_", "id, i, r, t, b, n, d", 7);
      expect_same_table(db, "values_", "N, rowid, t, ID, _rowid_, oid, r", 7);  // names in any case, the rowid's aliases
    }
  }
}

TEST(TableScan, RowidRangesOverADeepTree) {
  const auto path = written("table_scan_ranges.db", 512, [](Database& db) {
    db.exec("CREATE TABLE calls (id INTEGER PRIMARY KEY, rank INTEGER NOT NULL, name TEXT)");
    db.exec("BEGIN");
    auto ins = db.prepare("INSERT INTO calls (id, rank, name) VALUES (?1, ?2, ?3)");
    // Rowids with gaps (every third left out past 1000), and a few far off.
    for (std::int64_t id = 1; id <= 30000; ++id) {
      if (id > 1000 && id % 3 == 0) continue;
      ins.bind(1, id);
      ins.bind(2, id % 8);
      ins.bind(3, "cudaLaunchKernel_" + std::to_string(id * 7919 % 1000));
      ins.run();
    }
    for (std::int64_t id : {std::int64_t{-5}, std::int64_t{1} << 40, INT64_MAX}) {
      ins.bind(1, id);
      ins.bind(2, std::int64_t{0});
      ins.bind(3, "far");
      ins.run();
    }
    db.exec("COMMIT");
  });
  Database db(path, Database::Mode::kReadOnly);
  ASSERT_GE(db.query_int("SELECT count(*) FROM calls"), 20000);
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges = {
      {1, 30000}, {INT64_MIN, INT64_MAX}, {0, 0}, {-5, -5}, {999, 1004}, {30001, 40000}, {5, 4}, {29990, INT64_MAX}};
  std::mt19937_64 rng(11);
  for (int i = 0; i < 40; ++i) {
    const auto a = static_cast<std::int64_t>(rng() % 32000), b = a + static_cast<std::int64_t>(rng() % 5000);
    ranges.emplace_back(a, b);
  }
  for (const auto& [first, last] : ranges) {
    TableScan scan(db, "calls", "id, rank, name", TableScan::Rowids{first, last});
    ASSERT_TRUE(scan.direct());
    auto query = db.prepare("SELECT id, rank, name FROM calls WHERE rowid BETWEEN ?1 AND ?2");
    query.bind(1, first);
    query.bind(2, last);
    expect_same_rows(scan, query, 3, "rowids " + std::to_string(first) + ".." + std::to_string(last));
  }
}

TEST(TableScan, ColumnsAddedLaterReadAsTheirDefault) {
  const auto path = written("table_scan_added.db", 0, [](Database& db) {
    db.exec("CREATE TABLE sync_events (id INTEGER PRIMARY KEY, rank INTEGER NOT NULL)");
    db.exec("INSERT INTO sync_events (rank) VALUES (1), (2), (3)");
    db.exec("ALTER TABLE sync_events ADD COLUMN wait_stream_id INTEGER");
    db.exec("ALTER TABLE sync_events ADD COLUMN kind INTEGER NOT NULL DEFAULT -7");
    db.exec("ALTER TABLE sync_events ADD COLUMN weight REAL DEFAULT 2");
    db.exec("INSERT INTO sync_events (rank, wait_stream_id, kind, weight) VALUES (4, 9, 1, 0.5), (5, NULL, 2, NULL)");
    db.exec("ALTER TABLE sync_events ADD COLUMN label TEXT DEFAULT 'none'");
  });
  Database db(path, Database::Mode::kReadOnly);
  expect_same_table(db, "sync_events", "id, rank, wait_stream_id, kind, weight", 5);
  // A default that is not an integer: SQLite reads the rows.
  expect_same_table(db, "sync_events", "rank, label", 2, false);
}

// WITHOUT ROWID tables: rows in an index b-tree, in key order, interior
// cells rows themselves (read between their children), the key's columns
// first in the record.
TEST(TableScan, WithoutRowidTablesInKeyOrder) {
  const auto path = written("table_scan_without_rowid.db", 512, [](Database& db) {
    db.exec("CREATE TABLE events (id INTEGER NOT NULL, rank INTEGER NOT NULL, ts_ns INTEGER NOT NULL, "
            "bytes INTEGER, share REAL, tag TEXT, PRIMARY KEY (rank, ts_ns, id)) WITHOUT ROWID");
    db.exec("CREATE TABLE names (name TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID");
    db.exec("CREATE TABLE falling (a INTEGER, b TEXT, c REAL, PRIMARY KEY (a DESC, b)) WITHOUT ROWID");
    db.exec("BEGIN");
    auto ev = db.prepare("INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    auto nm = db.prepare("INSERT INTO names VALUES (?1, ?2)");
    auto fa = db.prepare("INSERT INTO falling VALUES (?1, ?2, ?3)");
    std::mt19937_64 rng(5);
    for (std::int64_t i = 0; i < 12000; ++i) {
      ev.bind(1, i);
      ev.bind(2, static_cast<std::int64_t>(rng() % 8));
      ev.bind(3, static_cast<std::int64_t>(rng() % 1000000));
      if (i % 5) ev.bind(4, static_cast<std::int64_t>(rng() % (std::int64_t{1} << 40)) - (std::int64_t{1} << 39));
      else ev.bind_null(4);
      ev.bind(5, i % 3 ? 0.25 * static_cast<double>(i) : static_cast<double>(i));  // whole ones stored as integers
      ev.bind(6, "cudaMalloc_" + std::to_string(i % 97));
      ev.run();
      if (i < 800) {  // keys of 1 to 3,000 bytes: over the index's inline bound, into overflow chains
        nm.bind(1, std::string(1 + rng() % 3000, static_cast<char>('a' + i % 26)) + std::to_string(i));
        nm.bind(2, i);
        nm.run();
      }
      fa.bind(1, static_cast<std::int64_t>(rng() % 500));
      fa.bind(2, std::to_string(i));
      fa.bind(3, 1.5);
      fa.run();
    }
    db.exec("COMMIT");
    db.exec("ALTER TABLE events ADD COLUMN stream INTEGER DEFAULT 3");
    db.exec("INSERT INTO events (id, rank, ts_ns, stream) VALUES (-1, 0, 0, 9)");
  });
  Database db(path, Database::Mode::kReadOnly);
  expect_same_table(db, "events", "id, rank, ts_ns, bytes, share, tag, stream", 7);
  expect_same_table(db, "events", "tag, ts_ns", 2);
  expect_same_table(db, "names", "n, name", 2);
  expect_same_table(db, "falling", "c, b, a", 3);
  EXPECT_THROW(TableScan(db, "events", "rowid"), Error);  // no rowid: SQLite's error
  EXPECT_THROW(TableScan(db, "events", "id", TableScan::Rowids{1, 2}), Error);
}

TEST(TableScan, SqliteReadsWhereThePagesAreNotCertain) {
  {  // WAL: the newest pages are in the -wal file
    const auto path = fresh("table_scan_wal.db");
    Database w(path, Database::Mode::kCreate);
    w.exec("PRAGMA journal_mode=WAL");
    w.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO t (v) VALUES (1), (2)");
    Database db(path, Database::Mode::kReadOnly);
    expect_same_table(db, "t", "id, v", 2, false);
  }
  const auto path = written("table_scan_other.db", 0, [](Database& db) {
    db.exec("CREATE TABLE descending (id INTEGER PRIMARY KEY DESC, v)");  // id is not the rowid here
    db.exec("INSERT INTO descending (id, v) VALUES (5, 'a'), (3, 'b')");
    db.exec("CREATE TABLE generated (a INTEGER, b INTEGER GENERATED ALWAYS AS (a * 2) VIRTUAL)");
    db.exec("INSERT INTO generated (a) VALUES (4)");
    db.exec("CREATE VIEW doubled AS SELECT a, b FROM generated");
    db.exec("CREATE TABLE plain (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO plain (v) VALUES (1), (2)");
  });
  {  // a connection that writes: its pages may wait in its cache
    Database rw(path, Database::Mode::kReadWrite);
    rw.exec("BEGIN; INSERT INTO plain (v) VALUES (3)");
    expect_same_table(rw, "plain", "id, v", 2, false);
    rw.exec("ROLLBACK");
    expect_same_table(rw, "plain", "id, v", 2, false);
  }
  {  // a read-only one inside a transaction of its own
    Database ro(path, Database::Mode::kReadOnly);
    ro.exec("BEGIN");
    expect_same_table(ro, "plain", "id, v", 2, false);
    ro.exec("COMMIT");
    expect_same_table(ro, "plain", "id, v", 2, true);
  }
  Database db(path, Database::Mode::kReadOnly);
  expect_same_table(db, "descending", "id, v", 2, false);
  expect_same_table(db, "generated", "a, b", 2, false);
  expect_same_table(db, "doubled", "a, b", 2, false);
  EXPECT_THROW(TableScan(db, "generated", "a, nonexistent"), Error);  // SQLite's own error
  EXPECT_THROW(TableScan(db, "missing", "a"), Error);
  Database memory(":memory:", Database::Mode::kCreate);
  memory.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO t (v) VALUES (1)");
  expect_same_table(memory, "t", "id, v", 2, false);
}

TEST(TableScan, HoldsAReadTransactionWhileItReads) {
  const auto path = fresh("table_scan_lock.db");
  Database w(path, Database::Mode::kCreate);
  w.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO t (v) VALUES (1), (2)");
  sqlite3_busy_timeout(w.handle(), 0);
  Database db(path, Database::Mode::kReadOnly);
  {
    TableScan scan(db, "t", "v");
    ASSERT_TRUE(scan.direct());
    EXPECT_THROW(w.exec("INSERT INTO t (v) VALUES (3)"), Error);  // busy: the scan's shared lock
  }
  w.exec("INSERT INTO t (v) VALUES (3)");
}

// Random bytes changed in the pages of a table: each copy reads as SQLite
// reads it, or throws an error; none crashes (run under ASan in CI).
TEST(TableScan, DamagedPagesAreErrorsNotCrashes) {
  const auto clean = written("table_scan_clean.db", 512, [](Database& db) {
    fill_every_type(db);
  });
  std::ifstream in(clean, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::mt19937 rng(3);
  int errors = 0;
  for (int copy = 0; copy < 300; ++copy) {
    auto damaged = bytes;
    for (int k = 0; k < 1 + copy % 4; ++k)  // past page 1, which holds the schema
      damaged[512 + rng() % (damaged.size() - 512)] = static_cast<char>(rng());
    const auto path = fresh("table_scan_damaged.db");
    std::ofstream(path, std::ios::binary).write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
    try {
      Database db(path, Database::Mode::kReadOnly);
      TableScan scan(db, "Values_", "id, i, r, t, b, n, d");
      Row row;
      while (scan.step(row))
        for (int c = 0; c < 7; ++c) (void)row.text(c), (void)row.int64(c), (void)row.real(c);
    } catch (const Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find("damaged"), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace moetrace::sqlite
