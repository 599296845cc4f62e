// The records of an import in memory into the model, numbered as the writer
// numbers them, so that the model is the one a trace file of the same import
// gives (trace_loader.h).
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

void TraceLoader::take_imported() {
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
  reserve_huge(trace_.activities, in.kernels.size() + in.memcpys.size() + in.memsets.size());
  reserve_huge(activity_op_ids_, trace_.activities.capacity());
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
    reserve_huge(trace_.api_calls, in.api_calls.size());
    for (const auto& c : in.api_calls)
      trace_.api_calls.push_back({c.start_ns, c.end_ns, c.correlation_id, c.thread_id, c.rank, c.name, c.api,
                                  c.return_code});
    sort_api_calls();
    for (const auto& e : in.sync_events)
      trace_.sync_events.push_back(
          {e.start_ns, e.end_ns, e.correlation_id, e.stream, e.rank, e.kind, e.wait_stream, e.event_record_correlation_id});
    sort_sync_events();
  }
  if (options_.nvtx) {
    reserve_huge(trace_.nvtx, in.nvtx.size());
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

}  // namespace moetrace::analyzer
