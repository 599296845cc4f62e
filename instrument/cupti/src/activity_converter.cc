#include "moetrace/cupti/activity_converter.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace moetrace::cupti {
namespace {

std::int64_t ns(std::uint64_t t) { return static_cast<std::int64_t>(t); }

// The record as the kind its `kind` field names.
template <class Record>
const Record& as(const CUpti_Activity* record) {
  return *reinterpret_cast<const Record*>(record);
}

}  // namespace

schema::MemoryKind memory_kind_from_cupti(std::uint32_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return schema::MemoryKind::kPageableHost;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return schema::MemoryKind::kPinnedHost;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC:
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY: return schema::MemoryKind::kDevice;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return schema::MemoryKind::kManaged;
    default: return schema::MemoryKind::kUnknown;
  }
}

std::string overhead_kind_name(CUpti_ActivityOverheadKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: return "driver_compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: return "cupti_buffer_flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: return "cupti_instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: return "cupti_resource";
    case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING: return "module_loading";
    case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING: return "lazy_function_loading";
    case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL: return "command_buffer_full";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST: return "cupti_buffer_request";
    case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT: return "uvm_activity_init";
    default: return "unknown";
  }
}

std::string demangle(const char* name) {
  if (name == nullptr) return "<unnamed>";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

ActivityConverter::ActivityConverter(RecordSink& sink, ConverterOptions options)
    : sink_(sink), options_(std::move(options)) {}

void ActivityConverter::map_stream(std::uint32_t context, std::uint32_t stream,
                                   const instrument::StreamRecord& record) {
  streams_[{context, stream}] = {record.id, record.rank};
  instrument::StreamRecord r = record;
  r.native_id = stream;
  sink_.add(r);
}

void ActivityConverter::map_device(std::uint32_t device, RankId rank) { devices_[device] = rank; }

void ActivityConverter::note_allocation(std::uint64_t address, BufferId buffer) {
  announced_[address].push_back(buffer);
}

void ActivityConverter::note_op(const OpLabel& label, std::int64_t launch_start,
                                std::int64_t launch_end) {
  auto [it, inserted] = ops_.try_emplace(label.op.value);
  if (!inserted && it->second.from_nvtx) return;
  it->second.label = label;
  // An op issued in several pieces (a collective's phases): its launch range spans them.
  it->second.launch_start = inserted ? launch_start : std::min(it->second.launch_start, launch_start);
  it->second.launch_end = std::max(it->second.launch_end, launch_end);
}

void ActivityConverter::note_waits(OpId op, const std::vector<OpId>& waits_for) {
  auto& w = waits_[op.value];
  w.clear();  // set, not added to: each run of the executor notes them
  for (OpId d : waits_for) w.push_back(d.value);
}

void ActivityConverter::note_graph_node(std::uint64_t node, OpId op) {
  if (node != 0 && op.valid()) graph_node_op_[node] = op;
}

// The clones of one instantiation are announced after the capture that made
// their originals, so the original's op is known here.
void ActivityConverter::note_graph_node_clone(std::uint64_t clone, std::uint64_t original) {
  auto it = graph_node_op_.find(original);
  if (clone != 0 && it != graph_node_op_.end()) graph_node_op_[clone] = it->second;
}

RankId ActivityConverter::rank_of_device(std::uint32_t device) const {
  auto it = devices_.find(device);
  return it != devices_.end() ? it->second : options_.default_rank;
}

ActivityConverter::StreamInfo ActivityConverter::stream_of(std::uint32_t device,
                                                           std::uint32_t context,
                                                           std::uint32_t stream) {
  auto it = streams_.find({context, stream});
  if (it != streams_.end()) return it->second;
  StreamInfo info{StreamId(next_auto_stream_++), rank_of_device(device)};
  streams_[{context, stream}] = info;
  instrument::StreamRecord r;
  r.id = info.id;
  r.rank = info.rank;
  r.device = DeviceId(static_cast<std::int32_t>(device));
  r.native_id = stream;
  r.role = instrument::kRoleOther;
  r.name = "ctx" + std::to_string(context) + ".stream" + std::to_string(stream);
  sink_.add(r);
  return info;
}

OpId ActivityConverter::op_of(std::uint32_t correlation) const {
  if (correlation == 0) return OpId();
  auto it = correlation_op_.find(correlation);
  return it != correlation_op_.end() ? it->second : OpId();
}

OpId ActivityConverter::op_of(const Pending& p) const {
  if (p.graph_node != 0)
    if (auto it = graph_node_op_.find(p.graph_node); it != graph_node_op_.end()) return it->second;
  OpId op = op_of(p.correlation);
  return op.valid() ? op : op_of(p.runtime_correlation);
}

void ActivityConverter::note_op_time(OpId op, std::int64_t start, std::int64_t end) {
  if (!op.valid() || (start == 0 && end == 0)) return;
  OpTimes& t = op_times_[op.value];
  t.start = std::min(t.start, start);
  t.end = std::max(t.end, end);
}

void ActivityConverter::emit(Pending& p, OpId op) {
  if (!op.valid()) ++stats_.activities_without_op;
  switch (p.kind) {
    case 0:
      p.kernel.op = op;
      note_op_time(op, p.kernel.start_ns, p.kernel.end_ns);
      add_counted(p.kernel, stats_.kernels);
      break;
    case 1:
      p.memcpy.op = op;
      note_op_time(op, p.memcpy.start_ns, p.memcpy.end_ns);
      add_counted(p.memcpy, stats_.memcpys);
      break;
    default:
      p.memset.op = op;
      note_op_time(op, p.memset.start_ns, p.memset.end_ns);
      add_counted(p.memset, stats_.memsets);
      break;
  }
}

void ActivityConverter::resolve_pending(std::uint32_t correlation) {
  auto range = pending_by_corr_.equal_range(correlation);
  for (auto it = range.first; it != range.second; ++it) {
    const std::size_t i = it->second;
    if (pending_done_[i]) continue;
    pending_done_[i] = 1;
    emit(pending_[i], op_of(pending_[i]));
  }
  pending_by_corr_.erase(correlation);
}

StringId ActivityConverter::kernel_name(const char* mangled) {
  const std::string_view key = mangled != nullptr ? std::string_view(mangled) : std::string_view();
  if (auto it = kernel_names_.find(key); it != kernel_names_.end()) return it->second;
  const StringId id = sink_.intern(demangle(mangled));
  kernel_names_.emplace(std::string(key), id);
  ++stats_.kernel_names;
  return id;
}

// An activity whose op is known is written now; otherwise it waits, under its
// correlation ids, for the op's label.
void ActivityConverter::emit_or_hold(Pending p) {
  const OpId op = op_of(p);
  if (p.graph_node != 0) ++stats_.graph_activities;
  if (op.valid()) {
    emit(p, op);
    return;
  }
  pending_by_corr_.emplace(p.correlation, pending_.size());
  if (p.runtime_correlation != 0 && p.runtime_correlation != p.correlation)
    pending_by_corr_.emplace(p.runtime_correlation, pending_.size());
  pending_.push_back(std::move(p));
  pending_done_.push_back(0);
}

void ActivityConverter::convert(const CUpti_Activity* record) {
  if (record == nullptr) return;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = as<CUpti_ActivityKernel10>(record);
      const StreamInfo s = stream_of(k.deviceId, k.contextId, k.streamId);
      Pending p{.correlation = k.correlationId, .graph_node = k.graphNodeId, .kind = 0};
      p.kernel = {.rank = s.rank, .stream = s.id, .start_ns = ns(k.start), .end_ns = ns(k.end),
                  .name = kernel_name(k.name), .correlation_id = k.correlationId,
                  .grid = {k.gridX, k.gridY, k.gridZ}, .block = {k.blockX, k.blockY, k.blockZ},
                  .shared_bytes = k.staticSharedMemory + k.dynamicSharedMemory,
                  .registers = k.registersPerThread};
      emit_or_hold(std::move(p));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = as<CUpti_ActivityMemcpy6>(record);
      const StreamInfo s = stream_of(m.deviceId, m.contextId, m.streamId);
      Pending p{.correlation = m.correlationId, .runtime_correlation = m.runtimeCorrelationId,
                .graph_node = m.graphNodeId, .kind = 1};
      p.memcpy = {.rank = s.rank, .stream = s.id, .start_ns = ns(m.start), .end_ns = ns(m.end),
                  .bytes = static_cast<std::int64_t>(m.bytes),
                  .copy_kind = m.copyKind <= 10 ? static_cast<schema::CopyKind>(m.copyKind)
                                                : schema::CopyKind::kUnknown,
                  .src_kind = memory_kind_from_cupti(m.srcKind), .dst_kind = memory_kind_from_cupti(m.dstKind),
                  .correlation_id = m.correlationId};
      emit_or_hold(std::move(p));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = as<CUpti_ActivityMemset4>(record);
      const StreamInfo s = stream_of(m.deviceId, m.contextId, m.streamId);
      Pending p{.correlation = m.correlationId, .graph_node = m.graphNodeId, .kind = 2};
      p.memset = {.rank = s.rank, .stream = s.id, .start_ns = ns(m.start), .end_ns = ns(m.end),
                  .bytes = static_cast<std::int64_t>(m.bytes), .value = static_cast<std::int32_t>(m.value),
                  .correlation_id = m.correlationId};
      emit_or_hold(std::move(p));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMORY2: return convert_memory(as<CUpti_ActivityMemory4>(record));
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: return convert_api(as<CUpti_ActivityAPI>(record));
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return convert_sync(as<CUpti_ActivitySynchronization2>(record));
    case CUPTI_ACTIVITY_KIND_OVERHEAD: return convert_overhead(as<CUpti_ActivityOverhead3>(record));
    case CUPTI_ACTIVITY_KIND_MARKER: return convert_marker(as<CUpti_ActivityMarker2>(record));
    case CUPTI_ACTIVITY_KIND_MARKER_DATA: return convert_marker_data(as<CUpti_ActivityMarkerData2>(record));
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto& e = as<CUpti_ActivityExternalCorrelation>(record);
      if (e.externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) return;
      correlation_op_[e.correlationId] = OpId(static_cast<std::int64_t>(e.externalId));
      ++stats_.correlations;
      resolve_pending(e.correlationId);
      return;
    }
    default:
      ++stats_.unknown_kinds;
      return;
  }
}

