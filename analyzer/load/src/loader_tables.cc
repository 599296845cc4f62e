// The core tables of a trace file into the model (trace_loader.h).
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

#include "trace_loader.h"
#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/projection.h"
#include "moetrace/importers/imported_trace.h"
#include "moetrace/instrument/trace_writer.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/integrity.h"
#include "moetrace/schema/op_links.h"
#include "moetrace/schema/sqlite.h"
#include "moetrace/schema/trace_file.h"

namespace moetrace::analyzer {

void TraceLoader::load_strings() {
  progress("strings", 0.0);
  auto n = db_.query_int("SELECT max(id) FROM strings").value_or(-1);
  if (n < -1 || n > (1 << 30)) throw Error(trace_.run.path + ": string table is damaged");
  trace_.strings.resize(static_cast<std::size_t>(n + 1));
  auto st = db_.prepare("SELECT id, value FROM strings");
  for_each_statement_row(st, "strings", 2, [&] {
    auto id = st.int64(0);
    // max(id) above may disagree with the rows of a damaged file (an id
    // stored as text sorts after every integer).
    if (id >= static_cast<std::int64_t>(trace_.strings.size()))
      throw Error(trace_.run.path + ": string table is damaged");
    if (id >= 0) trace_.strings[static_cast<std::size_t>(id)] = st.text(1);
  });
  strings_ = static_cast<std::int64_t>(trace_.strings.size());
  verify("strings");
}

void TraceLoader::load_devices_ranks_streams() {
  auto d = db_.prepare(
      "SELECT id, name, uuid, compute_major, compute_minor, sm_count, memory_bytes, simulated "
      "FROM devices ORDER BY id");
  for_each_statement_row(d, "devices", 8, [&] {
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
  });
  auto r = db_.prepare("SELECT rank, device_id, local_rank, host, pid FROM ranks ORDER BY rank");
  for_each_statement_row(r, "ranks", 5, [&] {
    Rank rank;
    check_index(r.int64(0), "ranks", "rank");
    rank.rank = RankId(static_cast<std::int32_t>(r.int64(0)));
    rank_limit_ = std::max(rank_limit_, std::int64_t{rank.rank.value} + 1);
    rank.device = DeviceId(static_cast<std::int32_t>(r.int64(1)));
    rank.local_rank = static_cast<int>(r.int64_or(2, -1));
    rank.host = r.text(3);
    rank.pid = r.int64_or(4, -1);
    trace_.ranks.push_back(std::move(rank));
  });
  auto s = db_.prepare(
      "SELECT id, rank, device_id, native_id, role, name, priority FROM streams ORDER BY rank, id");
  for_each_statement_row(s, "streams", 7, [&] {
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
  });
  auto l = db_.prepare(
      "SELECT layer, kind, num_experts, top_k, model_dim, hidden_dim, tokens FROM layers "
      "ORDER BY layer");
  for_each_statement_row(l, "layers", 7, [&] {
    Layer layer;
    layer.layer = static_cast<int>(l.int64(0));
    layer.kind = l.text(1);
    layer.num_experts = static_cast<int>(std::clamp<std::int64_t>(l.int64_or(2, -1), -1, 1 << 20));
    layer.top_k = static_cast<int>(l.int64_or(3, -1));
    layer.model_dim = l.int64_or(4, -1);
    layer.hidden_dim = l.int64_or(5, -1);
    layer.tokens = l.int64_or(6, -1);
    trace_.layers.push_back(std::move(layer));
  });
  for (const char* t : {"devices", "ranks", "streams", "layers"}) verify(t);
}

void TraceLoader::load_activities() {
  auto n = db_.query_int("SELECT (SELECT count(*) FROM kernels) + (SELECT count(*) FROM memcpy)"
                         " + (SELECT count(*) FROM memset)")
               .value_or(0);
  reserve_huge(trace_.activities, static_cast<std::size_t>(n));
  std::unordered_map<std::int64_t, std::int32_t> launch_index;  // the first row of an id, as emplace keeps
  auto lc = db_.prepare(
      "SELECT id, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, registers "
      "FROM launch_configs");
  for_each_statement_row(lc, "launch_configs", 9, [&] {
    LaunchConfig c;
    for (int i = 0; i < 3; ++i) c.grid[i] = static_cast<std::int32_t>(lc.int64(1 + i));
    for (int i = 0; i < 3; ++i) c.block[i] = static_cast<std::int32_t>(lc.int64(4 + i));
    c.shared_bytes = static_cast<std::int32_t>(lc.int64_or(7, -1));
    c.registers = static_cast<std::int32_t>(lc.int64_or(8, -1));
    launch_index.emplace(lc.int64(0), static_cast<std::int32_t>(trace_.launch_configs.size()));
    trace_.launch_configs.push_back(c);
  });
  verify("launch_configs");
  sqlite::TableScan k(db_, "kernels", "rank, stream_id, start_ns, end_ns, name_id, correlation_id, launch_id, op_id");
  reserve_huge(activity_op_ids_, trace_.activities.capacity());
  std::int64_t last_launch = -1;  // the previous kernel's launch config id and index
  std::int32_t last_launch_index = -1;
  for_each_row(k, "kernels", [&](const sqlite::Row& row) {
    auto a = activity_of(row, ActivityType::kKernel, "kernels");
    a.name = checked_string(row.int64(4), "kernels");
    a.correlation_id = row.int64_or(5, 0);
    if (!row.is_null(6)) {
      const auto id = row.int64(6);
      if (id != last_launch || last_launch_index < 0) {
        auto it = launch_index.find(id);
        if (it == launch_index.end())
          throw Error(trace_.run.path + ": kernels names launch config " + std::to_string(id) +
                      " that launch_configs lacks; damaged trace");
        last_launch = id;
        last_launch_index = it->second;
      }
      a.launch = last_launch_index;
    }
    add_activity(a, row, 7, "kernels");
  });
  verify("kernels");
  sqlite::TableScan m(db_, "memcpy",
                      "rank, stream_id, start_ns, end_ns, bytes, copy_kind, src_kind, dst_kind, correlation_id, op_id");
  for_each_row(m, "memcpy", [&](const sqlite::Row& row) {
    auto a = activity_of(row, ActivityType::kMemcpy, "memcpy");
    a.bytes = row.int64(4);
    a.copy_kind = static_cast<std::uint8_t>(checked_enum(row.int64(5), 0, 10, "memcpy", "copy_kind"));
    a.src_kind = static_cast<std::uint8_t>(checked_enum(row.int64_or(6, 0), 0, 4, "memcpy", "src_kind"));
    a.dst_kind = static_cast<std::uint8_t>(checked_enum(row.int64_or(7, 0), 0, 4, "memcpy", "dst_kind"));
    a.correlation_id = row.int64_or(8, 0);
    add_activity(a, row, 9, "memcpy");
  });
  verify("memcpy");
  sqlite::TableScan s(db_, "memset", "rank, stream_id, start_ns, end_ns, bytes, value, correlation_id, op_id");
  for_each_row(s, "memset", [&](const sqlite::Row& row) {
    auto a = activity_of(row, ActivityType::kMemset, "memset");
    a.bytes = row.int64(4);
    a.correlation_id = row.int64_or(6, 0);
    add_activity(a, row, 7, "memset");
  });
  verify("memset");
}

void TraceLoader::load_ops() {
  auto n = db_.query_int("SELECT count(*) FROM op_ranges").value_or(0);
  reserve_huge(trace_.ops, static_cast<std::size_t>(n));
  if (defer_op_streams_) op_stream_ids_.reserve(trace_.ops.capacity());
  // Since version 2 an op's deps and buffer accesses are on its row: read
  // them in this same pass (load_v1_op_links reads version 1's tables).
  const bool links = trace_.run.schema_version >= 2;
  sqlite::TableScan st(db_, "op_ranges",
                       std::string("id, rank, stream_id, kind, name_id, layer, iteration, micro_batch, chunk, phase, "
                                   "start_ns, end_ns, launch_start_ns, launch_end_ns, flops, bytes, peer_rank, "
                                   "nvtx_id") +
                           (links ? ", deps, buffers" : ""));
  const auto kinds = all_op_kinds().size();
  std::vector<std::int64_t> deps;
  std::vector<schema::BufferLink> accesses;
  auto* ops_digest = links ? digest("op_ranges") : nullptr;
  auto* links_digest = links ? digest("op_links") : nullptr;
  sqlite::Row row;
  while (st.step(row)) {
    if (ops_digest) {
      schema::RowHash h, l;
      for (int c = 0; c < schema::kOpLinkColumn; ++c) h.add_column(row, c, c);
      ops_digest->add(h.value());
      l.add_column(row, 0, 0);
      l.add_column(row, schema::kOpLinkColumn, 1);
      l.add_column(row, schema::kOpLinkColumn + 1, 2);
      links_digest->add(l.value());
    }
    OpRange op;
    op.id = OpId(row.int64(0));
    op.rank = checked_rank(row.int64(1), "op_ranges");
    if (defer_op_streams_) op_stream_ids_.push_back(row.int64(2));
    else op.stream = stream_slot(row.int64(2), op.rank);
    auto kind = row.int64(3);
    if (kind < 0 || static_cast<std::size_t>(kind) >= kinds)
      throw Error(trace_.run.path + ": op_ranges has unknown op kind " + std::to_string(kind) +
                  " (written by a newer moetrace?)");
    op.kind = static_cast<OpKind>(kind);
    op.name = row.is_null(4) ? StringId() : checked_string(row.int64(4), "op_ranges");
    op.layer = static_cast<std::int32_t>(row.int64_or(5, -1));
    op.iteration = static_cast<std::int32_t>(row.int64_or(6, -1));
    op.micro_batch = static_cast<std::int32_t>(row.int64_or(7, -1));
    op.chunk = static_cast<std::int32_t>(row.int64_or(8, -1));
    op.phase = static_cast<Phase>(checked_enum(row.int64(9), 0, 2, "op_ranges", "phase"));
    op.start_ns = row.int64(10);
    op.end_ns = row.int64(11);
    check_times(op.start_ns, op.end_ns, "op_ranges");
    op.launch_start_ns = row.int64_or(12, -1);
    op.launch_end_ns = row.int64_or(13, -1);
    op.flops = row.is_null(14) ? -1.0 : row.real(14);
    op.bytes = row.int64_or(15, -1);
    op.peer = RankId(static_cast<std::int32_t>(row.int64_or(16, -1)));
    op.nvtx_id = row.int64_or(17, -1);
    if (links) {
      const auto column = [&row](int i) {
        return row.is_null(i) ? std::nullopt : std::optional<std::string_view>(row.text(i));
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

void TraceLoader::load_op_recv_bytes() {
  if (!db_.has_table("op_recv_bytes")) return;
  std::unordered_map<std::int64_t, std::size_t> index;
  auto st = db_.prepare("SELECT op_id, bytes FROM op_recv_bytes");
  for_each_statement_row(st, "op_recv_bytes", 2, [&] {
    if (index.empty())
      for (std::size_t i = 0; i < trace_.ops.size(); ++i) index.emplace(trace_.ops[i].id.value, i);
    const auto it = index.find(st.int64(0));
    if (it == index.end() || st.int64(1) < 0)
      throw Error(fmt::format("{}: op_recv_bytes names op {} that op_ranges lacks, or a negative size; damaged trace",
                              trace_.run.path, st.int64(0)));
    trace_.ops[it->second].recv_bytes = st.int64(1);
  });
  verify("op_recv_bytes");
}

void TraceLoader::load_v1_op_links() {
  auto d = db_.prepare("SELECT op_id, dep_op_id FROM op_deps");
  while (d.step()) trace_.op_deps.push_back({OpId(d.int64(0)), OpId(d.int64(1))});
  if (!options_.memory) return;
  auto ob = db_.prepare("SELECT op_id, buffer_id, access FROM op_buffers");
  while (ob.step())
    trace_.op_buffers.push_back(
        {OpId(ob.int64(0)), BufferId(ob.int64(1)), static_cast<schema::Access>(ob.int64(2))});
}

}  // namespace moetrace::analyzer
