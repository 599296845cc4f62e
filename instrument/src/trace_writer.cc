#include "moetrace/instrument/trace_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "moetrace/schema/error.h"
#include "moetrace/schema/schema.h"

namespace moetrace::instrument {

struct TraceWriter::Pending {
  std::vector<std::pair<StringId, std::string>> strings;
  std::vector<std::pair<std::string, std::string>> config;
  std::vector<DeviceRecord> devices;
  std::vector<RankRecord> ranks;
  std::vector<StreamRecord> streams;
  std::vector<LayerRecord> layers;
  std::vector<KernelRecord> kernels;
  std::vector<MemcpyRecord> memcpys;
  std::vector<MemsetRecord> memsets;
  std::vector<MemoryEventRecord> memory_events;
  std::vector<ApiCallRecord> api_calls;
  std::vector<SyncRecord> syncs;
  std::vector<OverheadRecord> overheads;
  std::vector<NvtxRangeRecord> nvtx;
  std::vector<OpRangeRecord> ops;
  std::vector<OpDepRecord> op_deps;
  std::vector<BufferRecord> buffers;
  std::vector<OpBufferRecord> op_buffers;
  std::vector<ExpertLoadRecord> expert_load;
  std::vector<ExpertPlacementRecord> placements;
  std::size_t rows = 0;
};

struct TraceWriter::Statements {
  explicit Statements(sqlite::Database& db)
      : string(db, "INSERT INTO strings(id, value) VALUES (?1, ?2)"),
        config(db, "INSERT OR REPLACE INTO run_config(key, value) VALUES (?1, ?2)"),
        device(db,
               "INSERT OR REPLACE INTO devices(id, name, uuid, compute_major, compute_minor, "
               "sm_count, memory_bytes, simulated) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        rank(db,
             "INSERT OR REPLACE INTO ranks(rank, device_id, local_rank, host, pid) "
             "VALUES (?1, ?2, ?3, ?4, ?5)"),
        stream(db,
               "INSERT OR REPLACE INTO streams(id, rank, device_id, native_id, role, name, "
               "priority) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
        layer(db,
              "INSERT OR REPLACE INTO layers(layer, kind, num_experts, top_k, model_dim, "
              "hidden_dim, tokens) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
        kernel(db,
               "INSERT INTO kernels(rank, stream_id, start_ns, end_ns, name_id, correlation_id, "
               "grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, registers, "
               "op_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"),
        memcpy(db,
               "INSERT INTO memcpy(rank, stream_id, start_ns, end_ns, bytes, copy_kind, "
               "src_kind, dst_kind, correlation_id, op_id) "
               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
        memset(db,
               "INSERT INTO memset(rank, stream_id, start_ns, end_ns, bytes, value, "
               "correlation_id, op_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        memory_event(db,
                     "INSERT INTO memory_events(rank, ts_ns, kind, address, bytes, memory_kind, "
                     "stream_id, correlation_id, buffer_id) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
        api_call(db,
                 "INSERT INTO api_calls(rank, thread_id, start_ns, end_ns, api, callback_id, "
                 "name_id, correlation_id, return_code) "
                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
        sync(db,
             "INSERT INTO sync_events(rank, stream_id, start_ns, end_ns, kind, correlation_id) "
             "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
        overhead(db,
                 "INSERT INTO overhead(rank, thread_id, start_ns, end_ns, kind) "
                 "VALUES (?1, ?2, ?3, ?4, ?5)"),
        nvtx(db,
             "INSERT INTO nvtx_ranges(rank, thread_id, start_ns, end_ns, domain_id, name_id, "
             "category, color, payload_int, payload_double) "
             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
        op(db,
           "INSERT INTO op_ranges(id, rank, stream_id, kind, name_id, layer, iteration, "
           "micro_batch, chunk, phase, start_ns, end_ns, launch_start_ns, launch_end_ns, flops, "
           "bytes, peer_rank, nvtx_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
           "?12, ?13, ?14, ?15, ?16, ?17, ?18)"),
        op_dep(db, "INSERT OR IGNORE INTO op_deps(op_id, dep_op_id) VALUES (?1, ?2)"),
        buffer(db,
               "INSERT OR REPLACE INTO buffers(id, rank, tag, bytes, memory_kind, layer, chunk, "
               "alloc_ns, free_ns, address) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
        op_buffer(db,
                  "INSERT OR REPLACE INTO op_buffers(op_id, buffer_id, access) "
                  "VALUES (?1, ?2, ?3)"),
        expert_load(db,
                    "INSERT OR REPLACE INTO expert_load(iteration, layer, src_rank, expert, "
                    "tokens) VALUES (?1, ?2, ?3, ?4, ?5)"),
        placement(db,
                  "INSERT OR REPLACE INTO expert_placement(iteration, layer, expert, rank, role) "
                  "VALUES (?1, ?2, ?3, ?4, ?5)") {}

  sqlite::Statement string, config, device, rank, stream, layer, kernel, memcpy, memset,
      memory_event, api_call, sync, overhead, nvtx, op, op_dep, buffer, op_buffer, expert_load,
      placement;
};

namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return {};
  return buf;
}

void bind_text_or_null(sqlite::Statement& st, int i, std::string_view s) {
  if (s.empty()) st.bind_null(i); else st.bind(i, s);
}

}  // namespace

TraceWriter::TraceWriter(const std::string& path, const RunRecord& run, WriterOptions options)
    : path_(path), options_(options), pending_(std::make_unique<Pending>()) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    if (!options_.overwrite) throw Error(path + ": already exists (not overwriting)");
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(path + suffix, ec);
  }
  if (run.world_size < 1) throw Error(path + ": world size must be at least 1");
  db_ = sqlite::Database(path, sqlite::Database::Mode::kCreate);
  db_.exec("PRAGMA journal_mode=WAL");
  db_.exec("PRAGMA synchronous=NORMAL");
  db_.exec("PRAGMA temp_store=MEMORY");
  db_.exec("PRAGMA cache_size=-65536");
  db_.exec("BEGIN");
  db_.exec(schema::tables_sql());
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
    bind_text_or_null(st, 6, run.host.empty() ? host_name() : run.host);
    st.bind(7, std::string_view(MOETRACE_VERSION));
    st.bind(8, static_cast<std::int64_t>(std::time(nullptr)));
    bind_text_or_null(st, 9, run.config_json);
    st.run();
  }
  db_.exec("COMMIT");
  stmts_ = std::make_unique<Statements>(db_);
  flusher_ = std::thread([this] { flusher_loop(); });
}

TraceWriter::~TraceWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moetrace: %s\n", e.what());
  }
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

void TraceWriter::note_time(std::int64_t start, std::int64_t end) {
  min_ts_ = std::min(min_ts_, start);
  max_ts_ = std::max(max_ts_, std::max(start, end));
}

void TraceWriter::maybe_wake_flusher() {
  if (pending_->rows >= options_.flush_rows && !wake_) {
    wake_ = true;
    cv_.notify_one();
  }
}

#define MOETRACE_ADD(Record, field)           \
  void TraceWriter::add(const Record& r) {    \
    std::lock_guard lock(mu_);                \
    pending_->field.push_back(r);             \
    ++pending_->rows;                         \
    maybe_wake_flusher();                     \
  }
#define MOETRACE_ADD_TIMED(Record, field)     \
  void TraceWriter::add(const Record& r) {    \
    std::lock_guard lock(mu_);                \
    pending_->field.push_back(r);             \
    ++pending_->rows;                         \
    note_time(r.start_ns, r.end_ns);          \
    maybe_wake_flusher();                     \
  }
MOETRACE_ADD(DeviceRecord, devices)
MOETRACE_ADD(RankRecord, ranks)
MOETRACE_ADD(StreamRecord, streams)
MOETRACE_ADD(LayerRecord, layers)
MOETRACE_ADD_TIMED(KernelRecord, kernels)
MOETRACE_ADD_TIMED(MemcpyRecord, memcpys)
MOETRACE_ADD_TIMED(MemsetRecord, memsets)
MOETRACE_ADD_TIMED(ApiCallRecord, api_calls)
MOETRACE_ADD_TIMED(SyncRecord, syncs)
MOETRACE_ADD_TIMED(OverheadRecord, overheads)
MOETRACE_ADD(OpDepRecord, op_deps)
MOETRACE_ADD(BufferRecord, buffers)
MOETRACE_ADD(OpBufferRecord, op_buffers)
MOETRACE_ADD(ExpertLoadRecord, expert_load)
MOETRACE_ADD(ExpertPlacementRecord, placements)
#undef MOETRACE_ADD
#undef MOETRACE_ADD_TIMED

void TraceWriter::add(const MemoryEventRecord& r) {
  std::lock_guard lock(mu_);
  pending_->memory_events.push_back(r);
  ++pending_->rows;
  note_time(r.ts_ns, r.ts_ns);
  maybe_wake_flusher();
}

void TraceWriter::add(const NvtxRangeRecord& r) {
  std::lock_guard lock(mu_);
  pending_->nvtx.push_back(r);
  ++pending_->rows;
  note_time(r.start_ns, r.end_ns);
  maybe_wake_flusher();
}

OpId TraceWriter::add(const OpRangeRecord& r) {
  std::lock_guard lock(mu_);
  auto& op = pending_->ops.emplace_back(r);
  if (!op.id.valid()) op.id = OpId(next_op_id_);
  next_op_id_ = std::max(next_op_id_, op.id.value + 1);
  ++pending_->rows;
  note_time(r.start_ns, r.end_ns);
  maybe_wake_flusher();
  return op.id;
}

void TraceWriter::set_config(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  pending_->config.emplace_back(std::string(key), std::string(value));
  ++pending_->rows;
}

void TraceWriter::add_dropped_records(std::int64_t n) {
  std::lock_guard lock(mu_);
  dropped_ += n;
}

void TraceWriter::flusher_loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.flush_interval, [this] { return stop_ || wake_; });
    if (stop_) break;
    wake_ = false;
    lock.unlock();
    try {
      flush();
    } catch (const std::exception& e) {
      // The next explicit flush()/close() reports the error to the caller.
      std::fprintf(stderr, "moetrace: background flush failed: %s\n", e.what());
    }
    lock.lock();
  }
}

