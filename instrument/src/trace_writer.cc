#include "moetrace/instrument/trace_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "moetrace/schema/error.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/op_links.h"
#include "moetrace/schema/schema.h"
#include "pending_rows.h"
#include "row_inserter.h"

namespace moetrace::instrument {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return {};
  return buf;
}

std::string_view moetrace_version() { return MOETRACE_VERSION; }

namespace {

// SQLite's journal files beside a database.
void remove_side_files(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"-wal", "-shm", "-journal"}) std::filesystem::remove(path + suffix, ec);
}

void remove_with_side_files(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  remove_side_files(path);
}

}  // namespace

TraceWriter::TraceWriter(const std::string& path, const RunRecord& run, WriterOptions options)
    : path_(path),
      db_path_(options.durable ? path : path + ".partial-" + std::to_string(getpid())),
      options_(options),
      pending_(std::make_unique<Pending>()),
      spare_(std::make_unique<Pending>()) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    if (!options_.overwrite) throw Error(path + ": already exists (not overwriting)");
    // A non-durable writer replaces the old trace only when its own is
    // complete (close() renames over it).
    if (options_.durable) remove_with_side_files(path);
  }
  if (run.world_size < 1) throw Error(path + ": world size must be at least 1");
  if (!options_.durable) remove_with_side_files(db_path_);
  db_ = sqlite::Database(db_path_, sqlite::Database::Mode::kCreate);
  // Large pages: fewer b-tree pages per row inserted (see BENCHMARKS.md).
  db_.exec("PRAGMA page_size=" + std::to_string(options_.page_size));
  if (options_.durable) {
    db_.exec("PRAGMA journal_mode=WAL");
    db_.exec("PRAGMA synchronous=NORMAL");
  } else {
    // Nothing to recover: the file is deleted or renamed whole. No journal
    // halves the pages written (WAL writes each twice, once at checkpoint).
    db_.exec("PRAGMA journal_mode=OFF");
    db_.exec("PRAGMA synchronous=OFF");
    db_.exec("PRAGMA locking_mode=EXCLUSIVE");
  }
  db_.exec("PRAGMA temp_store=MEMORY");
  db_.exec("PRAGMA cache_size=-65536");
  db_.exec("BEGIN");
  db_.exec(schema::tables_sql());
  if (options_.indexes_first) db_.exec(schema::indexes_sql());
  db_.exec("PRAGMA application_id=" + std::to_string(schema::kApplicationId));
  db_.exec("PRAGMA user_version=" + std::to_string(schema::kVersion));
  {
    auto st = db_.prepare("INSERT INTO op_kinds(id, name, category) VALUES (?1, ?2, ?3)");
    for (const auto& k : all_op_kinds()) {
      st.bind(1, static_cast<std::int64_t>(k.kind));
      st.bind(2, k.name);
      st.bind(3, category_name(k.category));
      st.run();
    }
  }
  {
    auto st = db_.prepare("INSERT INTO meta(key, value) VALUES (?1, ?2)");
    const std::pair<const char*, std::string> rows[] = {
        {"format", "moetrace"},
        {"schema_version", std::to_string(schema::kVersion)},
        {"finalized", "0"},
        {"time_unit", "ns"},
    };
    for (const auto& [k, v] : rows) {
      st.bind(1, std::string_view(k));
      st.bind(2, v);
      st.run();
    }
  }
  {
    auto st = db_.prepare(
        "INSERT INTO run(id, name, backend, variant, simulated, world_size, host, "
        "moetrace_version, created_unix_s, config_json) "
        "VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    bind_text_or_null(st, 1, run.name);
    st.bind(2, std::string_view(run.backend.empty() ? "unknown" : run.backend));
    bind_text_or_null(st, 3, run.variant);
    st.bind(4, std::int64_t{run.simulated ? 1 : 0});
    st.bind(5, std::int64_t{run.world_size});
    const std::string host = run.host.empty() ? host_name() : run.host;  // outlives run()
    bind_text_or_null(st, 6, host);
    st.bind(7, moetrace_version());
    st.bind(8, static_cast<std::int64_t>(std::time(nullptr)));
    bind_text_or_null(st, 9, run.config_json);
    st.run();
  }
  db_.exec("COMMIT");
  stmts_ = std::make_unique<Statements>(db_);
  if (!options_.integrity_record)
    for (Inserter* i : stmts_->all()) i->disable_digest();
  flusher_ = std::thread([this] { flusher_loop(); });
}

TraceWriter::~TraceWriter() {
  if (!options_.durable) {
    if (!published_) {
      stop_flusher();
      stmts_.reset();
      db_ = sqlite::Database();
      remove_with_side_files(db_path_);
    }
    return;
  }
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moetrace: %s\n", e.what());
  }
}

void TraceWriter::stop_flusher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  room_.notify_all();
  if (flusher_.joinable()) flusher_.join();
}

