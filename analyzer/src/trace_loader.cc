#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/projection.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/op_links.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/trace_file.h"

namespace moetrace::analyzer {
namespace {

[[noreturn]] void throw_empty_trace(const std::string& path) {
  throw Error(path + ": the trace holds no events (was the run empty, or killed before its first flush?)");
}

}  // namespace

int Trace::stream_index(StreamId id) const {
  auto it = std::lower_bound(stream_index_.begin(), stream_index_.end(),
                             std::pair{id.value, INT32_MIN});
  if (it == stream_index_.end() || it->first != id.value) return -1;
  return it->second;
}

int Trace::op_index(OpId id) const {
  auto it = std::lower_bound(op_index_.begin(), op_index_.end(), std::pair{id.value, INT32_MIN});
  if (it == op_index_.end() || it->first != id.value) return -1;
  return it->second;
}

const ApiCall* Trace::api_call(std::int64_t correlation_id) const {
  auto it = std::lower_bound(
      api_calls.begin(), api_calls.end(), correlation_id,
      [](const ApiCall& a, std::int64_t v) { return a.correlation_id < v; });
  return it != api_calls.end() && it->correlation_id == correlation_id ? &*it : nullptr;
}

const ApiCall* Trace::launching_call(const Activity& a) const {
  if (a.correlation_id == 0) return nullptr;
  for (auto it = std::lower_bound(api_calls.begin(), api_calls.end(), a.correlation_id,
                                  [](const ApiCall& c, std::int64_t v) { return c.correlation_id < v; });
       it != api_calls.end() && it->correlation_id == a.correlation_id; ++it)
    if (it->rank == a.rank) return &*it;
  return nullptr;
}

std::int64_t Trace::event_count() const {
  return static_cast<std::int64_t>(activities.size() + ops.size() + api_calls.size() + nvtx.size() +
                                   memory_events.size());
}

std::vector<RankId> Trace::rank_ids() const {
  std::set<RankId> ids;
  for (const auto& r : ranks) ids.insert(r.rank);
  for (const auto& s : streams) ids.insert(s.rank);
  return {ids.begin(), ids.end()};
}

std::string_view Trace::config_value(std::string_view key) const {
  for (const auto& [k, v] : run.config)
    if (k == key) return v;
  for (const auto& [k, v] : run.config)
    if (k.size() > key.size() && k.ends_with(key) && k[k.size() - key.size() - 1] == '.') return v;
  return {};
}

void Trace::classify_kernel_names() {
  kernel_category.assign(strings.size(), -1);
  for (const auto& a : activities) {
    if (a.type != ActivityType::kKernel || !a.name.valid()) continue;
    const auto id = static_cast<std::size_t>(a.name.value);
    if (id < kernel_category.size() && kernel_category[id] < 0)
      kernel_category[id] = static_cast<std::int8_t>(classify_kernel_name(strings[id]));
  }
}

void Trace::sort_ops() {
  std::vector<std::int32_t> order(ops.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t x, std::int32_t y) {
    const auto& a = ops[static_cast<std::size_t>(x)];
    const auto& b = ops[static_cast<std::size_t>(y)];
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  std::vector<std::int32_t> new_index(ops.size());
  std::vector<OpRange> sorted;
  sorted.reserve(ops.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    new_index[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
    sorted.push_back(ops[static_cast<std::size_t>(order[i])]);
  }
  ops = std::move(sorted);
  for (auto& a : activities)
    if (a.op >= 0) a.op = new_index[static_cast<std::size_t>(a.op)];
  for (auto& [id, index] : op_index_) index = new_index[static_cast<std::size_t>(index)];
}

void Trace::index_ops() {
  std::vector<std::int64_t> activity_op_ids(activities.size(), -1);
  for (std::size_t i = 0; i < activities.size(); ++i)
    if (activities[i].op >= 0) activity_op_ids[i] = ops[static_cast<std::size_t>(activities[i].op)].id.value;
  std::sort(ops.begin(), ops.end(), [](const OpRange& a, const OpRange& b) {
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  op_index_.resize(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) op_index_[i] = {ops[i].id.value, static_cast<std::int32_t>(i)};
  std::sort(op_index_.begin(), op_index_.end());
  for (std::size_t i = 0; i < activities.size(); ++i)
    activities[i].op = activity_op_ids[i] >= 0 ? op_index(OpId(activity_op_ids[i])) : -1;
  op_track_begin.assign(streams.size() + 1, 0);
  for (const auto& op : ops) ++op_track_begin[static_cast<std::size_t>(op.stream) + 1];
  for (std::size_t i = 0; i < streams.size(); ++i) op_track_begin[i + 1] += op_track_begin[i];
}

class TraceLoader {
 public:
  TraceLoader(const std::string& path, const LoadOptions& options)
      : db_(schema::open_trace(path)), options_(options) {
    trace_.run.path = path;
  }

  Trace load() {
    load_run(db_, trace_.run);
    load_strings();
    load_devices_ranks_streams();
    count_rows();
    load_activities();
    trace_.classify_kernel_names();
    load_ops();
    if (options_.api_calls) load_api_calls();
    if (options_.nvtx) load_nvtx();
    if (options_.memory) load_memory();
    load_moe_tables();
    load_collectives();
    build_tracks();
    if (options_.recognize && trace_.ops.empty()) {
      progress("recognising MoE ops", 0.993);
      if (options_.moe_rules.empty()) {
        recognize_moe(trace_, builtin_moe_rules());
      } else {
        const auto user = load_moe_rules(options_.moe_rules);
        recognize_moe(trace_, combine_moe_rules(&user));
      }
    }
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

  static void load_run(sqlite::Database& db, RunInfo& run) {
    run.schema_version = static_cast<int>(db.pragma_int("user_version").value_or(0));
    auto st = db.prepare(
        "SELECT name, backend, variant, simulated, world_size, host, moetrace_version, "
        "created_unix_s, start_ns, end_ns, config_json, dropped_records FROM run WHERE id = 1");
    if (!st.step()) throw Error(run.path + ": the trace has no run record (damaged file?)");
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
    auto fin = db.prepare("SELECT value FROM meta WHERE key = 'finalized'");
    run.finalized = fin.step() && fin.text(0) == "1";
    auto cfg = db.prepare("SELECT key, value FROM run_config ORDER BY key");
    while (cfg.step()) run.config.emplace_back(std::string(cfg.text(0)), std::string(cfg.text(1)));
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
    while (st.step()) {
      auto id = st.int64(0);
      // max(id) above may disagree with the rows of a damaged file (an id
      // stored as text sorts after every integer).
      if (id >= static_cast<std::int64_t>(trace_.strings.size()))
        throw Error(trace_.run.path + ": string table is damaged");
      if (id >= 0) trace_.strings[static_cast<std::size_t>(id)] = st.text(1);
    }
  }

  void load_devices_ranks_streams() {
    auto d = db_.prepare(
        "SELECT id, name, uuid, compute_major, compute_minor, sm_count, memory_bytes, simulated "
        "FROM devices ORDER BY id");
    while (d.step()) {
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
    while (r.step()) {
      Rank rank;
      rank.rank = RankId(static_cast<std::int32_t>(r.int64(0)));
      rank.device = DeviceId(static_cast<std::int32_t>(r.int64(1)));
      rank.local_rank = static_cast<int>(r.int64_or(2, -1));
      rank.host = r.text(3);
      rank.pid = r.int64_or(4, -1);
      trace_.ranks.push_back(std::move(rank));
    }
    auto s = db_.prepare(
        "SELECT id, rank, device_id, native_id, role, name FROM streams ORDER BY rank, id");
    while (s.step()) {
      Stream st;
      st.id = StreamId(static_cast<std::int32_t>(s.int64(0)));
      st.rank = RankId(static_cast<std::int32_t>(s.int64(1)));
      st.device = DeviceId(static_cast<std::int32_t>(s.int64_or(2, -1)));
      st.native_id = s.int64_or(3, -1);
      st.role = s.text(4);
      st.name = s.text(5);
      trace_.streams.push_back(std::move(st));
    }
    auto l = db_.prepare(
        "SELECT layer, kind, num_experts, top_k, model_dim, hidden_dim, tokens FROM layers "
        "ORDER BY layer");
    while (l.step()) {
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
    while (lc.step()) {
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
    while (k.step()) {
      Activity a;
      a.type = ActivityType::kKernel;
      a.rank = RankId(static_cast<std::int32_t>(k.int64(0)));
      a.stream = stream_slot(k.int64(1), a.rank);
      a.start_ns = k.int64(2);
      a.end_ns = k.int64(3);
      check_times(a.start_ns, a.end_ns, "kernels");
      a.name = StringId(static_cast<std::int32_t>(k.int64(4)));
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
        "SELECT rank, stream_id, start_ns, end_ns, bytes, copy_kind, correlation_id, op_id "
        "FROM memcpy");
    while (m.step()) {
      Activity a;
      a.type = ActivityType::kMemcpy;
      a.rank = RankId(static_cast<std::int32_t>(m.int64(0)));
      a.stream = stream_slot(m.int64(1), a.rank);
      a.start_ns = m.int64(2);
      a.end_ns = m.int64(3);
      check_times(a.start_ns, a.end_ns, "memcpy");
      a.bytes = m.int64(4);
      a.copy_kind = static_cast<std::uint8_t>(m.int64(5));
      a.correlation_id = m.int64_or(6, 0);
      activity_op_ids_.push_back(m.int64_or(7, -1));
      trace_.activities.push_back(a);
      step_progress("memcpy");
    }
    auto s = db_.prepare(
        "SELECT rank, stream_id, start_ns, end_ns, bytes, correlation_id, op_id FROM memset");
    while (s.step()) {
      Activity a;
      a.type = ActivityType::kMemset;
      a.rank = RankId(static_cast<std::int32_t>(s.int64(0)));
      a.stream = stream_slot(s.int64(1), a.rank);
      a.start_ns = s.int64(2);
      a.end_ns = s.int64(3);
      check_times(a.start_ns, a.end_ns, "memset");
      a.bytes = s.int64(4);
      a.correlation_id = s.int64_or(5, 0);
      activity_op_ids_.push_back(s.int64_or(6, -1));
      trace_.activities.push_back(a);
      step_progress("memset");
    }
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
    while (st.step()) {
      OpRange op;
      op.id = OpId(st.int64(0));
      op.rank = RankId(static_cast<std::int32_t>(st.int64(1)));
      op.stream = stream_slot(st.int64(2), op.rank);
      auto kind = st.int64(3);
      if (kind < 0 || static_cast<std::size_t>(kind) >= kinds)
        throw Error(trace_.run.path + ": op_ranges has unknown op kind " + std::to_string(kind) +
                    " (written by a newer moetrace?)");
      op.kind = static_cast<OpKind>(kind);
      op.name = StringId(static_cast<std::int32_t>(st.int64_or(4, -1)));
      op.layer = static_cast<std::int32_t>(st.int64_or(5, -1));
      op.iteration = static_cast<std::int32_t>(st.int64_or(6, -1));
      op.micro_batch = static_cast<std::int32_t>(st.int64_or(7, -1));
      op.chunk = static_cast<std::int32_t>(st.int64_or(8, -1));
      op.phase = static_cast<Phase>(std::clamp<std::int64_t>(st.int64(9), 0, 2));
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
    while (st.step()) {
      ApiCall a;
      a.rank = RankId(static_cast<std::int32_t>(st.int64(0)));
      a.thread_id = st.int64(1);
      a.start_ns = st.int64(2);
      a.end_ns = st.int64(3);
      check_times(a.start_ns, a.end_ns, "api_calls");
      a.api = static_cast<schema::ApiKind>(st.int64(4));
      a.name = StringId(static_cast<std::int32_t>(st.int64(5)));
      a.correlation_id = st.int64(6);
      a.return_code = static_cast<std::int32_t>(st.int64_or(7, 0));
      trace_.api_calls.push_back(a);
      step_progress("api calls");
    }
    std::stable_sort(trace_.api_calls.begin(), trace_.api_calls.end(),
                     [](const ApiCall& a, const ApiCall& b) { return a.correlation_id < b.correlation_id; });
  }

  void load_nvtx() {
    auto st = db_.prepare(
        "SELECT id, rank, thread_id, start_ns, end_ns, domain_id, name_id, payload_int "
        "FROM nvtx_ranges");
    while (st.step()) {
      NvtxRange r;
      r.id = st.int64(0);
      r.rank = RankId(static_cast<std::int32_t>(st.int64(1)));
      r.thread_id = st.int64(2);
      r.start_ns = st.int64(3);
      r.end_ns = st.int64_or(4, -1);
      if (r.end_ns >= 0) check_times(r.start_ns, r.end_ns, "nvtx_ranges");
      r.domain = StringId(static_cast<std::int32_t>(st.int64_or(5, -1)));
      r.name = StringId(static_cast<std::int32_t>(st.int64(6)));
      r.has_payload_int = !st.is_null(7);
      r.payload_int = st.int64_or(7, 0);
      trace_.nvtx.push_back(r);
      step_progress("nvtx");
    }
    std::sort(trace_.nvtx.begin(), trace_.nvtx.end(), [](const NvtxRange& a, const NvtxRange& b) {
      return std::tie(a.rank, a.thread_id, a.start_ns) < std::tie(b.rank, b.thread_id, b.start_ns);
    });
  }

  void load_memory() {
    auto st = db_.prepare(
        "SELECT rank, ts_ns, kind, address, bytes, memory_kind, buffer_id FROM memory_events");
    while (st.step()) {
      MemoryEvent e;
      e.rank = RankId(static_cast<std::int32_t>(st.int64(0)));
      e.ts_ns = st.int64(1);
      e.alloc = st.int64(2) != 0;
      e.address = static_cast<std::uint64_t>(st.int64(3));
      e.bytes = st.int64(4);
      e.memory_kind = static_cast<schema::MemoryKind>(st.int64(5));
      e.buffer = BufferId(st.int64_or(6, -1));
      trace_.memory_events.push_back(e);
      step_progress("memory");
    }
    std::stable_sort(trace_.memory_events.begin(), trace_.memory_events.end(),
                     [](const MemoryEvent& a, const MemoryEvent& b) {
                       return std::tie(a.rank, a.ts_ns) < std::tie(b.rank, b.ts_ns);
                     });
    auto b = db_.prepare(
        "SELECT id, rank, tag, bytes, memory_kind, layer, chunk, alloc_ns, free_ns FROM buffers "
        "ORDER BY id");
    while (b.step()) {
      Buffer buf;
      buf.id = BufferId(b.int64(0));
      buf.rank = RankId(static_cast<std::int32_t>(b.int64(1)));
      buf.tag = b.text(2);
      buf.bytes = b.int64(3);
      buf.memory_kind = static_cast<schema::MemoryKind>(b.int64(4));
      buf.layer = static_cast<std::int32_t>(b.int64_or(5, -1));
      buf.chunk = static_cast<std::int32_t>(b.int64_or(6, -1));
      buf.alloc_ns = b.int64_or(7, -1);
      buf.free_ns = b.int64_or(8, -1);
      trace_.buffers.push_back(std::move(buf));
    }
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
    while (l.step()) {
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
    while (p.step()) {
      check_index(p.int64(2), "expert_placement", "expert");
      check_index(p.int64(3), "expert_placement", "rank");
      trace_.placements.push_back({static_cast<std::int32_t>(p.int64(0)),
                                   static_cast<std::int32_t>(p.int64(1)),
                                   static_cast<std::int32_t>(p.int64(2)),
                                   static_cast<std::int32_t>(p.int64(3)), std::string(p.text(4))});
    }
  }

  // The collectives table (absent from traces older than it), for MoE
  // recognition: all-to-all split sizes give the load per destination rank.
  void load_collectives() {
    if (!db_.has_table("collectives")) return;
    auto st = db_.prepare(
        "SELECT rank, correlation_id, name, in_nelems, out_nelems, group_size, dtype, in_splits, "
        "out_splits, start_ns, end_ns FROM collectives ORDER BY rank, correlation_id, start_ns");
    while (st.step()) {
      Collective c;
      c.rank = RankId(static_cast<std::int32_t>(st.int64(0)));
      c.correlation_id = st.int64_or(1, 0);
      c.name = st.text(2);
      c.in_nelems = st.int64_or(3, -1);
      c.out_nelems = st.int64_or(4, -1);
      c.group_size = static_cast<std::int32_t>(st.int64_or(5, -1));
      c.dtype = st.text(6);
      c.in_splits = parse_splits(st.text(7));
      c.out_splits = parse_splits(st.text(8));
      c.start_ns = st.int64(9);
      c.end_ns = st.int64(10);
      trace_.collectives.push_back(std::move(c));
    }
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
};

Trace load_trace(const std::string& path, const LoadOptions& options) {
  return TraceLoader(path, options).load();
}

TraceSummary summarize_trace(const std::string& path) {
  auto db = schema::open_trace(path);
  TraceSummary s;
  s.run.path = path;
  TraceLoader::load_run(db, s.run);
  for (const char* t : {"kernels", "memcpy", "memset", "memory_events", "api_calls", "sync_events",
                        "overhead", "nvtx_ranges", "op_ranges", "op_deps", "buffers", "op_buffers",
                        "expert_load", "expert_placement", "collectives", "strings"}) {
    const std::string_view table(t);
    if (s.run.schema_version >= 2 && (table == "op_deps" || table == "op_buffers")) {
      // Views over op_ranges' JSON columns since version 2: count the arrays.
      const std::string column = table == "op_deps" ? "deps" : "buffers";
      s.table_rows.emplace_back(
          t, db.query_int("SELECT coalesce(sum(json_array_length(" + column + ")), 0) FROM op_ranges").value_or(0));
    } else if (db.has_table(t)) {  // collectives came later within version 1; older traces lack it
      s.table_rows.emplace_back(t, db.query_int(std::string("SELECT count(*) FROM ") + t).value_or(0));
    }
  }
  s.ranks = static_cast<int>(db.query_int("SELECT count(DISTINCT rank) FROM (SELECT rank FROM ranks "
                                          "UNION SELECT rank FROM streams)")
                                 .value_or(0));
  s.streams = static_cast<int>(db.query_int("SELECT count(*) FROM streams").value_or(0));
  s.layers = static_cast<int>(
      db.query_int("SELECT count(DISTINCT layer) FROM op_ranges WHERE layer IS NOT NULL").value_or(0));
  s.iterations = static_cast<int>(
      db.query_int("SELECT count(DISTINCT iteration) FROM op_ranges WHERE iteration IS NOT NULL")
          .value_or(0));
  std::int64_t events = 0;
  for (const auto& [table, rows] : s.table_rows)
    if (table != "strings" && table != "op_deps" && table != "op_buffers" && table != "collectives")
      events += rows;
  if (events == 0)
    throw_empty_trace(path);
  return s;
}

}  // namespace moetrace::analyzer
