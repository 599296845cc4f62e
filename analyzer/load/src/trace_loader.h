// The loader of one trace file (or one import in memory) into the model:
// load() reads every table (SQL per table, checked against the writer's
// integrity record), then builds the tracks, recognises MoE semantics and
// projects activities onto ops. One class, its state shared, in files by
// concept:
//   trace_loader.cc        the stage sequence (load), the run row, the tracks
//   loader_event_tables.cc the event tables' order, one after the other or in two parts on two threads
//   loader_tables.cc       run, strings, devices/ranks/streams, activities, ops, received bytes, v1 links
//   loader_host_tables.cc  API calls, syncs, NVTX, memory, MoE tables, autograd, input shapes, collectives
//   loader_integrity.cc    the integrity record, verification, references, damage notes
//   loader_from_import.cc  the records of an import in memory (take_imported)
// Private to analyzer/load.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <ctime>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "moetrace/analyzer/huge_pages.h"
#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/move_to_places.h"
#include "moetrace/analyzer/projection.h"
#include "moetrace/importers/imported_trace.h"
#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/op_links.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/table_scan.h"
#include "moetrace/schema/trace_file.h"
#include "moetrace/analyzer/trace.h"
#include "trace_loader_internal.h"

namespace moetrace::analyzer {


class TraceLoader {
 public:
  TraceLoader(const std::string& path, const LoadOptions& options)
      : db_(schema::open_trace(path)), options_(options) {
    trace_.run.path = path;
  }
  // A trace of another tool imported into memory (`path`: its file): the
  // same model as from a trace file of the same import, with no file between.
  TraceLoader(const std::string& path, importers::ImportedTrace&& imported, const LoadOptions& options)
      : options_(options), imported_(std::move(imported)) {
    trace_.run.path = path;
  }

  Trace load();

 private:
  void read_tables();

 public:
  // `digests`: where to add the digests of the run row, run_config and meta.
  static void load_run(sqlite::Database& db, RunInfo& run, schema::IntegrityRecord* digests = nullptr);

 private:
  void progress(std::string_view stage, double fraction) {
    if (options_.progress) options_.progress(stage, fraction);
  }
  void step_progress(std::string_view stage) {
    if ((++rows_done_ & 0xFFFF) != 0) return;
    if (race_) race_step();
    if (race_ && race_->second_loader == this) return;  // the main loader reports progress
    const auto done = rows_done_ + (race_ ? race_->second_rows.load(std::memory_order_relaxed) : 0);
    if (rows_total_ > 0) progress(stage, std::min(0.99, static_cast<double>(done) / static_cast<double>(rows_total_)));
  }

