// The host-side and MoE tables of a trace file into the model (trace_loader.h).
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

void TraceLoader::load_api_calls(std::vector<ApiCall>& out, bool whole, std::int64_t first, std::int64_t last) {
  sqlite::TableScan scan(db_, "api_calls",
                         "rank, thread_id, start_ns, end_ns, api, name_id, correlation_id, return_code",
                         whole ? std::nullopt : std::optional(sqlite::TableScan::Rowids{first, last}));
  if (whole) reserve_huge(out, out.size() + recorded_rows("api_calls"));
  else if (out.empty()) out.reserve(static_cast<std::size_t>(last - first + 1));  // a block's rows at most
  for_each_row(scan, "api_calls", [&](const sqlite::Row& row) {
    ApiCall a;
    a.rank = checked_rank(row.int64(0), "api_calls");
    a.thread_id = row.int64(1);
    a.start_ns = row.int64(2);
    a.end_ns = row.int64(3);
    check_times(a.start_ns, a.end_ns, "api_calls");
    a.api = static_cast<schema::ApiKind>(checked_enum(row.int64(4), 1, 2, "api_calls", "api"));
    a.name = checked_string(row.int64(5), "api_calls");
    a.correlation_id = row.int64(6);
    a.return_code = static_cast<std::int32_t>(row.int64_or(7, 0));
    out.push_back(a);
    step_progress("api calls");
  });
}

void TraceLoader::load_sync_events() {
  if (!db_.has_table("sync_events")) return;
  // The event waits' columns were added within version 2: older traces lack them.
  const bool waits = db_.has_column("sync_events", "event_record_correlation_id");
  auto st = db_.prepare(waits ? "SELECT rank, stream_id, start_ns, end_ns, kind, correlation_id, wait_stream_id, "
                                "event_record_correlation_id FROM sync_events"
                              : "SELECT rank, stream_id, start_ns, end_ns, kind, correlation_id FROM sync_events");
  while (st.step()) {
    SyncEvent e;
    e.rank = checked_rank(st.int64(0), "sync_events");
    e.stream = StreamId(static_cast<std::int32_t>(st.int64_or(1, -1)));
    e.start_ns = st.int64(2);
    e.end_ns = st.int64(3);
    if (e.end_ns < e.start_ns) continue;
    e.kind = static_cast<std::int32_t>(st.int64(4));
    e.correlation_id = st.int64_or(5, 0);
    if (waits) {
      e.wait_stream = StreamId(static_cast<std::int32_t>(st.int64_or(6, -1)));
      e.event_record_correlation_id = st.int64_or(7, 0);
    }
    trace_.sync_events.push_back(e);
  }
  sort_sync_events();
}

void TraceLoader::sort_sync_events() {
  std::stable_sort(trace_.sync_events.begin(), trace_.sync_events.end(), [](const SyncEvent& a, const SyncEvent& b) {
    return std::tie(a.rank, a.start_ns) < std::tie(b.rank, b.start_ns);
  });
}

void TraceLoader::sort_api_calls() {
  const auto before = [](const ApiCall& a, const ApiCall& b) {
    return std::tie(a.correlation_id, a.rank) < std::tie(b.correlation_id, b.rank);
  };
  // Writers that number calls across ranks store them in order already.
  if (!std::is_sorted(trace_.api_calls.begin(), trace_.api_calls.end(), before))
    std::stable_sort(trace_.api_calls.begin(), trace_.api_calls.end(), before);
}

void TraceLoader::load_nvtx() {
  // 11 columns hashed: the rowid last, as the writer hashes it.
  for_each_row(
      "nvtx_ranges",
      "rank, thread_id, start_ns, end_ns, domain_id, name_id, category, color, payload_int, payload_double, id",
      trace_.nvtx, [&](const sqlite::Row& row) {
    NvtxRange r;
    r.id = row.int64(10);
    r.rank = checked_rank(row.int64(0), "nvtx_ranges");
    r.thread_id = row.int64(1);
    r.start_ns = row.int64(2);
    r.end_ns = row.int64_or(3, -1);
    if (r.end_ns >= 0) check_times(r.start_ns, r.end_ns, "nvtx_ranges");
    r.domain = row.is_null(4) ? StringId() : checked_string(row.int64(4), "nvtx_ranges");
    r.name = checked_string(row.int64(5), "nvtx_ranges");
    r.category = static_cast<std::int32_t>(row.int64_or(6, -1));
    r.has_payload_int = !row.is_null(8);
    r.payload_int = row.int64_or(8, 0);
    trace_.nvtx.push_back(r);
    step_progress("nvtx");
  });
  verify("nvtx_ranges");
  sort_nvtx();
}

void TraceLoader::sort_nvtx() {
  std::sort(trace_.nvtx.begin(), trace_.nvtx.end(), [](const NvtxRange& a, const NvtxRange& b) {
    return std::tie(a.rank, a.thread_id, a.start_ns) < std::tie(b.rank, b.thread_id, b.start_ns);
  });
}

