// The trace writer: the only code that creates moetrace traces. It has no CUDA
// dependency; the CUPTI collector, the simulator and the synthetic generator
// all write through it.
//
// Rows are buffered in memory and written in batched transactions (WAL mode).
// A background thread flushes every `flush_interval`, and sooner once
// `flush_rows` rows are pending, so a process killed with SIGKILL leaves a
// valid database holding everything up to its last flush. All methods are
// safe to call from several threads.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "moetrace/instrument/records.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/sqlite.h"

namespace moetrace::instrument {

struct WriterOptions {
  std::chrono::milliseconds flush_interval{1000};
  std::size_t flush_rows = 1 << 18;  // pending rows that trigger an early flush
  bool overwrite = true;             // replace an existing file at the path
  // true: WAL journal, a valid trace on disk after every flush (the CUPTI
  // collector: a killed process keeps what it flushed).
  // false: for producers whose trace is useful only once complete (import,
  // simulator). Rows go to `<path>.partial-<pid>` with no journal and no disk
  // syncs, and close() renames that file to `path`; a writer destroyed
  // without close() (an error on the way) deletes it. So `path` never holds
  // half a trace, and writing skips the WAL's second copy of every page.
  bool durable = true;
  // Create the indexes with the tables instead of at close(): each row then
  // updates them as it is inserted, on the flushing thread, while the
  // producer goes on. Cheaper in all where rows come roughly in index order
  // (an import: correlation ids and each thread's ranges in time order; 0.15
  // s of CPU against 0.22 s on 580k rows, BENCHMARKS.md), and close() no
  // longer ends with index builds.
  bool indexes_first = false;
  // SQLite page size: large pages insert many rows faster (fewer b-tree
  // pages); a small trace is written sooner with small ones (its ~40 tables
  // and indexes take a page each: 2.5 MB of 64 KiB pages).
  int page_size = 65536;
  // Rows a producer may leave pending while the flusher writes the batch
  // before them; add() waits beyond that (0: never waits). For producers
  // that outrun SQLite (an import): the rows that wait for the flusher are
  // bounded, and so is what is left to write once the producer is done,
  // the part of an import that runs on one core (BENCHMARKS.md). Not for
  // the CUPTI collector, whose producer must never wait.
  std::size_t max_pending_rows = 0;
  // Keep the integrity record (schema/integrity.h) that the loader checks
  // every row against; false only to measure what it costs (trace_bench).
  bool integrity_record = true;
};

// What the writer records of the process that writes a trace: the host's
// name (a run that names none gets it; "" where unknown) and this moetrace's
// version. Readers of records that never went through a writer take them
// from here too.
std::string host_name();
std::string_view moetrace_version();

struct WriterStats {
  std::int64_t rows_written = 0;
  std::int64_t flushes = 0;
};

class TraceWriter {
 public:
  // Creates a new trace at `path` with the schema, the op-kind table and the
  // run row. Throws moetrace::Error where the file cannot be created.
  TraceWriter(const std::string& path, const RunRecord& run, WriterOptions options = {});
  // A durable writer close()s (errors there are swallowed: call close() to
  // see them); a non-durable one that was not closed discards its file.
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Interns a string (kernel names, NVTX names and domains); ids are stable
  // for the life of the writer.
  StringId intern(std::string_view s);

  void add(const DeviceRecord& r);
  void add(const RankRecord& r);
  void add(const StreamRecord& r);
  void add(const LayerRecord& r);
  void add(const KernelRecord& r);
  void add(const MemcpyRecord& r);
  void add(const MemsetRecord& r);
  void add(const MemoryEventRecord& r);
  void add(const ApiCallRecord& r);
  void add(const SyncRecord& r);
  void add(const OverheadRecord& r);
  void add(const NvtxRangeRecord& r);
  void add(const CollectiveRecord& r);
  // Returns the op's id (r.id where given, else a fresh one).
  OpId add(const OpRangeRecord& r);
  // The same with the op's dependencies and buffer accesses (schema v2 keeps
  // them on the op's row): the bulk path of producers that have them at hand
  // (the simulator). Duplicates are merged; the encoding happens here, on the
  // caller's thread, not on the writer's.
  OpId add(const OpRangeRecord& r, std::span<const OpId> deps, std::span<const OpBufferRecord> buffers);
  // Links added on their own (before or after their op, in any flush) are
  // joined to the op's row by the writer. Links whose op never comes are
  // dropped at close() and counted in run_config `trace.op_links_without_op`.
  void add(const OpDepRecord& r);
  void add(const BufferRecord& r);
  void add(const OpBufferRecord& r);
  void add(const ExpertLoadRecord& r);
  void add(const ExpertPlacementRecord& r);

