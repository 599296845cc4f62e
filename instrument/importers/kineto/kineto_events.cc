// The event kinds of a Kineto trace, from a finished RawEvent to its records
// (kineto_handler.h): kernels, copies and memsets (GPU activities), CUDA
// synchronisation, memory events, host ranges (cpu_op, user_annotation,
// python_function) and the API calls that launch the GPU work.
#include "kineto_handler.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "moetrace/schema/error.h"

namespace moetrace::importers::kineto {

using namespace std::string_view_literals;

void Handler::finish_event() {
  if (report_progress_ && (++events_ & 0x3FFF) == 0) builder_.progress("reading " + label_, in_.fraction());
  const auto& e = event_;
  // An event missing what its kind needs is counted skipped as malformed.
  auto malformed = [&](bool bad) {
    if (bad) out_->skip("malformed_event");
    return bad;
  };
  if (malformed(e.ph.empty())) return;
  if (e.ph == "M") return;  // process/thread names and sort order: display only
  if (malformed(e.bad_time || !e.ts_ns)) return;
  cat_.assign(e.cat);
  std::transform(cat_.begin(), cat_.end(), cat_.begin(), ascii_lower);
  const std::string_view cat = cat_;
  if (e.ph == "X") {
    if (malformed(!e.dur_ns)) return;
    const std::int64_t start = *e.ts_ns;
    std::int64_t end = 0;
    if (malformed(__builtin_add_overflow(start, *e.dur_ns, &end))) return;
    // mtia_ccp_events: the kernels of an MTIA device (libkineto aliases the
    // type to CONCURRENT_KERNEL); other accelerators' kernels are "kernel".
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "memcpy" || cat == "gpu_memset" || cat == "memset" ||
        cat == "mtia_ccp_events") {
      gpu_activity(cat, start, end);
    } else if (cat == "op" && !e.args.kind.empty() && e.args.op && e.tid) {
      // moetrace's own export of an op range.
      const auto kind = parse_op_kind(e.args.kind);
      const auto phase = parse_phase(e.args.phase.empty() ? "fwd" : e.args.phase);
      if (malformed(!kind || !phase)) return;
      auto narrow = [](const std::optional<std::int64_t>& v) {
        return v && *v >= INT32_MIN && *v <= INT32_MAX ? static_cast<std::int32_t>(*v) : -1;
      };
      OpSlice o;
      o.start = start;
      o.end = end;
      o.pid = e.pid.value_or(0);
      o.tid = *e.tid;
      o.id = *e.args.op;
      o.name = out_->intern(e.name);
      o.kind = *kind;
      o.phase = *phase;
      o.layer = narrow(e.args.layer);
      o.iteration = narrow(e.args.iteration);
      o.micro_batch = narrow(e.args.micro_batch);
      o.chunk = narrow(e.args.chunk);
      o.flops = e.args.flops.value_or(-1);
      o.bytes = e.args.bytes.value_or(-1);
      o.peer = e.args.peer_rank.value_or(-1);
      out_->ops.push_back(o);
    } else if (cat == "cuda_runtime" || cat == "runtime" || cat == "cuda_driver" || cat == "cuda_api" ||
               cat == "mtia_runtime" || cat == "xpu_runtime" || cat == "privateuse1_runtime" ||
               cat == "privateuse1_driver") {
      // Runtime calls of the other accelerators: libkineto aliases their
      // types to RUNTIME / DRIVER.
      if (malformed(!e.tid)) return;
      ApiCall a;
      a.start = start;
      a.end = end;
      a.pid = e.pid.value_or(-1);
      a.tid = *e.tid;
      a.name = out_->intern(e.name);
      a.correlation = e.args.correlation.value_or(0);
      a.driver = cat == "cuda_driver" || cat == "privateuse1_driver" || e.args.api == "driver";
      out_->api.push_back(a);
    } else if (cat == "cpu_op" || cat == "operator" || cat == "user_annotation" ||
               cat == "python_function" || cat == "nvtx") {
      if (malformed(!e.tid)) return;
      CpuRange r;
      r.start = start;
      r.end = end;
      r.tid = *e.tid;
      r.pid = e.pid.value_or(0);
      r.name = out_->intern(e.name);
      r.category = cat == "user_annotation"   ? kCategoryUserAnnotation
                   : cat == "python_function" ? kCategoryPythonFunction
                   : cat == "nvtx"            ? -1
                                              : kCategoryCpuOp;
      if (cat == "nvtx") {  // moetrace's export of an NVTX range
        r.domain = e.args.domain.empty() ? -2 : out_->intern(e.args.domain);
        r.payload = e.args.payload;
      }
      if (e.args.sequence && *e.args.sequence >= 0) {
        r.sequence = e.args.sequence;
        r.backward = e.args.fwd_thread.value_or(0) > 0;
      }
      // Shapes of the matrix products and top-k only (what the layer sizes
      // are read from): every other op's would grow the trace by a string each.
      if (!e.args.input_dims.empty() && e.args.input_dims != "[]" && schema::shapes_kept_name(e.name)) {
        r.input_dims = e.args.input_dims;
        r.input_types = e.args.input_types;
      }
      // An NCCL call's range ("nccl:all_to_all"): what its kernels did,
      // where the kernels lack Kineto's collective args (kineto_importer.cc).
      if (e.name.starts_with("nccl:") && !e.args.input_dims.empty()) {
        r.comm_dims = e.args.input_dims;
        r.comm_types = e.args.input_types;
      }
      out_->ranges.push_back(std::move(r));
    } else if (cat == "cuda_sync") {
      sync_activity(start, end);
    } else {
      // gpu_user_annotation (ranges projected onto a stream), profiler
      // spans ("Trace"), and whatever else a newer PyTorch emits.
      out_->skip(key_part(cat.empty() ? "uncategorized" : cat));
    }
    return;
  }
  if (e.ph == "s" || e.ph == "f" || e.ph == "t") {
    if (cat == "ac2g" && e.id && e.pid && e.tid) {
      out_->flows.push_back({*e.pid, *e.tid, *e.ts_ns, *e.id});
    } else {
      out_->skip("flow_" + key_part(cat));
    }
    return;
  }
  if ((e.ph == "i" || e.ph == "I") && e.name == "[memory]") {
    memory_event();
    return;
  }
  out_->skip(e.ph == "i" || e.ph == "I" ? "instant_event" : "phase_" + key_part(e.ph));
}