void ActivityConverter::convert_memory(const CUpti_ActivityMemory4& m) {
  instrument::MemoryEventRecord r;
  const bool alloc = m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  if (!alloc && m.memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) {
    ++stats_.unknown_kinds;
    return;
  }
  r.rank = rank_of_device(m.deviceId);
  if (m.isAsync != 0) {
    const StreamInfo s = stream_of(m.deviceId, m.contextId, m.streamId);
    r.stream = s.id;
    r.rank = s.rank;
  }
  r.ts_ns = ns(m.timestamp);
  r.alloc = alloc;
  r.address = m.address;
  r.bytes = static_cast<std::int64_t>(m.bytes);
  r.memory_kind = memory_kind_from_cupti(static_cast<std::uint32_t>(m.memoryKind));
  r.correlation_id = m.correlationId;
  if (alloc) {
    auto it = announced_.find(m.address);
    if (it != announced_.end() && !it->second.empty()) {
      r.buffer = it->second.front();
      it->second.erase(it->second.begin());
      if (it->second.empty()) announced_.erase(it);
      live_[m.address] = r.buffer;
    }
  } else {
    auto it = live_.find(m.address);
    if (it != live_.end()) {
      r.buffer = it->second;
      live_.erase(it);
    }
  }
  add_counted(r, stats_.memory_events);
}