void TraceWriter::set_world_size(int world_size) {
  if (world_size < 1) throw Error(path_ + ": world size must be at least 1");
  std::lock_guard lock(mu_);
  world_size_ = world_size;
}

StringId TraceWriter::intern(std::string_view s) {
  std::lock_guard lock(mu_);
  auto it = strings_.find(std::string(s));
  if (it != strings_.end()) return it->second;
  StringId id(static_cast<std::int32_t>(strings_.size()));
  strings_.emplace(std::string(s), id);
  pending_->strings.emplace_back(id, std::string(s));
  ++pending_->rows;
  return id;
}

// One more row pending (under mu_); the flusher wakes once enough are.
void TraceWriter::row_added() {
  ++pending_->rows;
  if (pending_->rows >= options_.flush_rows && !wake_) {
    wake_ = true;
    cv_.notify_one();
  }
}

// The same for a row at [start, end] of the run's time.
void TraceWriter::row_added(std::int64_t start, std::int64_t end) {
  min_ts_ = std::min(min_ts_, start);
  max_ts_ = std::max(max_ts_, std::max(start, end));
  row_added();
}

// A producer over max_pending_rows waits until the flusher takes the batch.
void TraceWriter::wait_for_room(std::unique_lock<std::mutex>& lock) {
  if (options_.max_pending_rows == 0 || pending_->rows < options_.max_pending_rows) return;
  if (!wake_) {  // where max_pending_rows < flush_rows, nobody has woken the flusher yet
    wake_ = true;
    cv_.notify_one();
  }
  room_.wait(lock, [this] { return pending_->rows < options_.max_pending_rows || stop_ || closed_; });
}

#define MOETRACE_ADD(Record, field)         \
  void TraceWriter::add(const Record& r) {  \
    std::unique_lock lock(mu_);             \
    pending_->field.push_back(r);           \
    row_added();                            \
    wait_for_room(lock);                    \
  }
#define MOETRACE_ADD_TIMED(Record, field)   \
  void TraceWriter::add(const Record& r) {  \
    std::unique_lock lock(mu_);             \
    pending_->field.push_back(r);           \
    row_added(r.start_ns, r.end_ns);        \
    wait_for_room(lock);                    \
  }
MOETRACE_ADD(DeviceRecord, devices)
MOETRACE_ADD(RankRecord, ranks)
MOETRACE_ADD(StreamRecord, streams)
MOETRACE_ADD(LayerRecord, layers)
MOETRACE_ADD_TIMED(MemcpyRecord, memcpys)
MOETRACE_ADD_TIMED(MemsetRecord, memsets)
MOETRACE_ADD_TIMED(ApiCallRecord, api_calls)
MOETRACE_ADD_TIMED(SyncRecord, syncs)
MOETRACE_ADD_TIMED(OverheadRecord, overheads)
MOETRACE_ADD_TIMED(CollectiveRecord, collectives)
MOETRACE_ADD(BufferRecord, buffers)
MOETRACE_ADD(ExpertLoadRecord, expert_load)
MOETRACE_ADD(ExpertPlacementRecord, placements)
#undef MOETRACE_ADD
#undef MOETRACE_ADD_TIMED

void TraceWriter::add(const KernelRecord& r) {
  std::unique_lock lock(mu_);
  std::int64_t launch_id = -1;
  if (r.grid[0] >= 0) {
    const LaunchConfigKey lc = launch_config_key(r);
    auto [it, inserted] = launches_.try_emplace(lc, static_cast<std::int32_t>(launches_.size()));
    if (inserted) pending_->launches.emplace_back(it->second, lc);
    launch_id = it->second;
  }
  pending_->kernels.push_back({r, launch_id});
  row_added(r.start_ns, r.end_ns);
  wait_for_room(lock);
}

void TraceWriter::add(const MemoryEventRecord& r) {
  std::unique_lock lock(mu_);
  pending_->memory_events.push_back(r);
  row_added(r.ts_ns, r.ts_ns);
  wait_for_room(lock);
}

void TraceWriter::add(const NvtxRangeRecord& r) {
  std::unique_lock lock(mu_);
  pending_->nvtx.push_back(r);
  row_added(r.start_ns, r.end_ns);
  wait_for_room(lock);
}

OpId TraceWriter::add(const OpRangeRecord& r) { return add(r, {}, {}); }