void TraceLoader::load_memory() {
  for_each_row(
      "memory_events", "rank, ts_ns, kind, address, bytes, memory_kind, stream_id, correlation_id, buffer_id, id",
      trace_.memory_events, [&](const sqlite::Row& row) {
    MemoryEvent e;
    e.rank = checked_rank(row.int64(0), "memory_events");
    e.ts_ns = row.int64(1);
    e.alloc = checked_enum(row.int64(2), 0, 1, "memory_events", "kind") != 0;
    e.address = static_cast<std::uint64_t>(row.int64(3));
    e.bytes = row.int64(4);
    e.memory_kind = static_cast<schema::MemoryKind>(checked_enum(row.int64(5), 0, 4, "memory_events", "memory_kind"));
    e.buffer = BufferId(row.int64_or(8, -1));
    trace_.memory_events.push_back(e);
    step_progress("memory");
  });
  sort_memory_events();
  auto b = db_.prepare(
      "SELECT id, rank, tag, bytes, memory_kind, layer, chunk, alloc_ns, free_ns, address FROM buffers "
      "ORDER BY id");
  verify("memory_events");
  for_each_statement_row(b, "buffers", 10, [&] {
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
  });
  verify("buffers");
}

void TraceLoader::sort_memory_events() {
  std::stable_sort(trace_.memory_events.begin(), trace_.memory_events.end(),
                   [](const MemoryEvent& a, const MemoryEvent& b) {
                     return std::tie(a.rank, a.ts_ns) < std::tie(b.rank, b.ts_ns);
                   });
}

void TraceLoader::load_moe_tables() {
  if (trace_.run.schema_version < 2) load_v1_op_links();
  // In key order (the order of the table's b-tree; sorted below where a
  // file's table is another kind).
  for_each_row(
      "expert_load", "iteration, layer, src_rank, expert, tokens", trace_.expert_load, [&](const sqlite::Row& row) {
    ExpertLoad e;
    e.iteration = static_cast<std::int32_t>(row.int64(0));
    e.layer = static_cast<std::int32_t>(row.int64(1));
    e.src_rank = static_cast<std::int32_t>(row.int64(2));
    e.expert = static_cast<std::int32_t>(row.int64(3));
    e.tokens = row.int64(4);
    if (e.tokens < 0) throw Error(trace_.run.path + ": expert_load has a negative token count");
    check_index(e.expert, "expert_load", "expert");
    if (e.src_rank != -1) check_index(e.src_rank, "expert_load", "src_rank");  // -1: per-expert totals
    trace_.expert_load.push_back(e);
  });
  const auto by_key = [](const ExpertLoad& a, const ExpertLoad& b) {
    return std::tie(a.iteration, a.layer, a.src_rank, a.expert) < std::tie(b.iteration, b.layer, b.src_rank, b.expert);
  };
  if (!std::is_sorted(trace_.expert_load.begin(), trace_.expert_load.end(), by_key))
    std::stable_sort(trace_.expert_load.begin(), trace_.expert_load.end(), by_key);
  auto p = db_.prepare(
      "SELECT iteration, layer, expert, rank, role FROM expert_placement "
      "ORDER BY iteration, layer, expert, rank");
  verify("expert_load");
  for_each_statement_row(p, "expert_placement", 5, [&] {
    check_index(p.int64(2), "expert_placement", "expert");
    check_index(p.int64(3), "expert_placement", "rank");
    trace_.placements.push_back({static_cast<std::int32_t>(p.int64(0)),
                                 static_cast<std::int32_t>(p.int64(1)),
                                 static_cast<std::int32_t>(p.int64(2)),
                                 static_cast<std::int32_t>(p.int64(3)), std::string(p.text(4))});
  });
  verify("expert_placement");
}

void TraceLoader::load_autograd() {
  load_nvtx_table("autograd_ranges", "nvtx_id, sequence, backward", 3, [](auto& st, NvtxRange& r) {
    r.autograd_seq = st.int64(1);
    r.autograd_backward = st.int64(2) != 0;
  });
}

void TraceLoader::load_input_shapes() {
  load_nvtx_table("input_shapes", "nvtx_id, input_dims, input_types", 3, [this](auto& st, NvtxRange& r) {
    r.input_shape = static_cast<std::int32_t>(trace_.input_shapes.size());
    trace_.input_shapes.push_back(InputShape{std::string(st.text(1)), std::string(st.text(2))});
  });
}

void TraceLoader::load_collectives() {
  if (!db_.has_table("collectives")) return;
  // Their sequence numbers (table collective_seq, absent from traces
  // older than it), by collectives.id.
  std::unordered_map<std::int64_t, std::int64_t> seq_of;
  if (db_.has_table("collective_seq")) {
    auto sq = db_.prepare("SELECT collective_id, seq FROM collective_seq");
    for_each_statement_row(sq, "collective_seq", 2, [&] { seq_of[sq.int64(0)] = sq.int64(1); });
    verify("collective_seq");
  }
  auto st = db_.prepare(
      "SELECT rank, stream_id, start_ns, end_ns, correlation_id, name, in_nelems, out_nelems, dtype, "
      "group_size, group_ranks, process_group, in_splits, out_splits, id FROM collectives "
      "ORDER BY rank, correlation_id, start_ns");
  for_each_statement_row(st, "collectives", 14, [&] {
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
  });
  verify("collectives");
}

std::vector<std::int64_t> TraceLoader::parse_splits(std::string_view text) {
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

}  // namespace moetrace::analyzer