void ActivityConverter::convert_api(const CUpti_ActivityAPI& a) {
  instrument::ApiCallRecord r;
  r.api = a.kind == CUPTI_ACTIVITY_KIND_RUNTIME ? schema::ApiKind::kRuntime : schema::ApiKind::kDriver;
  r.rank = options_.default_rank;
  const OpId op = op_of(a.correlationId);
  if (op.valid()) {
    auto it = ops_.find(op.value);
    if (it != ops_.end()) r.rank = it->second.label.rank;
  }
  r.thread_id = a.threadId;
  r.start_ns = ns(a.start);
  r.end_ns = ns(a.end);
  const auto cbid = static_cast<std::uint32_t>(a.cbid);
  const std::uint64_t key = (static_cast<std::uint64_t>(r.api) << 32) | cbid;
  auto named = api_names_.find(key);
  if (named == api_names_.end()) {
    std::string name = options_.api_name ? options_.api_name(r.api, cbid) : std::string();
    if (name.empty())
      name = (r.api == schema::ApiKind::kRuntime ? "runtime_cbid_" : "driver_cbid_") + std::to_string(cbid);
    named = api_names_.emplace(key, sink_.intern(name)).first;
  }
  r.name = named->second;
  r.correlation_id = a.correlationId;
  r.return_code = static_cast<std::int32_t>(a.returnValue);
  add_counted(r, stats_.api_calls);
}