  // The tables after the strings, devices, ranks and streams: in this order
  // (the order of their errors), one after the other or in two parts on two
  // threads (read_in_parallel): the device and host tables here, the op
  // ranges, memory and MoE tables on a second loader, each on a connection
  // of its own, and the API calls between them: this loader takes their
  // rows from the first, the second from the last, a block of rowids at a
  // time, until they meet. What a failing part leaves undone the other
  // cannot need.
  void read_event_tables();
  bool read_in_parallel() const;
  void read_device_tables();             // kernels, copies, memsets
  void read_host_tables();               // syncs, NVTX and its tables
  void read_op_tables();                 // op ranges
  void read_memory_and_moe_tables();     // memory, MoE tables, collectives
  // The two parts on two threads: what the second part read into this one.
  void read_event_tables_in_parallel();
  // The API calls' rows of rowids [first, first + kApiBlock * blocks), by
  // block, into `blocks_read` (where the race leaves some undone).
  static constexpr std::int64_t kApiBlock = 1 << 16;
  struct ApiBlocks;
  void read_api_call_blocks(ApiBlocks& blocks, bool from_first);
  // What the two loaders of the parts share: the second's rows read (for
  // the progress), the API-call blocks left, and the position of the first
  // failure, so that the other stops once it is past it (its later errors
  // would not be thrown).
  struct Race {
    const TraceLoader* second_loader = nullptr;
    std::atomic<std::int64_t> second_rows{0};
    std::atomic<std::int64_t> failed_at{INT64_MAX};
    void failed(std::int64_t position) {
      for (auto f = failed_at.load(); position < f && !failed_at.compare_exchange_weak(f, position);) {
      }
    }
  };
  struct Stopped {};
  // Steps of the tables in read_event_tables's order; a position is a step
  // and, in the API calls, the block of their rows being read.
  enum Step : int { kDeviceTables = 1, kOpTables = 2, kApiCalls = 3, kHostTables = 4, kMemoryAndMoeTables = 5 };
  static constexpr std::int64_t position(int step, std::int64_t block = 0) {
    return (static_cast<std::int64_t>(step) << 40) + block;
  }
  void enter_step(int step, std::int64_t block = 0) {
    step_ = position(step, block);
    race_step();
  }
  void race_step() {
    if (!race_) return;
    if (race_->second_loader == this) race_->second_rows.store(rows_done_, std::memory_order_relaxed);
    if (race_->failed_at.load(std::memory_order_relaxed) < step_) throw Stopped{};
  }
  // The loader of the second part: its own connection to the file; main's
  // options, record, run, ranks and string count to check against; op
  // ranges keep their stream ids until main resolves them (stream_slot, in
  // the order of one loader).
  TraceLoader(const TraceLoader& main, Race& race);

  void count_rows();
  // first() and second(), the first on a second thread where the loader
  // reads on two, else one after the other; the first's exception, else the
  // second's, rethrown once both have ended.
  void side_by_side(const std::function<void()>& first, const std::function<void()>& second) const;
  // part(begin, end) over [0, n): two halves side by side where n is large,
  // else one call.
  void in_two_halves(std::size_t n, const std::function<void(std::size_t, std::size_t)>& part) const;

  void load_strings();

  void load_devices_ranks_streams();

  // Index of a stream id, registering streams that events name but the
  // streams table lacks (a killed run may have flushed events first).
  std::int32_t stream_slot(std::int64_t stream_id, RankId rank) {
    // Neighbouring rows are mostly of one stream: the last answer first.
    if (stream_id == last_stream_id_ && last_stream_slot_ >= 0) return last_stream_slot_;
    last_stream_id_ = stream_id;
    last_stream_slot_ = find_stream_slot(stream_id, rank);
    return last_stream_slot_;
  }
  std::int32_t find_stream_slot(std::int64_t stream_id, RankId rank) {
    auto it = stream_slots_.find(stream_id);
    if (it != stream_slots_.end()) return it->second;
    if (stream_slots_.empty() && !trace_.streams.empty()) {
      for (std::size_t i = 0; i < trace_.streams.size(); ++i)
        stream_slots_.emplace(trace_.streams[i].id.value, static_cast<std::int32_t>(i));
      it = stream_slots_.find(stream_id);
      if (it != stream_slots_.end()) return it->second;
    }
    unknown_streams_.push_back(stream_id);
    Stream s;
    s.id = StreamId(static_cast<std::int32_t>(stream_id));
    s.rank = rank;
    s.role = "other";
    s.name = "stream " + std::to_string(stream_id);
    trace_.streams.push_back(std::move(s));
    auto slot = static_cast<std::int32_t>(trace_.streams.size() - 1);
    stream_slots_.emplace(stream_id, slot);
    return slot;
  }

  // Expert and rank indices size the analyses' vectors: a damaged value must
  // not become a huge allocation.
  void check_index(std::int64_t v, const char* table, const char* column) {
    if (v < 0 || v >= kMaxIndex)
      throw Error(trace_.run.path + ": " + table + " has " + column + " " + std::to_string(v) +
                  " (expected 0 .. " + std::to_string(kMaxIndex - 1) + "); damaged trace");
  }
  static constexpr std::int64_t kMaxIndex = 1 << 20;