void Handler::gpu_activity(std::string_view cat, std::int64_t start, std::int64_t end) {
  const auto& e = event_;
  const auto device = e.args.device ? e.args.device : e.pid;
  const auto stream = e.args.stream ? e.args.stream : e.tid;
  if (!device || !stream || *device < 0 || *device > 1 << 20) {
    out_->skip("malformed_event");
    return;
  }
  GpuActivity a;
  a.start = start;
  a.end = end;
  a.device = static_cast<std::int32_t>(*device);
  a.stream = *stream;
  a.correlation = e.args.correlation.value_or(0);
  a.op = e.args.op.value_or(-1);
  if (cat == "kernel" || cat == "mtia_ccp_events") {
    a.type = ActivityType::kKernel;
    a.name = out_->intern(e.name);
    if (e.args.grid.size() == 3 && e.args.block.size() == 3) {
      for (std::size_t i = 0; i < 3; ++i) {
        a.launch[i] = static_cast<std::int32_t>(e.args.grid[i]);
        a.launch[3 + i] = static_cast<std::int32_t>(e.args.block[i]);
      }
      a.registers = static_cast<std::int32_t>(e.args.registers.value_or(-1));
      a.shared = static_cast<std::int32_t>(e.args.shared.value_or(-1));
    }
    if (!e.args.collective.empty()) {
      Collective c;
      c.name = std::string(e.args.collective);
      c.in_nelems = e.args.in_nelems.value_or(-1);
      c.out_nelems = e.args.out_nelems.value_or(-1);
      c.group_size = static_cast<std::int32_t>(e.args.group_size.value_or(-1));
      c.dtype = std::string(e.args.dtype);
      c.group_ranks = std::string(e.args.pg_ranks);
      c.process_group = std::string(e.args.pg_name);
      if (!e.args.pg_desc.empty()) {
        if (c.process_group.empty()) c.process_group = std::string(e.args.pg_desc);
        else c.process_group.append(" (").append(e.args.pg_desc).append(")");
      }
      c.in_splits = std::string(e.args.in_splits);
      c.out_splits = std::string(e.args.out_splits);
      c.seq = e.args.seq.value_or(-1);
      a.collective = static_cast<std::int32_t>(out_->collectives.size());
      out_->collectives.push_back(std::move(c));
    }
  } else if (cat.find("memcpy") != std::string::npos) {
    a.type = ActivityType::kMemcpy;
    a.bytes = e.args.bytes.value_or(0);
    parse_memcpy_name(e.name, a);
  } else {
    a.type = ActivityType::kMemset;
    a.bytes = e.args.bytes.value_or(0);
  }
  out_->gpu.push_back(a);
}

void Handler::sync_activity(std::int64_t start, std::int64_t end) {
  const auto& e = event_;
  const std::int32_t kind = e.name == "Event Sync"          ? 1
                            : e.name == "Stream Wait Event" ? 2
                            : e.name == "Stream Sync"       ? 3
                            : e.name == "Context Sync"      ? 4
                                                            : 0;
  const auto device = e.args.device ? e.args.device : e.pid;
  if (kind == 0 || !device || *device < 0 || *device > 1 << 20) {
    out_->skip(kind == 0 ? "cuda_sync" : "malformed_event");
    return;
  }
  SyncActivity a;
  a.start = start;
  a.end = end;
  a.device = static_cast<std::int32_t>(*device);
  a.stream = e.args.stream && *e.args.stream >= 0 ? *e.args.stream : -1;
  a.correlation = e.args.correlation.value_or(0);
  a.kind = kind;
  if (e.args.wait_on_stream && *e.args.wait_on_stream >= 0) a.wait_on_stream = *e.args.wait_on_stream;
  if (e.args.wait_on_record && *e.args.wait_on_record > 0) a.event_record_correlation = *e.args.wait_on_record;
  out_->syncs.push_back(a);
}

// profile_memory=True: "[memory]" instant events, Bytes > 0 an allocation,
// < 0 a free; Device Type 1 is CUDA (0 CPU, whose memory we do not track).
void Handler::memory_event() {
  const auto& a = event_.args;
  if (!a.mem_bytes || a.mem_device_type.value_or(-1) != 1) {
    out_->skip(a.mem_device_type.value_or(-1) == 0 ? "cpu_memory_event" : "malformed_event");
    return;
  }
  MemoryEvent m;
  m.ts = *event_.ts_ns;
  m.bytes = *a.mem_bytes;
  m.address = a.mem_addr.value_or(0);
  m.pid = event_.pid.value_or(0);
  out_->memory.push_back(m);
}

}  // namespace moetrace::importers::kineto