void TraceWriter::flush() {
  std::lock_guard flush_lock(flush_mu_);
  auto batch = std::make_unique<Pending>();
  std::int64_t dropped = 0, min_ts = 0, max_ts = 0;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    std::swap(batch, pending_);
    dropped = dropped_;
    min_ts = min_ts_;
    max_ts = max_ts_;
  }
  db_.exec("BEGIN");
  try {
    write_batch(*batch);
    auto st = db_.prepare("UPDATE run SET dropped_records = ?1, start_ns = ?2, end_ns = ?3");
    st.bind(1, dropped);
    if (min_ts <= max_ts) {
      st.bind(2, min_ts);
      st.bind(3, max_ts);
    } else {
      st.bind_null(2);
      st.bind_null(3);
    }
    st.run();
    db_.exec("COMMIT");
  } catch (...) {
    try { db_.exec("ROLLBACK"); } catch (...) {}
    throw;
  }
  rows_written_ += static_cast<std::int64_t>(batch->rows);
  ++flushes_;
}

void TraceWriter::write_batch(Pending& b) {
  auto& s = *stmts_;
  for (const auto& [id, value] : b.strings) {
    s.string.bind(1, std::int64_t{id.value});
    s.string.bind(2, value);
    s.string.run();
  }
  for (const auto& [k, v] : b.config) {
    s.config.bind(1, k);
    s.config.bind(2, v);
    s.config.run();
  }
  for (const auto& r : b.devices) {
    auto& st = s.device;
    st.bind(1, std::int64_t{r.id.value});
    st.bind(2, r.name);
    bind_text_or_null(st, 3, r.uuid);
    st.bind_id(4, r.compute_major);
    st.bind_id(5, r.compute_minor);
    st.bind_id(6, r.sm_count);
    st.bind_id(7, r.memory_bytes);
    st.bind(8, std::int64_t{r.simulated ? 1 : 0});
    st.run();
  }
  for (const auto& r : b.ranks) {
    auto& st = s.rank;
    st.bind(1, std::int64_t{r.rank.value});
    st.bind(2, std::int64_t{r.device.value});
    st.bind_id(3, r.local_rank);
    bind_text_or_null(st, 4, r.host);
    st.bind_id(5, r.pid);
    st.run();
  }
  for (const auto& r : b.streams) {
    auto& st = s.stream;
    st.bind(1, std::int64_t{r.id.value});
    st.bind(2, std::int64_t{r.rank.value});
    st.bind_id(3, r.device.value);
    st.bind_id(4, r.native_id);
    st.bind(5, r.role);
    bind_text_or_null(st, 6, r.name);
    st.bind(7, std::int64_t{r.priority});
    st.run();
  }
  for (const auto& r : b.layers) {
    auto& st = s.layer;
    st.bind(1, std::int64_t{r.layer});
    st.bind(2, r.kind);
    st.bind_id(3, r.num_experts);
    st.bind_id(4, r.top_k);
    st.bind_id(5, r.model_dim);
    st.bind_id(6, r.hidden_dim);
    st.bind_id(7, r.tokens);
    st.run();
  }
  for (const auto& r : b.kernels) {
    auto& st = s.kernel;
    st.bind(1, std::int64_t{r.rank.value});
    st.bind(2, std::int64_t{r.stream.value});
    st.bind(3, r.start_ns);
    st.bind(4, r.end_ns);
    st.bind(5, std::int64_t{r.name.value});
    if (r.correlation_id > 0) st.bind(6, r.correlation_id); else st.bind_null(6);
    for (int i = 0; i < 3; ++i) st.bind_id(7 + i, r.grid[i]);
    for (int i = 0; i < 3; ++i) st.bind_id(10 + i, r.block[i]);
    st.bind_id(13, r.shared_bytes);
    st.bind_id(14, r.registers);
    st.bind_id(15, r.op.value);
    st.run();
  }
  for (const auto& r : b.memcpys) {
    auto& st = s.memcpy;
    st.bind(1, std::int64_t{r.rank.value});
    st.bind(2, std::int64_t{r.stream.value});
    st.bind(3, r.start_ns);
    st.bind(4, r.end_ns);
    st.bind(5, r.bytes);
    st.bind(6, static_cast<std::int64_t>(r.copy_kind));
    st.bind(7, static_cast<std::int64_t>(r.src_kind));
    st.bind(8, static_cast<std::int64_t>(r.dst_kind));
    if (r.correlation_id > 0) st.bind(9, r.correlation_id); else st.bind_null(9);
    st.bind_id(10, r.op.value);
    st.run();
  }
  for (const auto& r : b.memsets) {
    auto& st = s.memset;
    st.bind(1, std::int64_t{r.rank.value});
    st.bind(2, std::int64_t{r.stream.value});
    st.bind(3, r.start_ns);
    st.bind(4, r.end_ns);
    st.bind(5, r.bytes);
    st.bind(6, std::int64_t{r.value});
    if (r.correlation_id > 0) st.bind(7, r.correlation_id); else st.bind_null(7);
    st.bind_id(8, r.op.value);
    st.run();
  }
  for (const auto& r : b.memory_events) {
    auto& st = s.memory_event;
    st.bind(1, std::int64_t{r.rank.value});
    st.bind(2, r.ts_ns);
    st.bind(3, std::int64_t{r.alloc ? 1 : 0});
    st.bind(4, static_cast<std::int64_t>(r.address));
    st.bind(5, r.bytes);
    st.bind(6, static_cast<std::int64_t>(r.memory_kind));
    st.bind_id(7, r.stream.value);
    if (r.correlation_id > 0) st.bind(8, r.correlation_id); else st.bind_null(8);
    st.bind_id(9, r.buffer.value);
    st.run();
  }
  for (const auto& r : b.api_calls) {
    auto& st = s.api_call;
    st.bind(1, std::int64_t{r.rank.value});
    st.bind(2, r.thread_id);
    st.bind(3, r.start_ns);
    st.bind(4, r.end_ns);
    st.bind(5, static_cast<std::int64_t>(r.api));
    st.bind_id(6, r.callback_id);
    st.bind(7, std::int64_t{r.name.value});
    st.bind(8, r.correlation_id);
    st.bind(9, std::int64_t{r.return_code});
    st.run();
  }
  for (const auto& r : b.syncs) {
    auto& st = s.sync;
    st.bind(1, std::int64_t{r.rank.value});
    st.bind_id(2, r.stream.value);
    st.bind(3, r.start_ns);
    st.bind(4, r.end_ns);
    st.bind(5, std::int64_t{r.kind});
    if (r.correlation_id > 0) st.bind(6, r.correlation_id); else st.bind_null(6);
    st.run();
  }
  for (const auto& r : b.overheads) {
    auto& st = s.overhead;
    st.bind(1, std::int64_t{r.rank.value});
    st.bind_id(2, r.thread_id);
    st.bind(3, r.start_ns);
    st.bind(4, r.end_ns);
    st.bind(5, r.kind);
    st.run();
  }
  for (const auto& r : b.nvtx) {
    auto& st = s.nvtx;
    st.bind(1, std::int64_t{r.rank.value});
    st.bind(2, r.thread_id);
    st.bind(3, r.start_ns);
    st.bind_id(4, r.end_ns);
    st.bind_id(5, r.domain.value);
    st.bind(6, std::int64_t{r.name.value});
    st.bind_id(7, r.category);
    st.bind_id(8, r.color);
    if (r.payload_int) st.bind(9, *r.payload_int); else st.bind_null(9);
    if (r.payload_double) st.bind(10, *r.payload_double); else st.bind_null(10);
    st.run();
  }
  for (const auto& r : b.ops) {
    auto& st = s.op;
    st.bind(1, r.id.value);
    st.bind(2, std::int64_t{r.rank.value});
    st.bind(3, std::int64_t{r.stream.value});
    st.bind(4, static_cast<std::int64_t>(r.kind));
    st.bind_id(5, r.name.value);
    st.bind_id(6, r.layer);
    st.bind_id(7, r.iteration);
    st.bind_id(8, r.micro_batch);
    st.bind_id(9, r.chunk);
    st.bind(10, static_cast<std::int64_t>(r.phase));
    st.bind(11, r.start_ns);
    st.bind(12, r.end_ns);
    st.bind_id(13, r.launch_start_ns);
    st.bind_id(14, r.launch_end_ns);
    if (r.flops >= 0) st.bind(15, r.flops); else st.bind_null(15);
    st.bind_id(16, r.bytes);
    st.bind_id(17, r.peer.value);
    st.bind_id(18, r.nvtx_id);
    st.run();
  }
  for (const auto& r : b.op_deps) {
    s.op_dep.bind(1, r.op.value);
    s.op_dep.bind(2, r.dep.value);
    s.op_dep.run();
  }
  for (const auto& r : b.buffers) {
    auto& st = s.buffer;
    st.bind(1, r.id.value);
    st.bind(2, std::int64_t{r.rank.value});
    st.bind(3, r.tag);
    st.bind(4, r.bytes);
    st.bind(5, static_cast<std::int64_t>(r.memory_kind));
    st.bind_id(6, r.layer);
    st.bind_id(7, r.chunk);
    st.bind_id(8, r.alloc_ns);
    st.bind_id(9, r.free_ns);
    if (r.address != 0) st.bind(10, static_cast<std::int64_t>(r.address)); else st.bind_null(10);
    st.run();
  }
  for (const auto& r : b.op_buffers) {
    s.op_buffer.bind(1, r.op.value);
    s.op_buffer.bind(2, r.buffer.value);
    s.op_buffer.bind(3, static_cast<std::int64_t>(r.access));
    s.op_buffer.run();
  }
  for (const auto& r : b.expert_load) {
    auto& st = s.expert_load;
    st.bind(1, std::int64_t{r.iteration});
    st.bind(2, std::int64_t{r.layer});
    st.bind(3, std::int64_t{r.src_rank});
    st.bind(4, std::int64_t{r.expert});
    st.bind(5, r.tokens);
    st.run();
  }
  for (const auto& r : b.placements) {
    auto& st = s.placement;
    st.bind(1, std::int64_t{r.iteration});
    st.bind(2, std::int64_t{r.layer});
    st.bind(3, std::int64_t{r.expert});
    st.bind(4, std::int64_t{r.rank});
    st.bind(5, r.role);
    st.run();
  }
}

void TraceWriter::close() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  flush();
  std::lock_guard flush_lock(flush_mu_);
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  db_.exec("BEGIN");
  db_.exec(schema::indexes_sql());
  db_.exec("UPDATE meta SET value = '1' WHERE key = 'finalized'");
  db_.exec("COMMIT");
  stmts_.reset();
  // One self-contained file: fold the WAL back in.
  db_.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  db_.exec("PRAGMA journal_mode=DELETE");
}

WriterStats TraceWriter::stats() const { return {rows_written_.load(), flushes_.load()}; }

}  // namespace moetrace::instrument
