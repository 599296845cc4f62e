#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/projection.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/importers/imported_trace.h"
#include "moetrace/instrument/trace_writer.h"
#include "trace_loader_internal.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/op_links.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/trace_file.h"

namespace moetrace::analyzer {
void throw_empty_trace(const std::string& path) {
  throw Error(path + ": the trace holds no events (was the run empty, or killed before its first flush?)");
}

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

  Trace load() {
    if (imported_) take_imported();
    else read_tables();
    build_tracks();
    trace_.index_launching_calls();
    if (options_.recognize && trace_.ops.empty()) {
      progress("recognising MoE ops", 0.993);
      if (options_.moe_rules.empty()) {
        recognize_moe(trace_, builtin_moe_rules());
      } else {
        const auto user = load_moe_rules(options_.moe_rules);
        recognize_moe(trace_, combine_moe_rules(&user));
      }
    }
    check_references();
    if (options_.project) {
      progress("projecting", 0.995);
      project_activities(trace_);
    }
    if (trace_.activities.empty() && trace_.ops.empty() && trace_.api_calls.empty() &&
        trace_.nvtx.empty() && trace_.memory_events.empty())
      throw_empty_trace(trace_.run.path);
    progress("done", 1.0);
    return std::move(trace_);
  }

 private:
  void read_tables() {
    load_run(db_, trace_.run, &read_);
    load_integrity_record();
    verify("run");
    verify("run_config");
    verify("meta");
    load_strings();
    load_devices_ranks_streams();
    if (options_.progress) count_rows();  // the total only scales the progress fraction
    load_activities();
    trace_.classify_kernel_names();
    load_ops();
    if (options_.api_calls) {
      load_api_calls();
      load_sync_events();
    }
    if (options_.nvtx) {
      load_nvtx();
      load_autograd();
      load_input_shapes();
    }
    if (options_.memory) load_memory();
    load_moe_tables();
    load_collectives();
  }

 public:
  // `digests`: where to add the digests of the run row, run_config and meta.
  static void load_run(sqlite::Database& db, RunInfo& run, schema::IntegrityRecord* digests = nullptr) {
    run.schema_version = static_cast<int>(db.pragma_int("user_version").value_or(0));
    auto st = db.prepare("SELECT " + std::string(schema::kRunDigestColumns) + " FROM run WHERE id = 1");
    if (!st.step()) throw Error(run.path + ": the trace has no run record (damaged file?)");
    if (digests) (*digests)["run"].add_row(st, schema::kRunDigestColumnCount);
    run.name = st.text(0);
    run.backend = st.text(1);
    run.variant = st.text(2);
    run.simulated = st.int64(3) != 0;
    run.world_size = static_cast<int>(st.int64(4));
    run.host = st.text(5);
    run.moetrace_version = st.text(6);
    run.created_unix_s = st.int64(7);
    run.start_ns = st.int64_or(8, 0);
    run.end_ns = st.int64_or(9, 0);
    run.config_json = st.text(10);
    run.dropped_records = st.int64(11);
    auto meta = db.prepare(std::string(schema::kMetaDigestQuery));
    while (meta.step()) {
      if (digests) (*digests)["meta"].add_row(meta, 2);
      if (meta.text(0) == "finalized") run.finalized = meta.text(1) == "1";
    }
    auto cfg = db.prepare("SELECT key, value FROM run_config ORDER BY key");
    while (cfg.step()) {
      if (digests) (*digests)["run_config"].add_row(cfg, 2);
      run.config.emplace_back(std::string(cfg.text(0)), std::string(cfg.text(1)));
    }
  }

 private:
  void progress(std::string_view stage, double fraction) {
    if (options_.progress) options_.progress(stage, fraction);
  }
  void step_progress(std::string_view stage) {
    ++rows_done_;
    if ((rows_done_ & 0xFFFF) == 0 && rows_total_ > 0)
      progress(stage, std::min(0.99, static_cast<double>(rows_done_) / static_cast<double>(rows_total_)));
  }

  void count_rows() {
    for (const char* t : {"kernels", "memcpy", "memset", "op_ranges", "api_calls", "nvtx_ranges",
                          "memory_events"})
      rows_total_ += db_.query_int(std::string("SELECT count(*) FROM ") + t).value_or(0);
  }

  void load_strings() {
    progress("strings", 0.0);
    auto n = db_.query_int("SELECT max(id) FROM strings").value_or(-1);
    if (n < -1 || n > (1 << 30)) throw Error(trace_.run.path + ": string table is damaged");
    trace_.strings.resize(static_cast<std::size_t>(n + 1));
    auto st = db_.prepare("SELECT id, value FROM strings");
    auto* strings_digest = digest("strings");
    while (st.step()) {
      if (strings_digest) strings_digest->add_row(st, 2);
      auto id = st.int64(0);
      // max(id) above may disagree with the rows of a damaged file (an id
      // stored as text sorts after every integer).
      if (id >= static_cast<std::int64_t>(trace_.strings.size()))
        throw Error(trace_.run.path + ": string table is damaged");
      if (id >= 0) trace_.strings[static_cast<std::size_t>(id)] = st.text(1);
    }
    verify("strings");
  }