  // The writer's integrity record in meta (schemas/README.md), if any.
  void load_integrity_record();

  // Where to add the hashes of a table's rows; nullptr without a record
  // (nothing to check them against).
  schema::TableDigest* digest(const std::string& table) { return record_ ? &read_[table] : nullptr; }

  // The rows the integrity record counts in `table`, to reserve for; 0
  // without a record. Capped: a damaged record is caught by verify(), not by
  // an allocation of its size.
  std::size_t recorded_rows(std::string_view table) const {
    if (!record_) return 0;
    const auto it = record_->find(table);
    if (it == record_->end() || it->second.rows <= 0) return 0;
    return static_cast<std::size_t>(std::min<std::int64_t>(it->second.rows, std::int64_t{1} << 22));
  }

  // A table read whole against the integrity record.
  void verify(std::string_view table);

  // Each row of `scan` to `read(row)`, its columns hashed first into the
  // digest of `table` where there is a record. The fetched-row form
  // (sqlite::Row) for the large tables, whose reads touch most columns.
  template <class Read>
  void for_each_row(sqlite::TableScan& scan, const std::string& table, Read&& read) {
    auto* d = digest(table);
    sqlite::Row row;
    while (scan.step(row)) {
      if (d) d->add_row(row, scan.columns());
      read(row);
    }
  }
  // The same for `columns` of every row of `table`, read into `out`,
  // reserved first for the rows the record counts.
  template <class T, class Read>
  void for_each_row(const std::string& table, std::string_view columns, std::vector<T>& out, Read&& read) {
    sqlite::TableScan scan(db_, table, columns);
    reserve_huge(out, out.size() + recorded_rows(table));
    for_each_row(scan, table, read);
  }
  // The same where `read()` reads the statement itself (small tables, or
  // columns past n).
  template <class Read>
  void for_each_statement_row(sqlite::Statement& st, const std::string& table, int n, Read&& read) {
    auto* d = digest(table);
    while (st.step()) {
      if (d) d->add_row(st, n);
      read();
    }
  }

  // A rank of the run: below its world size and the ranks that the ranks and
  // streams tables name.
  RankId checked_rank(std::int64_t v, const char* table) {
    const auto limit = std::max<std::int64_t>(trace_.run.world_size, rank_limit_);
    if (v < 0 || v >= limit)
      throw Error(fmt::format("{}: {} has rank {} but the run has {} ranks; damaged trace", trace_.run.path, table,
                              v, limit));
    return RankId(static_cast<std::int32_t>(v));
  }

  StringId checked_string(std::int64_t v, const char* table) {
    if (v < 0 || v >= strings_)
      throw Error(fmt::format("{}: {} names string {} that the strings table lacks; damaged trace",
                              trace_.run.path, table, v));
    return StringId(static_cast<std::int32_t>(v));
  }

  std::int64_t checked_enum(std::int64_t v, std::int64_t lo, std::int64_t hi, const char* table,
                            const char* column) {
    if (v < lo || v > hi)
      throw Error(fmt::format("{}: {} has {} {} (expected {} .. {}); damaged trace", trace_.run.path, table, column,
                              v, lo, hi));
    return v;
  }

  void note_damage(std::int64_t n, std::string_view what) {
    if (n > 0) trace_.run.damage.push_back(fmt::format("{} {}", n, what));
  }

  // References between tables that the analyses follow: those that point
  // nowhere are left out, and the report says so.
  void check_references();

  void check_times(std::int64_t start, std::int64_t end, const char* table) {
    if (end < start)
      throw Error(trace_.run.path + ": " + table + " has an event that ends before it starts (" +
                  std::to_string(start) + " > " + std::to_string(end) + " ns); damaged trace");
  }