OpId TraceWriter::add(const OpRangeRecord& r, std::span<const OpId> deps,
                      std::span<const OpBufferRecord> buffers) {
  PendingOp op{r, {}, {}};
  if (!deps.empty()) {
    std::vector<std::int64_t> ids;
    ids.reserve(deps.size());
    for (OpId d : deps) ids.push_back(d.value);
    op.deps = schema::encode_deps(ids);
  }
  if (!buffers.empty()) {
    std::vector<schema::BufferLink> links;
    links.reserve(buffers.size());
    for (const auto& b : buffers) links.push_back({b.buffer.value, static_cast<std::int32_t>(b.access)});
    op.buffers = schema::encode_buffers(links);
  }
  std::lock_guard lock(mu_);
  if (!op.r.id.valid()) op.r.id = OpId(next_op_id_);
  next_op_id_ = std::max(next_op_id_, op.r.id.value + 1);
  const OpId id = op.r.id;
  pending_->ops.push_back(std::move(op));
  row_added(r.start_ns, r.end_ns);
  return id;
}

void TraceWriter::add(const OpDepRecord& r) {
  std::lock_guard lock(mu_);
  pending_->links.push_back({r.op, r.dep.value, 0});
  row_added();
}

void TraceWriter::add(const OpBufferRecord& r) {
  std::lock_guard lock(mu_);
  pending_->links.push_back({r.op, r.buffer.value, static_cast<std::int32_t>(r.access)});
  row_added();
}

void TraceWriter::set_config(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  pending_->config.emplace_back(std::string(key), std::string(value));
  ++pending_->rows;
}

namespace {

void flatten_config(const nlohmann::json& j, const std::string& prefix, TraceWriter& w) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten_config(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), w);
  } else if (j.is_string()) {
    w.set_config(prefix, j.get<std::string>());
  } else {
    w.set_config(prefix, j.dump());
  }
}

}  // namespace

void TraceWriter::set_config_json(std::string_view json) {
  if (json.empty()) return;
  try {
    flatten_config(nlohmann::json::parse(json), "", *this);
  } catch (const nlohmann::json::exception&) {
    set_config("config_json", json);  // not JSON: kept whole
  }
}

void TraceWriter::add_dropped_records(std::int64_t n) {
  std::lock_guard lock(mu_);
  dropped_ += n;
}

void TraceWriter::close() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
  }
  stop_flusher();
  // The last flush and the index builds run on a thread of their own: SQLite
  // allocates from the calling thread's malloc arena, and a producer's arena
  // after a large build and teardown made the index builds of the 1024-rank
  // simulated trace 2.2-2.5 s instead of 1.4-1.65 s (BENCHMARKS.md).
  std::exception_ptr error;
  std::thread([this, &error] {
    try {
      finalize();
    } catch (...) {
      error = std::current_exception();
    }
  }).join();
  if (error) std::rethrow_exception(error);
  if (options_.durable) return;
  db_ = sqlite::Database();  // closes the file
  // A stale WAL beside the output would be replayed into the new trace.
  remove_side_files(path_);
  std::error_code ec;
  std::filesystem::rename(db_path_, path_, ec);
  if (ec) {
    remove_with_side_files(db_path_);
    throw Error(path_ + ": cannot write the trace: " + ec.message());
  }
  published_ = true;
}

void TraceWriter::finalize() {
  flush();
  std::lock_guard flush_lock(flush_mu_);
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  db_.exec("BEGIN");
  if (!orphans_.empty()) {
    // Links of ops that never came: nothing to attach them to.
    auto st = db_.prepare("INSERT OR REPLACE INTO run_config(key, value) VALUES ('trace.op_links_without_op', ?1)");
    st.bind(1, std::to_string(orphans_.size()));
    st.run();
    orphans_.clear();
  }
  db_.exec("UPDATE meta SET value = '1' WHERE key = 'finalized'");
  if (options_.integrity_record) write_integrity_record();
  db_.exec(schema::indexes_sql());
  db_.exec("COMMIT");
  stmts_.reset();
  if (options_.durable) {
    // One self-contained file: fold the WAL back in.
    db_.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    db_.exec("PRAGMA journal_mode=DELETE");
  }
}

// Per table its rows and digest (schema/integrity.h), in meta, for the loader
// to check what it reads against.
void TraceWriter::write_integrity_record() {
  schema::IntegrityRecord record;
  for (const Inserter* i : stmts_->all()) record[i->table()] = i->digest(db_);
  record["op_links"] = op_links_digest_;
  const auto read_back = [this](const std::string& query, int columns) {
    auto st = db_.prepare(query);
    schema::TableDigest d;
    while (st.step()) d.add_row(st, columns);
    return d;
  };
  record["run"] = read_back("SELECT " + std::string(schema::kRunDigestColumns) + " FROM run WHERE id = 1",
                            schema::kRunDigestColumnCount);
  record["meta"] = read_back(std::string(schema::kMetaDigestQuery), 2);
  auto st = db_.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)");
  st.bind(1, schema::kIntegrityKey);
  st.bind(2, schema::encode_integrity(record));
  st.run();
}

WriterStats TraceWriter::stats() const { return {rows_written_.load(), flushes_.load()}; }

}  // namespace moetrace::instrument