  void load_devices_ranks_streams() {
    auto d = db_.prepare(
        "SELECT id, name, uuid, compute_major, compute_minor, sm_count, memory_bytes, simulated "
        "FROM devices ORDER BY id");
    auto* devices_digest = digest("devices");
    while (d.step()) {
      if (devices_digest) devices_digest->add_row(d, 8);
      Device dev;
      dev.id = DeviceId(static_cast<std::int32_t>(d.int64(0)));
      dev.name = d.text(1);
      dev.uuid = d.text(2);
      dev.compute_major = static_cast<int>(d.int64_or(3, -1));
      dev.compute_minor = static_cast<int>(d.int64_or(4, -1));
      dev.sm_count = static_cast<int>(d.int64_or(5, -1));
      dev.memory_bytes = d.int64_or(6, -1);
      dev.simulated = d.int64(7) != 0;
      trace_.devices.push_back(std::move(dev));
    }
    auto r = db_.prepare("SELECT rank, device_id, local_rank, host, pid FROM ranks ORDER BY rank");
    auto* ranks_digest = digest("ranks");
    while (r.step()) {
      if (ranks_digest) ranks_digest->add_row(r, 5);
      Rank rank;
      check_index(r.int64(0), "ranks", "rank");
      rank.rank = RankId(static_cast<std::int32_t>(r.int64(0)));
      rank_limit_ = std::max(rank_limit_, std::int64_t{rank.rank.value} + 1);
      rank.device = DeviceId(static_cast<std::int32_t>(r.int64(1)));
      rank.local_rank = static_cast<int>(r.int64_or(2, -1));
      rank.host = r.text(3);
      rank.pid = r.int64_or(4, -1);
      trace_.ranks.push_back(std::move(rank));
    }
    auto s = db_.prepare(
        "SELECT id, rank, device_id, native_id, role, name, priority FROM streams ORDER BY rank, id");
    auto* streams_digest = digest("streams");
    while (s.step()) {
      if (streams_digest) streams_digest->add_row(s, 7);
      Stream st;
      st.id = StreamId(static_cast<std::int32_t>(s.int64(0)));
      check_index(s.int64(1), "streams", "rank");
      st.rank = RankId(static_cast<std::int32_t>(s.int64(1)));
      rank_limit_ = std::max(rank_limit_, std::int64_t{st.rank.value} + 1);
      st.device = DeviceId(static_cast<std::int32_t>(s.int64_or(2, -1)));
      st.native_id = s.int64_or(3, -1);
      st.role = s.text(4);
      st.name = s.text(5);
      trace_.streams.push_back(std::move(st));
    }
    auto l = db_.prepare(
        "SELECT layer, kind, num_experts, top_k, model_dim, hidden_dim, tokens FROM layers "
        "ORDER BY layer");
    auto* layers_digest = digest("layers");
    while (l.step()) {
      if (layers_digest) layers_digest->add_row(l, 7);
      Layer layer;
      layer.layer = static_cast<int>(l.int64(0));
      layer.kind = l.text(1);
      layer.num_experts = static_cast<int>(std::clamp<std::int64_t>(l.int64_or(2, -1), -1, 1 << 20));
      layer.top_k = static_cast<int>(l.int64_or(3, -1));
      layer.model_dim = l.int64_or(4, -1);
      layer.hidden_dim = l.int64_or(5, -1);
      layer.tokens = l.int64_or(6, -1);
      trace_.layers.push_back(std::move(layer));
    }
    for (const char* t : {"devices", "ranks", "streams", "layers"}) verify(t);
  }