  // The columns a kernels, memcpy or memset row starts with (rank,
  // stream_id, start_ns, end_ns), checked in that order.
  Activity activity_of(const sqlite::Row& row, ActivityType type, const char* table) {
    Activity a;
    a.type = type;
    a.rank = checked_rank(row.int64(0), table);
    a.stream = stream_slot(row.int64(1), a.rank);
    a.start_ns = row.int64(2);
    a.end_ns = row.int64(3);
    check_times(a.start_ns, a.end_ns, table);
    return a;
  }
  // An activity read, with the op its row names (column `op_column`).
  void add_activity(const Activity& a, const sqlite::Row& row, int op_column, std::string_view stage) {
    activity_op_ids_.push_back(row.int64_or(op_column, -1));
    trace_.activities.push_back(a);
    step_progress(stage);
  }

  void load_activities();

  void load_ops();

  // The op_recv_bytes table (absent from traces older than it): the bytes an
  // all-to-all op receives, onto its op.
  void load_op_recv_bytes();

  // One op's JSON arrays (schema/op_links.h) into op_deps and, with the
  // memory tables, op_buffers.
  void add_op_links(OpId op, std::optional<std::string_view> deps_json,
                    std::optional<std::string_view> buffers_json, std::vector<std::int64_t>& deps,
                    std::vector<schema::BufferLink>& accesses) {
    deps.clear();
    accesses.clear();
    if (deps_json && !schema::parse_deps(*deps_json, deps))
      throw Error(fmt::format("{}: op_ranges.deps of op {} is not a JSON array of op ids (damaged trace)",
                              trace_.run.path, op.value));
    for (std::int64_t d : deps) trace_.op_deps.push_back({op, OpId(d)});
    if (!options_.memory || !buffers_json) return;
    if (!schema::parse_buffers(*buffers_json, accesses))
      throw Error(fmt::format("{}: op_ranges.buffers of op {} is not a JSON array of [buffer, access] "
                              "pairs (damaged trace)",
                              trace_.run.path, op.value));
    for (const auto& l : accesses)
      trace_.op_buffers.push_back({op, BufferId(l.buffer), static_cast<schema::Access>(l.access)});
  }

  // The API calls of rowids [first, last] (all where `whole`) into `out`.
  void load_api_calls(std::vector<ApiCall>& out, bool whole, std::int64_t first = 0, std::int64_t last = 0);

  // GPU-side synchronisation records, for the critical path (critical_path.h).
  // Not checked against the integrity record: a damaged row costs a sync edge.
  void load_sync_events();

  void sort_sync_events();

  void sort_api_calls();

  void load_nvtx();

  void sort_nvtx();

  void load_memory();

  void sort_memory_events();

  // Plan dependencies and (with the memory tables) op buffer accesses of a
  // version-1 trace, which kept them in tables of their own.
  void load_v1_op_links();

  void load_moe_tables();

  // A table that names NVTX ranges by id and may be absent (added within
  // version 2): each row's columns 1..n-1 go to `row` with the range it names
  // (column 0, its nvtx id); rows naming no range are counted as damage.
  template <class Row>
  void load_nvtx_table(const char* table, const char* columns, int n, Row row) {
    if (!db_.has_table(table)) return;
    auto& by_id = nvtx_by_id_;  // built once for every such table
    if (by_id.empty()) {
      by_id.reserve(trace_.nvtx.size());
      for (std::size_t i = 0; i < trace_.nvtx.size(); ++i) by_id.emplace(trace_.nvtx[i].id, i);
    }
    auto st = db_.prepare(fmt::format("SELECT {} FROM {}", columns, table));
    std::int64_t orphans = 0;
    for_each_statement_row(st, table, n, [&] {
      const auto it = by_id.find(st.int64(0));
      if (it == by_id.end()) {
        ++orphans;
        return;
      }
      row(st, trace_.nvtx[it->second]);
    });
    verify(table);
    note_damage(orphans, fmt::format("{} rows name NVTX ranges that nvtx_ranges lacks (left out)", table));
  }