void ActivityConverter::convert_sync(const CUpti_ActivitySynchronization2& s) {
  instrument::SyncRecord r;
  r.rank = options_.default_rank;
  if (s.streamId != CUPTI_SYNCHRONIZATION_INVALID_VALUE &&
      s.contextId != CUPTI_SYNCHRONIZATION_INVALID_VALUE) {
    auto it = streams_.find({s.contextId, s.streamId});
    if (it != streams_.end()) {
      r.stream = it->second.id;
      r.rank = it->second.rank;
    }
  }
  r.start_ns = ns(s.start);
  r.end_ns = ns(s.end);
  r.kind = static_cast<std::int32_t>(s.type);
  r.correlation_id = s.correlationId;
  add_counted(r, stats_.syncs);
}

void ActivityConverter::convert_overhead(const CUpti_ActivityOverhead3& o) {
  instrument::OverheadRecord r;
  r.rank = options_.default_rank;
  if (o.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD || o.objectKind == CUPTI_ACTIVITY_OBJECT_PROCESS)
    r.thread_id = o.objectId.pt.threadId;
  else if (o.objectKind == CUPTI_ACTIVITY_OBJECT_DEVICE)
    r.rank = rank_of_device(o.objectId.dcs.deviceId);
  r.start_ns = ns(o.start);
  r.end_ns = ns(o.end);
  r.kind = overhead_kind_name(o.overheadKind);
  add_counted(r, stats_.overheads);
}

void ActivityConverter::convert_marker(const CUpti_ActivityMarker2& m) {
  const auto flags = static_cast<std::uint32_t>(m.flags);
  if ((flags & CUPTI_ACTIVITY_FLAG_MARKER_END) != 0) {
    close_marker(m.id, ns(m.timestamp));
    return;
  }
  OpenMarker& o = markers_[m.id];
  o.start = ns(m.timestamp);
  o.name = m.name != nullptr ? m.name : "";
  o.domain = m.domain != nullptr ? m.domain : "";
  o.thread = m.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m.objectId.pt.threadId : 0;
  o.have_start = true;
  if ((flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS) != 0) close_marker(m.id, o.start);
}

void ActivityConverter::convert_marker_data(const CUpti_ActivityMarkerData2& d) {
  OpenMarker& o = markers_[d.id];
  switch (d.payloadKind) {
    case CUPTI_METRIC_VALUE_KIND_INT64: o.payload_int = d.payload.metricValueInt64; break;
    case CUPTI_METRIC_VALUE_KIND_UINT64:
      o.payload_int = static_cast<std::int64_t>(d.payload.metricValueUint64);
      break;
    case CUPTI_METRIC_VALUE_KIND_DOUBLE: o.payload_double = d.payload.metricValueDouble; break;
    default: break;
  }
  if ((static_cast<std::uint32_t>(d.flags) & CUPTI_ACTIVITY_FLAG_MARKER_COLOR_ARGB) != 0)
    o.color = d.color;
  o.category = static_cast<std::int32_t>(d.category);
}

void ActivityConverter::close_marker(std::uint32_t id, std::int64_t end) {
  auto it = markers_.find(id);
  if (it == markers_.end()) return;
  OpenMarker o = std::move(it->second);
  markers_.erase(it);
  if (!o.have_start) return;
  instrument::NvtxRangeRecord r = nvtx_range(o, end);
  std::optional<OpLabel> label;
  if (o.domain == kNvtxDomain) label = parse_op_message(o.name);
  if (label) {
    r.rank = label->rank;
    SeenOp& seen = ops_[label->op.value];
    const bool first = !seen.from_nvtx;
    seen.label = *label;
    seen.launch_start = first ? o.start : std::min(seen.launch_start, o.start);
    seen.launch_end = first ? end : std::max(seen.launch_end, end);
    seen.from_nvtx = true;
  }
  add_counted(r, stats_.nvtx_ranges);
}