  // Index of a stream id, registering streams that events name but the
  // streams table lacks (a killed run may have flushed events first).
  std::int32_t stream_slot(std::int64_t stream_id, RankId rank) {
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
  void load_integrity_record() {
    auto st = db_.prepare("SELECT value FROM meta WHERE key = 'integrity'");
    if (!st.step()) {
      trace_.run.integrity = "not recorded";
      return;
    }
    record_ = schema::parse_integrity(st.text(0));
    if (!record_) throw Error(trace_.run.path + ": the integrity record in meta is damaged; damaged trace");
    trace_.run.integrity = "verified";
  }

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
  void verify(std::string_view table) {
    if (!record_) return;
    const auto& got = read_[std::string(table)];
    const auto it = record_->find(table);
    if (it == record_->end())
      throw Error(fmt::format("{}: the integrity record lacks table {}; damaged trace", trace_.run.path, table));
    if (it->second.rows != got.rows)
      throw Error(fmt::format("{}: table {} is damaged: {} rows read, the writer recorded {}", trace_.run.path,
                              table, got.rows, it->second.rows));
    if (it->second.sum != got.sum)
      throw Error(fmt::format("{}: table {} is damaged: its rows differ from those the writer recorded",
                              trace_.run.path, table));
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
    if (v < 0 || v >= static_cast<std::int64_t>(trace_.strings.size()))
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
  void check_references() {
    auto& t = trace_;
    std::sort(unknown_streams_.begin(), unknown_streams_.end());
    note_damage(static_cast<std::int64_t>(unknown_streams_.size()),
                "stream id(s) named by events are missing from table streams (the events are shown on "
                "streams named \"stream <id>\")");
    std::vector<std::int64_t> buffer_ids;
    for (const auto& b : t.buffers) buffer_ids.push_back(b.id.value);
    std::sort(buffer_ids.begin(), buffer_ids.end());
    const auto has_buffer = [&](BufferId b) { return std::binary_search(buffer_ids.begin(), buffer_ids.end(), b.value); };
    const auto dangling_deps = std::erase_if(t.op_deps, [&](const OpDep& d) {
      return t.op_index(d.op) < 0 || t.op_index(d.dep) < 0;
    });
    note_damage(static_cast<std::int64_t>(dangling_deps),
                "dependencies in op_ranges.deps name ops that op_ranges lacks (left out)");
    for (const auto& l : t.op_buffers)
      checked_enum(static_cast<std::int64_t>(l.access), 1, 3, "op_ranges.buffers", "access");
    if (options_.memory) {
      const auto dangling = std::erase_if(t.op_buffers, [&](const OpBuffer& l) {
        return t.op_index(l.op) < 0 || !has_buffer(l.buffer);
      });
      note_damage(static_cast<std::int64_t>(dangling),
                  "buffer accesses in op_ranges.buffers name buffers or ops that the trace lacks (left out)");
      std::int64_t events = 0;
      for (auto& e : t.memory_events)
        if (e.buffer.valid() && !has_buffer(e.buffer)) {
          e.buffer = BufferId();
          ++events;
        }
      note_damage(events, "memory_events rows name buffers that table buffers lacks (their buffer left out)");
    }
    if (options_.nvtx) {
      std::vector<std::int64_t> ids;
      for (const auto& r : t.nvtx) ids.push_back(r.id);
      std::sort(ids.begin(), ids.end());
      std::int64_t ops = 0;
      for (auto& op : t.ops)
        if (op.nvtx_id >= 0 && !std::binary_search(ids.begin(), ids.end(), op.nvtx_id)) {
          op.nvtx_id = -1;
          ++ops;
        }
      note_damage(ops, "op_ranges rows name NVTX ranges that nvtx_ranges lacks (their range left out)");
    }
    note_damage(activities_without_op_,
                "kernels, memcpy or memset rows name ops that op_ranges lacks (left unattributed)");
  }

  void check_times(std::int64_t start, std::int64_t end, const char* table) {
    if (end < start)
      throw Error(trace_.run.path + ": " + table + " has an event that ends before it starts (" +
                  std::to_string(start) + " > " + std::to_string(end) + " ns); damaged trace");
  }

  void load_activities() {
    auto n = db_.query_int("SELECT (SELECT count(*) FROM kernels) + (SELECT count(*) FROM memcpy)"
                           " + (SELECT count(*) FROM memset)")
                 .value_or(0);
    trace_.activities.reserve(static_cast<std::size_t>(n));
    std::map<std::int64_t, std::int32_t> launch_index;
    auto lc = db_.prepare(
        "SELECT id, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, registers "
        "FROM launch_configs");
    auto* launch_configs_digest = digest("launch_configs");
    while (lc.step()) {
      if (launch_configs_digest) launch_configs_digest->add_row(lc, 9);
      LaunchConfig c;
      for (int i = 0; i < 3; ++i) c.grid[i] = static_cast<std::int32_t>(lc.int64(1 + i));
      for (int i = 0; i < 3; ++i) c.block[i] = static_cast<std::int32_t>(lc.int64(4 + i));
      c.shared_bytes = static_cast<std::int32_t>(lc.int64_or(7, -1));
      c.registers = static_cast<std::int32_t>(lc.int64_or(8, -1));
      launch_index.emplace(lc.int64(0), static_cast<std::int32_t>(trace_.launch_configs.size()));
      trace_.launch_configs.push_back(c);
    }
    auto k = db_.prepare(
        "SELECT rank, stream_id, start_ns, end_ns, name_id, correlation_id, launch_id, op_id "
        "FROM kernels");
    verify("launch_configs");
    auto* kernels_digest = digest("kernels");
    while (k.step()) {
      if (kernels_digest) kernels_digest->add_row(k, 8);
      Activity a;
      a.type = ActivityType::kKernel;
      a.rank = checked_rank(k.int64(0), "kernels");
      a.stream = stream_slot(k.int64(1), a.rank);
      a.start_ns = k.int64(2);
      a.end_ns = k.int64(3);
      check_times(a.start_ns, a.end_ns, "kernels");
      a.name = checked_string(k.int64(4), "kernels");
      a.correlation_id = k.int64_or(5, 0);
      if (!k.is_null(6)) {
        auto it = launch_index.find(k.int64(6));
        if (it == launch_index.end())
          throw Error(trace_.run.path + ": kernels names launch config " +
                      std::to_string(k.int64(6)) + " that launch_configs lacks; damaged trace");
        a.launch = it->second;
      }
      activity_op_ids_.push_back(k.int64_or(7, -1));
      trace_.activities.push_back(a);
      step_progress("kernels");
    }
    auto m = db_.prepare(
        "SELECT rank, stream_id, start_ns, end_ns, bytes, copy_kind, src_kind, dst_kind, correlation_id, "
        "op_id FROM memcpy");
    verify("kernels");
    auto* memcpy_digest = digest("memcpy");
    while (m.step()) {
      if (memcpy_digest) memcpy_digest->add_row(m, 10);
      Activity a;
      a.type = ActivityType::kMemcpy;
      a.rank = checked_rank(m.int64(0), "memcpy");
      a.stream = stream_slot(m.int64(1), a.rank);
      a.start_ns = m.int64(2);
      a.end_ns = m.int64(3);
      check_times(a.start_ns, a.end_ns, "memcpy");
      a.bytes = m.int64(4);
      a.copy_kind = static_cast<std::uint8_t>(checked_enum(m.int64(5), 0, 10, "memcpy", "copy_kind"));
      a.src_kind = static_cast<std::uint8_t>(checked_enum(m.int64_or(6, 0), 0, 4, "memcpy", "src_kind"));
      a.dst_kind = static_cast<std::uint8_t>(checked_enum(m.int64_or(7, 0), 0, 4, "memcpy", "dst_kind"));
      a.correlation_id = m.int64_or(8, 0);
      activity_op_ids_.push_back(m.int64_or(9, -1));
      trace_.activities.push_back(a);
      step_progress("memcpy");
    }
    auto s = db_.prepare(
        "SELECT rank, stream_id, start_ns, end_ns, bytes, value, correlation_id, op_id FROM memset");
    verify("memcpy");
    auto* memset_digest = digest("memset");
    while (s.step()) {
      if (memset_digest) memset_digest->add_row(s, 8);
      Activity a;
      a.type = ActivityType::kMemset;
      a.rank = checked_rank(s.int64(0), "memset");
      a.stream = stream_slot(s.int64(1), a.rank);
      a.start_ns = s.int64(2);
      a.end_ns = s.int64(3);
      check_times(a.start_ns, a.end_ns, "memset");
      a.bytes = s.int64(4);
      a.correlation_id = s.int64_or(6, 0);
      activity_op_ids_.push_back(s.int64_or(7, -1));
      trace_.activities.push_back(a);
      step_progress("memset");
    }
    verify("memset");
  }

  void load_ops() {
    auto n = db_.query_int("SELECT count(*) FROM op_ranges").value_or(0);
    trace_.ops.reserve(static_cast<std::size_t>(n));
    // Since version 2 an op's deps and buffer accesses are on its row: read
    // them in this same pass (load_v1_op_links reads version 1's tables).
    const bool links = trace_.run.schema_version >= 2;
    auto st = db_.prepare(
        std::string("SELECT id, rank, stream_id, kind, name_id, layer, iteration, micro_batch, chunk, phase, "
                    "start_ns, end_ns, launch_start_ns, launch_end_ns, flops, bytes, peer_rank, nvtx_id") +
        (links ? ", deps, buffers" : "") + " FROM op_ranges");
    const auto kinds = all_op_kinds().size();
    std::vector<std::int64_t> deps;
    std::vector<schema::BufferLink> accesses;
    auto* ops_digest = links ? digest("op_ranges") : nullptr;
    auto* links_digest = links ? digest("op_links") : nullptr;
    while (st.step()) {
      if (ops_digest) {
        schema::RowHash h, l;
        for (int c = 0; c < schema::kOpLinkColumn; ++c) h.add_column(st, c, c);
        ops_digest->add(h.value());
        l.add_column(st, 0, 0);
        l.add_column(st, schema::kOpLinkColumn, 1);
        l.add_column(st, schema::kOpLinkColumn + 1, 2);
        links_digest->add(l.value());
      }
      OpRange op;
      op.id = OpId(st.int64(0));
      op.rank = checked_rank(st.int64(1), "op_ranges");
      op.stream = stream_slot(st.int64(2), op.rank);
      auto kind = st.int64(3);
      if (kind < 0 || static_cast<std::size_t>(kind) >= kinds)
        throw Error(trace_.run.path + ": op_ranges has unknown op kind " + std::to_string(kind) +
                    " (written by a newer moetrace?)");
      op.kind = static_cast<OpKind>(kind);
      op.name = st.is_null(4) ? StringId() : checked_string(st.int64(4), "op_ranges");
      op.layer = static_cast<std::int32_t>(st.int64_or(5, -1));
      op.iteration = static_cast<std::int32_t>(st.int64_or(6, -1));
      op.micro_batch = static_cast<std::int32_t>(st.int64_or(7, -1));
      op.chunk = static_cast<std::int32_t>(st.int64_or(8, -1));
      op.phase = static_cast<Phase>(checked_enum(st.int64(9), 0, 2, "op_ranges", "phase"));
      op.start_ns = st.int64(10);
      op.end_ns = st.int64(11);
      check_times(op.start_ns, op.end_ns, "op_ranges");
      op.launch_start_ns = st.int64_or(12, -1);
      op.launch_end_ns = st.int64_or(13, -1);
      op.flops = st.is_null(14) ? -1.0 : st.real(14);
      op.bytes = st.int64_or(15, -1);
      op.peer = RankId(static_cast<std::int32_t>(st.int64_or(16, -1)));
      op.nvtx_id = st.int64_or(17, -1);
      if (links) {
        const auto column = [&st](int i) {
          return st.is_null(i) ? std::nullopt : std::optional<std::string_view>(st.text(i));
        };
        add_op_links(op.id, column(18), column(19), deps, accesses);
      }
      trace_.ops.push_back(op);
      step_progress("op ranges");
    }
    if (links) {
      verify("op_ranges");
      verify("op_links");
    }
    load_op_recv_bytes();
  }

  // The op_recv_bytes table (absent from traces older than it): the bytes an
  // all-to-all op receives, onto its op.
  void load_op_recv_bytes() {
    if (!db_.has_table("op_recv_bytes")) return;
    std::unordered_map<std::int64_t, std::size_t> index;
    auto st = db_.prepare("SELECT op_id, bytes FROM op_recv_bytes");
    auto* recv_digest = digest("op_recv_bytes");
    while (st.step()) {
      if (recv_digest) recv_digest->add_row(st, 2);
      if (index.empty())
        for (std::size_t i = 0; i < trace_.ops.size(); ++i) index.emplace(trace_.ops[i].id.value, i);
      const auto it = index.find(st.int64(0));
      if (it == index.end() || st.int64(1) < 0)
        throw Error(fmt::format("{}: op_recv_bytes names op {} that op_ranges lacks, or a negative size; damaged trace",
                                trace_.run.path, st.int64(0)));
      trace_.ops[it->second].recv_bytes = st.int64(1);
    }
    verify("op_recv_bytes");
  }

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

  void load_api_calls() {
    auto st = db_.prepare(
        "SELECT rank, thread_id, start_ns, end_ns, api, name_id, correlation_id, return_code "
        "FROM api_calls");
    trace_.api_calls.reserve(trace_.api_calls.size() + recorded_rows("api_calls"));
    auto* api_calls_digest = digest("api_calls");
    while (st.step()) {
      if (api_calls_digest) api_calls_digest->add_row(st, 8);
      ApiCall a;
      a.rank = checked_rank(st.int64(0), "api_calls");
      a.thread_id = st.int64(1);
      a.start_ns = st.int64(2);
      a.end_ns = st.int64(3);
      check_times(a.start_ns, a.end_ns, "api_calls");
      a.api = static_cast<schema::ApiKind>(checked_enum(st.int64(4), 1, 2, "api_calls", "api"));
      a.name = checked_string(st.int64(5), "api_calls");
      a.correlation_id = st.int64(6);
      a.return_code = static_cast<std::int32_t>(st.int64_or(7, 0));
      trace_.api_calls.push_back(a);
      step_progress("api calls");
    }
    verify("api_calls");
    sort_api_calls();
  }

  // GPU-side synchronisation records, for the critical path (critical_path.h).
  // Not checked against the integrity record: a damaged row costs a sync edge.
  void load_sync_events() {
    if (!db_.has_table("sync_events")) return;
    auto st = db_.prepare("SELECT rank, stream_id, start_ns, end_ns, kind, correlation_id FROM sync_events");
    while (st.step()) {
      SyncEvent e;
      e.rank = checked_rank(st.int64(0), "sync_events");
      e.stream = StreamId(static_cast<std::int32_t>(st.int64_or(1, -1)));
      e.start_ns = st.int64(2);
      e.end_ns = st.int64(3);
      if (e.end_ns < e.start_ns) continue;
      e.kind = static_cast<std::int32_t>(st.int64(4));
      e.correlation_id = st.int64_or(5, 0);
      trace_.sync_events.push_back(e);
    }
    sort_sync_events();
  }

  void sort_sync_events() {
    std::stable_sort(trace_.sync_events.begin(), trace_.sync_events.end(), [](const SyncEvent& a, const SyncEvent& b) {
      return std::tie(a.rank, a.start_ns) < std::tie(b.rank, b.start_ns);
    });
  }

  void sort_api_calls() {
    std::stable_sort(trace_.api_calls.begin(), trace_.api_calls.end(),
                     [](const ApiCall& a, const ApiCall& b) {
                       return std::tie(a.correlation_id, a.rank) < std::tie(b.correlation_id, b.rank);
                     });
  }

  void load_nvtx() {
    auto st = db_.prepare(
        "SELECT rank, thread_id, start_ns, end_ns, domain_id, name_id, category, color, payload_int, "
        "payload_double, id FROM nvtx_ranges");
    trace_.nvtx.reserve(trace_.nvtx.size() + recorded_rows("nvtx_ranges"));
    auto* nvtx_ranges_digest = digest("nvtx_ranges");
    while (st.step()) {
      if (nvtx_ranges_digest) nvtx_ranges_digest->add_row(st, 11);  // the rowid last, as the writer hashes it
      NvtxRange r;
      r.id = st.int64(10);
      r.rank = checked_rank(st.int64(0), "nvtx_ranges");
      r.thread_id = st.int64(1);
      r.start_ns = st.int64(2);
      r.end_ns = st.int64_or(3, -1);
      if (r.end_ns >= 0) check_times(r.start_ns, r.end_ns, "nvtx_ranges");
      r.domain = st.is_null(4) ? StringId() : checked_string(st.int64(4), "nvtx_ranges");
      r.name = checked_string(st.int64(5), "nvtx_ranges");
      r.category = static_cast<std::int32_t>(st.int64_or(6, -1));
      r.has_payload_int = !st.is_null(8);
      r.payload_int = st.int64_or(8, 0);
      trace_.nvtx.push_back(r);
      step_progress("nvtx");
    }
    verify("nvtx_ranges");
    sort_nvtx();
  }

  void sort_nvtx() {
    std::sort(trace_.nvtx.begin(), trace_.nvtx.end(), [](const NvtxRange& a, const NvtxRange& b) {
      return std::tie(a.rank, a.thread_id, a.start_ns) < std::tie(b.rank, b.thread_id, b.start_ns);
    });
  }

  void load_memory() {
    auto st = db_.prepare(
        "SELECT rank, ts_ns, kind, address, bytes, memory_kind, stream_id, correlation_id, buffer_id, id "
        "FROM memory_events");
    auto* memory_events_digest = digest("memory_events");
    while (st.step()) {
      if (memory_events_digest) memory_events_digest->add_row(st, 10);
      MemoryEvent e;
      e.rank = checked_rank(st.int64(0), "memory_events");
      e.ts_ns = st.int64(1);
      e.alloc = checked_enum(st.int64(2), 0, 1, "memory_events", "kind") != 0;
      e.address = static_cast<std::uint64_t>(st.int64(3));
      e.bytes = st.int64(4);
      e.memory_kind = static_cast<schema::MemoryKind>(checked_enum(st.int64(5), 0, 4, "memory_events", "memory_kind"));
      e.buffer = BufferId(st.int64_or(8, -1));
      trace_.memory_events.push_back(e);
      step_progress("memory");
    }
    sort_memory_events();
    auto b = db_.prepare(
        "SELECT id, rank, tag, bytes, memory_kind, layer, chunk, alloc_ns, free_ns, address FROM buffers "
        "ORDER BY id");
    verify("memory_events");
    auto* buffers_digest = digest("buffers");
    while (b.step()) {
      if (buffers_digest) buffers_digest->add_row(b, 10);
      Buffer buf;
      buf.id = BufferId(b.int64(0));
      buf.rank = checked_rank(b.int64(1), "buffers");
      buf.tag = b.text(2);
      buf.bytes = b.int64(3);
      buf.memory_kind = static_cast<schema::MemoryKind>(checked_enum(b.int64(4), 0, 4, "buffers", "memory_kind"));
      buf.layer = static_cast<std::int32_t>(b.int64_or(5, -1));
      buf.chunk = static_cast<std::int32_t>(b.int64_or(6, -1));
      buf.alloc_ns = b.int64_or(7, -1);
      buf.free_ns = b.int64_or(8, -1);
      trace_.buffers.push_back(std::move(buf));
    }
    verify("buffers");
  }

  void sort_memory_events() {
    std::stable_sort(trace_.memory_events.begin(), trace_.memory_events.end(),
                     [](const MemoryEvent& a, const MemoryEvent& b) {
                       return std::tie(a.rank, a.ts_ns) < std::tie(b.rank, b.ts_ns);
                     });
  }

  // Plan dependencies and (with the memory tables) op buffer accesses of a
  // version-1 trace, which kept them in tables of their own.
  void load_v1_op_links() {
    auto d = db_.prepare("SELECT op_id, dep_op_id FROM op_deps");
    while (d.step()) trace_.op_deps.push_back({OpId(d.int64(0)), OpId(d.int64(1))});
    if (!options_.memory) return;
    auto ob = db_.prepare("SELECT op_id, buffer_id, access FROM op_buffers");
    while (ob.step())
      trace_.op_buffers.push_back(
          {OpId(ob.int64(0)), BufferId(ob.int64(1)), static_cast<schema::Access>(ob.int64(2))});
  }

  void load_moe_tables() {
    if (trace_.run.schema_version < 2) load_v1_op_links();
    auto l = db_.prepare(
        "SELECT iteration, layer, src_rank, expert, tokens FROM expert_load "
        "ORDER BY iteration, layer, src_rank, expert");
    auto* expert_load_digest = digest("expert_load");
    while (l.step()) {
      if (expert_load_digest) expert_load_digest->add_row(l, 5);
      ExpertLoad e;
      e.iteration = static_cast<std::int32_t>(l.int64(0));
      e.layer = static_cast<std::int32_t>(l.int64(1));
      e.src_rank = static_cast<std::int32_t>(l.int64(2));
      e.expert = static_cast<std::int32_t>(l.int64(3));
      e.tokens = l.int64(4);
      if (e.tokens < 0) throw Error(trace_.run.path + ": expert_load has a negative token count");
      check_index(e.expert, "expert_load", "expert");
      if (e.src_rank != -1) check_index(e.src_rank, "expert_load", "src_rank");  // -1: per-expert totals
      trace_.expert_load.push_back(e);
    }
    auto p = db_.prepare(
        "SELECT iteration, layer, expert, rank, role FROM expert_placement "
        "ORDER BY iteration, layer, expert, rank");
    verify("expert_load");
    auto* expert_placement_digest = digest("expert_placement");
    while (p.step()) {
      if (expert_placement_digest) expert_placement_digest->add_row(p, 5);
      check_index(p.int64(2), "expert_placement", "expert");
      check_index(p.int64(3), "expert_placement", "rank");
      trace_.placements.push_back({static_cast<std::int32_t>(p.int64(0)),
                                   static_cast<std::int32_t>(p.int64(1)),
                                   static_cast<std::int32_t>(p.int64(2)),
                                   static_cast<std::int32_t>(p.int64(3)), std::string(p.text(4))});
    }
    verify("expert_placement");
  }

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
    auto* d = digest(table);
    std::int64_t orphans = 0;
    while (st.step()) {
      if (d) d->add_row(st, n);
      const auto it = by_id.find(st.int64(0));
      if (it == by_id.end()) {
        ++orphans;
        continue;
      }
      row(st, trace_.nvtx[it->second]);
    }
    verify(table);
    note_damage(orphans, fmt::format("{} rows name NVTX ranges that nvtx_ranges lacks (left out)", table));
  }

  // The autograd_ranges table: sequence numbers of the host ranges.
  void load_autograd() {
    load_nvtx_table("autograd_ranges", "nvtx_id, sequence, backward", 3, [](auto& st, NvtxRange& r) {
      r.autograd_seq = st.int64(1);
      r.autograd_backward = st.int64(2) != 0;
    });
  }

  // The input_shapes table: the recorded input shapes of matrix products.
  void load_input_shapes() {
    load_nvtx_table("input_shapes", "nvtx_id, input_dims, input_types", 3, [this](auto& st, NvtxRange& r) {
      r.input_shape = static_cast<std::int32_t>(trace_.input_shapes.size());
      trace_.input_shapes.push_back(InputShape{std::string(st.text(1)), std::string(st.text(2))});
    });
  }

  // The collectives table (absent from traces older than it), for MoE
  // recognition: all-to-all split sizes give the load per destination rank.
  void load_collectives() {
    if (!db_.has_table("collectives")) return;
    // Their sequence numbers (table collective_seq, absent from traces
    // older than it), by collectives.id.
    std::unordered_map<std::int64_t, std::int64_t> seq_of;
    if (db_.has_table("collective_seq")) {
      auto sq = db_.prepare("SELECT collective_id, seq FROM collective_seq");
      auto* seq_digest = digest("collective_seq");
      while (sq.step()) {
        if (seq_digest) seq_digest->add_row(sq, 2);
        seq_of[sq.int64(0)] = sq.int64(1);
      }
      verify("collective_seq");
    }
    auto st = db_.prepare(
        "SELECT rank, stream_id, start_ns, end_ns, correlation_id, name, in_nelems, out_nelems, dtype, "
        "group_size, group_ranks, process_group, in_splits, out_splits, id FROM collectives "
        "ORDER BY rank, correlation_id, start_ns");
    auto* collectives_digest = digest("collectives");
    while (st.step()) {
      if (collectives_digest) collectives_digest->add_row(st, 14);
      Collective c;
      if (auto it = seq_of.find(st.int64(14)); it != seq_of.end()) c.seq = it->second;
      c.rank = checked_rank(st.int64(0), "collectives");
      c.correlation_id = st.int64_or(4, 0);
      c.name = st.text(5);
      c.in_nelems = st.int64_or(6, -1);
      c.out_nelems = st.int64_or(7, -1);
      c.group_size = static_cast<std::int32_t>(st.int64_or(9, -1));
      c.dtype = st.text(8);
      c.in_splits = parse_splits(st.text(12));
      c.out_splits = parse_splits(st.text(13));
      c.group_ranks = st.text(10);
      c.process_group = st.text(11);
      c.start_ns = st.int64(2);
      c.end_ns = st.int64(3);
      check_times(c.start_ns, c.end_ns, "collectives");
      trace_.collectives.push_back(std::move(c));
    }
    verify("collectives");
  }

  // "[12, 0, 7]" (Kineto's split sizes) -> {12, 0, 7}; anything that is not a
  // list of non-negative integers -> {} (no load is derived from it).
  static std::vector<std::int64_t> parse_splits(std::string_view text) {
    std::vector<std::int64_t> out;
    std::int64_t v = -1;
    for (char ch : text) {
      if (ch >= '0' && ch <= '9') {
        if (v > (INT64_MAX - 9) / 10) return {};
        v = (v < 0 ? 0 : v * 10) + (ch - '0');
      } else if (ch == ',' || ch == ']') {
        if (v >= 0) out.push_back(v);
        v = -1;
      } else if (ch != '[' && ch != ' ') {
        return {};
      }
    }
    if (v >= 0) out.push_back(v);
    return out;
  }

  // The records of an import into memory, as read_tables() reads them back
  // from the trace file the same import writes: values the file stores as
  // NULL (negative ids and sizes, correlation ids of 0 or less) read as the
  // loader reads NULL, rows in the order the file returns them.
  void take_imported() {
    auto& in = *imported_;
    const auto id = [](std::int64_t v) { return v < 0 ? std::int64_t{-1} : v; };
    const auto id32 = [](std::int32_t v) { return v < 0 ? std::int32_t{-1} : v; };
    const auto corr = [](std::int64_t c) { return c > 0 ? c : std::int64_t{0}; };
    auto& run = trace_.run;
    run.schema_version = schema::kVersion;
    run.name = in.run.name;
    run.backend = in.run.backend.empty() ? "unknown" : in.run.backend;
    run.variant = in.run.variant;
    run.simulated = in.run.simulated;
    run.world_size = std::max(1, in.run.world_size);
    run.host = in.run.host.empty() ? instrument::host_name() : in.run.host;
    run.moetrace_version = instrument::moetrace_version();
    run.created_unix_s = static_cast<std::int64_t>(std::time(nullptr));
    if (in.start_ns <= in.end_ns) {
      run.start_ns = in.start_ns;
      run.end_ns = in.end_ns;
    }
    run.config_json = in.run.config_json;
    run.finalized = true;
    run.integrity = "imported in memory";
    std::map<std::string, std::string> config;
    for (auto& [k, v] : in.config) config[std::move(k)] = std::move(v);
    run.config.assign(std::make_move_iterator(config.begin()), std::make_move_iterator(config.end()));
    trace_.strings = std::move(in.strings);

    std::stable_sort(in.devices.begin(), in.devices.end(),
                     [](const auto& a, const auto& b) { return a.id.value < b.id.value; });
    for (const auto& d : in.devices)
      trace_.devices.push_back({d.id, d.name, d.uuid, id32(d.compute_major), id32(d.compute_minor),
                                id32(d.sm_count), id(d.memory_bytes), d.simulated});
    std::stable_sort(in.ranks.begin(), in.ranks.end(),
                     [](const auto& a, const auto& b) { return a.rank.value < b.rank.value; });
    for (const auto& r : in.ranks) trace_.ranks.push_back({r.rank, r.device, id32(r.local_rank), r.host, id(r.pid)});
    std::stable_sort(in.streams.begin(), in.streams.end(), [](const auto& a, const auto& b) {
      return std::tie(a.rank.value, a.id.value) < std::tie(b.rank.value, b.id.value);
    });
    for (const auto& st : in.streams)
      trace_.streams.push_back({st.id, st.rank, DeviceId(id32(st.device.value)), id(st.native_id), st.role, st.name});

    progress("activities", 0.3);
    trace_.activities.reserve(in.kernels.size() + in.memcpys.size() + in.memsets.size());
    activity_op_ids_.reserve(trace_.activities.capacity());
    std::map<instrument::LaunchConfigKey, std::int32_t> launches;  // numbered as the writer numbers them
    // What kernels, copies and memsets share; the caller adds the rest.
    const auto activity = [&](ActivityType type, const auto& r) {
      Activity a;
      a.type = type;
      a.rank = r.rank;
      a.stream = stream_slot(r.stream.value, a.rank);
      a.start_ns = r.start_ns;
      a.end_ns = r.end_ns;
      a.correlation_id = corr(r.correlation_id);
      activity_op_ids_.push_back(id(r.op.value));
      return a;
    };
    for (const auto& k : in.kernels) {
      Activity a = activity(ActivityType::kKernel, k);
      a.name = k.name;
      if (k.grid[0] >= 0) {
        const auto [it, added] = launches.try_emplace(instrument::launch_config_key(k),
                                                      static_cast<std::int32_t>(trace_.launch_configs.size()));
        if (added) {
          LaunchConfig c;
          for (std::size_t i = 0; i < 3; ++i) {
            c.grid[i] = k.grid[i];
            c.block[i] = k.block[i];
          }
          c.shared_bytes = id32(k.shared_bytes);
          c.registers = id32(k.registers);
          trace_.launch_configs.push_back(c);
        }
        a.launch = it->second;
      }
      trace_.activities.push_back(a);
    }
    std::vector<instrument::KernelRecord>().swap(in.kernels);
    for (const auto& m : in.memcpys) {
      Activity a = activity(ActivityType::kMemcpy, m);
      a.bytes = m.bytes;
      a.copy_kind = static_cast<std::uint8_t>(m.copy_kind);
      a.src_kind = static_cast<std::uint8_t>(m.src_kind);
      a.dst_kind = static_cast<std::uint8_t>(m.dst_kind);
      trace_.activities.push_back(a);
    }
    for (const auto& m : in.memsets) {
      Activity a = activity(ActivityType::kMemset, m);
      a.bytes = m.bytes;
      trace_.activities.push_back(a);
    }
    trace_.classify_kernel_names();

    for (const auto& r : in.ops) {
      OpRange op;
      op.id = r.id;
      op.rank = r.rank;
      op.stream = stream_slot(r.stream.value, op.rank);
      op.kind = r.kind;
      op.name = r.name.value >= 0 ? r.name : StringId();
      op.layer = id32(r.layer);
      op.iteration = id32(r.iteration);
      op.micro_batch = id32(r.micro_batch);
      op.chunk = id32(r.chunk);
      op.phase = r.phase;
      op.start_ns = r.start_ns;
      op.end_ns = r.end_ns;
      op.launch_start_ns = id(r.launch_start_ns);
      op.launch_end_ns = id(r.launch_end_ns);
      op.flops = r.flops >= 0 ? r.flops : -1.0;
      op.bytes = id(r.bytes);
      op.recv_bytes = id(r.recv_bytes);
      op.peer = RankId(id32(r.peer.value));
      op.nvtx_id = id(r.nvtx_id);
      trace_.ops.push_back(op);
    }

    progress("host events", 0.6);
    if (options_.api_calls) {
      trace_.api_calls.reserve(in.api_calls.size());
      for (const auto& c : in.api_calls)
        trace_.api_calls.push_back({c.start_ns, c.end_ns, c.correlation_id, c.thread_id, c.rank, c.name, c.api,
                                    c.return_code});
      sort_api_calls();
      for (const auto& e : in.sync_events)
        trace_.sync_events.push_back({e.start_ns, e.end_ns, e.correlation_id, e.stream, e.rank, e.kind});
      sort_sync_events();
    }
    if (options_.nvtx) {
      trace_.nvtx.reserve(in.nvtx.size());
      std::int64_t next_id = 1;  // the rowids the file gives the rows
      for (const auto& r : in.nvtx) {
        NvtxRange n;
        n.id = next_id++;
        n.rank = r.rank;
        n.thread_id = r.thread_id;
        n.start_ns = r.start_ns;
        n.end_ns = id(r.end_ns);
        n.domain = r.domain.value >= 0 ? r.domain : StringId();
        n.name = r.name;
        n.category = r.category;
        n.has_payload_int = r.payload_int.has_value();
        n.payload_int = r.payload_int.value_or(0);
        if (r.autograd_seq) {
          n.autograd_seq = *r.autograd_seq;
          n.autograd_backward = r.autograd_backward;
        }
        if (!r.input_dims.empty()) {
          n.input_shape = static_cast<std::int32_t>(trace_.input_shapes.size());
          trace_.input_shapes.push_back({r.input_dims, r.input_types});
        }
        trace_.nvtx.push_back(n);
      }
      sort_nvtx();
    }
    if (options_.memory) {
      for (const auto& e : in.memory_events)
        trace_.memory_events.push_back({e.ts_ns, e.address, e.bytes, BufferId(id(e.buffer.value)), e.rank, e.alloc,
                                        e.memory_kind});
      sort_memory_events();
    }
    for (auto& r : in.collectives) {
      Collective c;
      c.rank = r.rank;
      c.start_ns = r.start_ns;
      c.end_ns = r.end_ns;
      c.correlation_id = corr(r.correlation_id);
      c.name = std::move(r.name);
      c.in_nelems = id(r.in_nelems);
      c.out_nelems = id(r.out_nelems);
      c.group_size = id32(r.group_size);
      c.dtype = std::move(r.dtype);
      c.in_splits = parse_splits(r.in_splits);
      c.out_splits = parse_splits(r.out_splits);
      c.group_ranks = std::move(r.group_ranks);
      c.process_group = std::move(r.process_group);
      c.seq = id(r.seq);
      trace_.collectives.push_back(std::move(c));
    }
    std::stable_sort(trace_.collectives.begin(), trace_.collectives.end(), [](const Collective& a, const Collective& b) {
      return std::tie(a.rank, a.correlation_id, a.start_ns) < std::tie(b.rank, b.correlation_id, b.start_ns);
    });
    imported_.reset();
  }

  // Sorts activities and ops into per-stream tracks, resolves op ids to indices.
  void build_tracks() {
    progress("sorting", 0.99);
    auto& t = trace_;
    // Stream order: by (rank, id). Re-index every event's stream slot.
    std::vector<std::int32_t> order(t.streams.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      return std::tie(t.streams[static_cast<std::size_t>(a)].rank, t.streams[static_cast<std::size_t>(a)].id) <
             std::tie(t.streams[static_cast<std::size_t>(b)].rank, t.streams[static_cast<std::size_t>(b)].id);
    });
    std::vector<std::int32_t> new_slot(order.size());
    std::vector<Stream> sorted;
    sorted.reserve(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      new_slot[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
      sorted.push_back(std::move(t.streams[static_cast<std::size_t>(order[i])]));
    }
    t.streams = std::move(sorted);
    t.stream_index_.clear();
    for (std::size_t i = 0; i < t.streams.size(); ++i)
      t.stream_index_.emplace_back(t.streams[i].id.value, static_cast<std::int32_t>(i));
    std::sort(t.stream_index_.begin(), t.stream_index_.end());

    // Op ids -> indices (ops sorted first, so indices are final).
    for (auto& op : t.ops) op.stream = new_slot[static_cast<std::size_t>(op.stream)];
    std::sort(t.ops.begin(), t.ops.end(), [](const OpRange& a, const OpRange& b) {
      if (a.stream != b.stream) return a.stream < b.stream;
      if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
      return a.end_ns > b.end_ns;
    });
    t.op_index_.resize(t.ops.size());
    for (std::size_t i = 0; i < t.ops.size(); ++i)
      t.op_index_[i] = {t.ops[i].id.value, static_cast<std::int32_t>(i)};
    std::sort(t.op_index_.begin(), t.op_index_.end());
    for (std::size_t i = 1; i < t.op_index_.size(); ++i)
      if (t.op_index_[i].first == t.op_index_[i - 1].first)
        throw Error(t.run.path + ": op id " + std::to_string(t.op_index_[i].first) +
                    " appears twice in op_ranges; damaged trace");

    for (std::size_t i = 0; i < t.activities.size(); ++i) {
      auto& a = t.activities[i];
      a.stream = new_slot[static_cast<std::size_t>(a.stream)];
      a.op = activity_op_ids_[i] >= 0 ? t.op_index(OpId(activity_op_ids_[i])) : -1;
      if (activity_op_ids_[i] >= 0 && a.op < 0) ++activities_without_op_;
    }
    std::vector<std::int64_t>().swap(activity_op_ids_);
    std::sort(t.activities.begin(), t.activities.end(), [](const Activity& a, const Activity& b) {
      return a.stream != b.stream ? a.stream < b.stream : a.start_ns < b.start_ns;
    });

    auto offsets = [n = t.streams.size()](const auto& events) {
      std::vector<std::size_t> begin(n + 1, 0);
      for (const auto& e : events) ++begin[static_cast<std::size_t>(e.stream) + 1];
      for (std::size_t i = 0; i < n; ++i) begin[i + 1] += begin[i];
      return begin;
    };
    t.activity_track_begin = offsets(t.activities);
    t.op_track_begin = offsets(t.ops);
  }

  sqlite::Database db_;
  LoadOptions options_;
  Trace trace_;
  std::map<std::int64_t, std::int32_t> stream_slots_;
  std::vector<std::int64_t> activity_op_ids_;
  std::int64_t rows_total_ = 0, rows_done_ = 0;
  std::optional<schema::IntegrityRecord> record_;  // the writer's; nullopt: none
  schema::IntegrityRecord read_;                   // of the rows read
  std::int64_t rank_limit_ = 0;                    // 1 + the highest rank of tables ranks and streams
  std::vector<std::int64_t> unknown_streams_;
  std::int64_t activities_without_op_ = 0;
  std::unordered_map<std::int64_t, std::size_t> nvtx_by_id_;  // load_nvtx_table
  std::optional<importers::ImportedTrace> imported_;  // take_imported()
};

void load_run_record(sqlite::Database& db, RunInfo& run) { TraceLoader::load_run(db, run); }

Trace load_trace(const std::string& path, const LoadOptions& options) {
  if (const auto format = importers::foreign_format(path)) {
    importers::ImportOptions io;
    io.format = *format;
    io.progress = options.progress;
    return TraceLoader(path, importers::import_in_memory(path, io), options).load();
  }
  return TraceLoader(path, options).load();
}

}  // namespace moetrace::analyzer