  // The autograd_ranges table: sequence numbers of the host ranges.
  void load_autograd();

  // The input_shapes table: the recorded input shapes of matrix products.
  void load_input_shapes();

  // The collectives table (absent from traces older than it), for MoE
  // recognition: all-to-all split sizes give the load per destination rank.
  void load_collectives();

  // "[12, 0, 7]" (Kineto's split sizes) -> {12, 0, 7}; anything that is not a
  // list of non-negative integers -> {} (no load is derived from it).
  static std::vector<std::int64_t> parse_splits(std::string_view text);

  // The records of an import into memory, as read_tables() reads them back
  // from the trace file the same import writes: values the file stores as
  // NULL (negative ids and sizes, correlation ids of 0 or less) read as the
  // loader reads NULL, rows in the order the file returns them.
  void take_imported();

  // Sorts activities and ops into per-stream tracks, resolves op ids to indices.
  void build_tracks();
  // std::sort(events, by_track) for events whose `stream` is below
  // `streams`. Where each stream's events come strictly in order already (as
  // writers append them), that order is the only sorted one: each event's
  // place follows from the counts per stream, and the events move there in
  // place (move_to_places.h; a second array of them, hundreds of MiB on a
  // large trace, cost more in fresh pages than the moves). The places take
  // 4 bytes each, half the fresh pages of 8.
  template <class Event, class ByTrack>
  static void sort_into_tracks(std::vector<Event>& events, std::size_t streams, ByTrack by_track) {
    std::vector<std::size_t> last(streams, SIZE_MAX);  // per stream, its previous event
    std::vector<std::size_t> begin(streams + 1, 0);
    bool in_order = events.size() <= UINT32_MAX;
    for (std::size_t i = 0; in_order && i < events.size(); ++i) {
      const auto s = static_cast<std::size_t>(events[i].stream);
      if (s >= streams || (last[s] != SIZE_MAX && !by_track(events[last[s]], events[i]))) in_order = false;
      else last[s] = i, ++begin[s + 1];
    }
    if (!in_order) {
      std::sort(events.begin(), events.end(), by_track);
      return;
    }
    for (std::size_t s = 0; s < streams; ++s) begin[s + 1] += begin[s];
    std::vector<std::uint32_t> to(events.size());  // each event's place
    for (std::size_t i = 0; i < events.size(); ++i)
      to[i] = static_cast<std::uint32_t>(begin[static_cast<std::size_t>(events[i].stream)]++);
    move_to_places(to, events);
  }

  sqlite::Database db_;
  LoadOptions options_;
  Trace trace_;
  std::unordered_map<std::int64_t, std::int32_t> stream_slots_;
  std::int64_t last_stream_id_ = 0;  // stream_slot's last answer
  std::int32_t last_stream_slot_ = -1;
  std::vector<std::int64_t> activity_op_ids_;
  std::int64_t rows_total_ = 0, rows_done_ = 0;
  std::optional<schema::IntegrityRecord> record_;  // the writer's; nullopt: none
  schema::IntegrityRecord read_;                   // of the rows read
  std::int64_t rank_limit_ = 0;                    // 1 + the highest rank of tables ranks and streams
  std::int64_t strings_ = 0;                       // string ids 0 .. strings_ - 1 (the strings table's)
  Race* race_ = nullptr;                           // while the event tables are read in two parts
  std::int64_t step_ = 0;                          // the position being read (Step, block)
  bool defer_op_streams_ = false;                  // the second part's loader: op_stream_ids_, not stream_slot
  std::vector<std::int64_t> op_stream_ids_;        // of its op ranges, by row
  std::vector<std::int64_t> unknown_streams_;
  std::int64_t activities_without_op_ = 0;
  std::unordered_map<std::int64_t, std::size_t> nvtx_by_id_;  // load_nvtx_table
  std::optional<importers::ImportedTrace> imported_;  // take_imported()
};

}  // namespace moetrace::analyzer