instrument::NvtxRangeRecord ActivityConverter::nvtx_range(const OpenMarker& o, std::int64_t end) {
  instrument::NvtxRangeRecord r;
  r.rank = options_.default_rank;
  r.thread_id = o.thread;
  r.start_ns = o.start;
  r.end_ns = end;
  r.domain = sink_.intern(o.domain);
  r.name = sink_.intern(o.name);
  r.category = o.category;
  r.color = o.color;
  r.payload_int = o.payload_int;
  r.payload_double = o.payload_double;
  return r;
}

// An op that ran nothing on the device (a timing-only collective, an
// all-to-all of one rank) is a point where the GPU reached it: after the
// work of the ops issued to its stream before it (a stream runs its work in
// issue order), after the ops it waits for on other streams (note_waits),
// and not before the host issued it. Its launch time alone would place it
// where the host was, often far ahead of the GPU: a one-rank layer's window
// then spanned from one iteration's all-to-all issue to the next iteration's
// GPU work (72 ms in a 40 ms iteration on an H200).
std::unordered_map<std::int64_t, std::int64_t> ActivityConverter::empty_op_points() const {
  struct Issued {
    std::int64_t launch_start, launch_end, id;
    std::pair<std::int64_t, std::int64_t> stream;
  };
  std::vector<Issued> issued;
  issued.reserve(ops_.size());
  for (const auto& [id, seen] : ops_)
    issued.push_back({seen.launch_start, seen.launch_end, id,
                      {static_cast<std::int64_t>(seen.label.rank.value),
                       static_cast<std::int64_t>(seen.label.stream.value)}});
  // One host thread issues the ops in an order that respects their waits.
  std::sort(issued.begin(), issued.end(), [](const Issued& a, const Issued& b) {
    return a.launch_start != b.launch_start ? a.launch_start < b.launch_start : a.id < b.id;
  });
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> stream_free;  // end of its work so far
  std::unordered_map<std::int64_t, std::int64_t> done;  // op -> end of its work (or its point)
  std::unordered_map<std::int64_t, std::int64_t> at;
  for (const Issued& o : issued) {
    std::int64_t& free_at = stream_free[o.stream];
    auto t = op_times_.find(o.id);
    if (t != op_times_.end()) {
      free_at = std::max(free_at, t->second.end);
      done[o.id] = t->second.end;
      continue;
    }
    std::int64_t point = std::max({o.launch_end, free_at, std::int64_t{0}});
    if (auto w = waits_.find(o.id); w != waits_.end())
      for (std::int64_t d : w->second)
        if (auto e = done.find(d); e != done.end()) point = std::max(point, e->second);
    at[o.id] = point;
    done[o.id] = point;
    free_at = point;
  }
  return at;
}

void ActivityConverter::finish() {
  if (finished_) return;
  finished_ = true;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    if (pending_done_[i]) continue;
    pending_done_[i] = 1;
    emit(pending_[i], op_of(pending_[i]));
  }
  pending_.clear();
  pending_done_.clear();
  pending_by_corr_.clear();
  const auto empty_at = empty_op_points();
  for (const auto& [id, seen] : ops_) {
    const OpLabel& l = seen.label;
    instrument::OpRangeRecord r{.id = l.op, .rank = l.rank, .stream = l.stream, .kind = l.kind,
                                .name = sink_.intern(l.name), .layer = l.layer, .iteration = l.iteration,
                                .micro_batch = l.micro_batch, .chunk = l.chunk, .phase = l.phase,
                                .launch_start_ns = seen.launch_start, .launch_end_ns = seen.launch_end,
                                .flops = l.flops, .bytes = l.bytes, .recv_bytes = l.recv_bytes, .peer = l.peer};
    auto t = op_times_.find(id);
    if (t != op_times_.end()) {
      r.start_ns = t->second.start;
      r.end_ns = t->second.end;
    } else {
      r.start_ns = r.end_ns = empty_at.at(id);
    }
    add_counted(r, stats_.op_ranges);
  }
  for (auto& [id, o] : markers_)
    if (o.have_start) add_counted(nvtx_range(o, -1), stats_.nvtx_ranges);
  markers_.clear();
}

}  // namespace moetrace::cupti