  // Sets a flattened configuration entry (run_config table).
  void set_config(std::string_view key, std::string_view value);
  // Sets the run's configuration (a JSON object) as dotted keys
  // ("model.num_layers"); text that is not JSON is kept whole as
  // `config_json`.
  void set_config_json(std::string_view json);
  // Activity records the producer lost (e.g. CUPTI buffers dropped); stored in
  // run.dropped_records and shown by `moetrace info`.
  void add_dropped_records(std::int64_t n);

  // Writes everything pending in one transaction; returns when it is on disk
  // (as far as WAL with synchronous=NORMAL goes: safe against a process kill).
  // Throws the error of a background flush that failed since the last call
  // (its rows are lost), else that of this one.
  void flush();
  // Final flush, the run's time range, indexes, and a single-file database
  // (journal back to DELETE mode). Idempotent; throws on I/O errors. The
  // database work runs on a short-lived thread of its own (its own malloc
  // arena: see finalize()); close() waits for it.
  void close();

  // Sets run.world_size (where it is known only after the rows, as in an
  // import); written with the next flush.
  void set_world_size(int world_size);

  WriterStats stats() const;
  const std::string& path() const { return path_; }

 private:
  struct Pending;
  struct Statements;
  void row_added();
  void row_added(std::int64_t start, std::int64_t end);
  void wait_for_room(std::unique_lock<std::mutex>& lock);
  void flusher_loop();
  void write_pending();  // flush() without the background error
  void write_batch(Pending& batch);
  void join_links(Pending& batch);

  void stop_flusher();
  // close()'s database work: the last flush, the indexes, the finalized mark.
  void finalize();
  void write_integrity_record();

  std::string path_;       // where the trace appears
  std::string db_path_;    // where it is written (path_ unless non-durable)
  WriterOptions options_;
  sqlite::Database db_;
  std::unique_ptr<Statements> stmts_;

  mutable std::mutex mu_;             // guards pending_, strings_, time range
  std::unique_ptr<Pending> pending_;
  std::unordered_map<std::string, StringId> strings_;
  std::map<LaunchConfigKey, std::int32_t> launches_;  // interned launch configurations
  std::int64_t next_op_id_ = 0;
  std::int64_t min_ts_ = INT64_MAX, max_ts_ = INT64_MIN;
  std::int64_t dropped_ = 0;
  int world_size_ = 0;

  std::mutex flush_mu_;               // serializes writes to the database; guards spare_, orphans_
  std::exception_ptr background_error_;  // the first failed background flush's; guarded by mu_
  std::unique_ptr<Pending> spare_;
  struct Link;
  std::vector<Link> orphans_;         // op links whose op row is not written yet
  std::int64_t next_memory_event_id_ = 1;
  std::int64_t next_nvtx_id_ = 1;          // nvtx_ranges rowids, as SQLite assigns them
  std::int64_t next_collective_id_ = 1;    // collectives rowids, likewise
  schema::TableDigest op_links_digest_;    // of op_ranges (id, deps, buffers): schema/integrity.h
  std::condition_variable cv_;
  std::condition_variable room_;  // pending rows fell below max_pending_rows, or the writer stops
  bool stop_ = false;
  bool wake_ = false;
  bool closed_ = false;
  bool published_ = false;  // non-durable: renamed into place by close()
  std::atomic<std::int64_t> rows_written_{0};
  std::atomic<std::int64_t> flushes_{0};
  std::thread flusher_;
};

}  // namespace moetrace::instrument
