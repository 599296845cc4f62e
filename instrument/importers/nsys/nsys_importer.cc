// Nsight Systems SQLite export -> moetrace trace.
//
// Facts about the export this relies on (checked on schema 2.9.1 and 3.24.14
// exports, see tests/importers/nsys_importer_test.cc):
// - tables exist only when they hold data (old exports create them all, empty)
//   and columns come and go between versions, so every query is built from the
//   columns the file has (PRAGMA table_info), never from a fixed list;
// - names are ids into StringIds; globalTid packs the pid in bits 24-47 and the
//   tid in bits 0-23 (globalPid: the same without the tid);
// - timestamps are ns since the session start; TARGET_INFO_SESSION_START_TIME
//   gives that start in UTC, which puts several exports on one clock;
// - NVTX_EVENTS holds ranges (eventType 59 push/pop, 60 start/end) next to
//   metadata (75 domain names, 39 thread names, 33 category names) and marks.
#include "nsys_importer.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "../common/trace_builder.h"
#include "nsys_export.h"
#include "nvtx_payload.h"
#include "moetrace/schema/error.h"
#include "moetrace/schema/schema.h"
#include "moetrace/schema/sqlite.h"

namespace moetrace::importers::nsys {
namespace {

// CUDA_MEMOPR_MEMORY_KIND -> moetrace memory kind.
schema::MemoryKind memory_kind(std::int64_t k) {
  switch (k) {
    case 0: return schema::MemoryKind::kPageableHost;
    case 1: return schema::MemoryKind::kPinnedHost;
    case 2: case 5: return schema::MemoryKind::kDevice;       // device, device static
    case 4: case 6: return schema::MemoryKind::kManaged;      // managed, managed static
    default: return schema::MemoryKind::kUnknown;             // array, unknown
  }
}

// ENUM_CUDA_MEMCPY_OPER is CUPTI's CUpti_ActivityMemcpyKind (1..10) plus
// unified-memory migrations (11..13), which keep their direction here.
schema::CopyKind copy_kind(std::int64_t k) {
  if (k >= 0 && k <= 10) return static_cast<schema::CopyKind>(k);
  switch (k) {
    case 11: return schema::CopyKind::kHostToDevice;
    case 12: return schema::CopyKind::kDeviceToHost;
    case 13: return schema::CopyKind::kDeviceToDevice;
    default: return schema::CopyKind::kUnknown;
  }
}

// ENUM_CUPTI_OVERHEAD_TYPE -> overhead.kind.
std::string overhead_kind(std::int64_t t) {
  switch (t) {
    case 2: return "driver_compiler";
    case 3: return "cupti_buffer_flush";
    case 4: return "cupti_instrumentation";
    case 5: return "cupti_resource";
    case 6: return "runtime_module_loading";
    case 7: return "lazy_function_loading";
    case 8: return "command_buffer_full";
    default: return "unknown";
  }
}

// nsys names runtime calls with their ABI version ("cudaMalloc_v3020"); its own
// reports strip the suffix, and so do we, so names match the CUDA API.
std::string_view strip_api_version(std::string_view name) {
  auto pos = name.rfind("_v");
  if (pos == std::string_view::npos || pos + 2 >= name.size()) return name;
  for (std::size_t i = pos + 2; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return name;
  return name.substr(0, pos);
}

std::string demangle(std::string_view name) {
  if (name.substr(0, 2) != "_Z") return std::string(name);
  int status = 0;
  std::string mangled(name);
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : mangled;
}

// Imports one file's events once its ranks are registered.
class FileImporter {
 public:
  FileImporter(ExportFile& f, TraceBuilder& b, std::map<std::int64_t, RankId> ranks,
               std::int64_t clock_offset, double progress_base, double progress_span)
      : f_(f),
        b_(b),
        ranks_(std::move(ranks)),
        offset_(clock_offset),
        progress_base_(progress_base),
        progress_span_(progress_span) {
    for (const char* t : {kKernel, kMemcpy, kMemset, kRuntime, kSync, kOverhead, kNvtx, kMemory})
      total_rows_ += f_.rows(t);
  }

  void run() {
    read_devices();
    read_kernels();
    read_memcpy();
    read_memset();
    read_runtime();
    read_sync();
    read_overhead();
    read_nvtx();
    read_memory();
    apply_stream_priorities();
  }

 private:
  void step() {
    if ((++rows_done_ & 0x3FFF) == 0 && total_rows_ > 0)
      b_.progress("reading " + f_.label(),
                  progress_base_ + progress_span_ * static_cast<double>(rows_done_) /
                                       static_cast<double>(total_rows_));
  }

  // A timestamp of this file on the run's clock (saturating: damaged files
  // may hold any value).
  std::int64_t at(std::int64_t t) const {
    std::int64_t r = 0;
    if (__builtin_add_overflow(t, offset_, &r)) return t > 0 ? INT64_MAX : INT64_MIN;
    return r;
  }

  // The rank of a globalPid/globalTid; files without pids (hand-trimmed
  // exports) have exactly one rank, which takes them all.
  std::optional<RankId> rank_of(bool has_id, std::int64_t global_id) {
    if (has_id) {
      auto it = ranks_.find(pid_of(global_id));
      if (it != ranks_.end()) return it->second;
      return std::nullopt;
    }
    if (ranks_.size() == 1) return ranks_.begin()->second;
    return std::nullopt;
  }

  // The rows of table t (SELECT columns), each on the rank of its process:
  // column id_index, a globalPid or globalTid (id_column). keep(statement)
  // may drop a row first; rows of other processes are skipped; row(statement,
  // rank) reads the others.
  template <class Keep, class Row>
  void each_row(const char* t, const char* id_column, const std::string& columns, int id_index, Keep&& keep,
                Row&& row) {
    const bool has_id = f_.has(t, id_column);
    auto st = f_.db().prepare("SELECT " + columns + " FROM " + t);
    while (st.step()) {
      step();
      if (!keep(st)) continue;
      auto rank = rank_of(has_id, st.int64(id_index));
      if (!rank) {
        b_.skip("unknown_process");
        continue;
      }
      row(st, *rank);
    }
  }
  static bool every(const sqlite::Statement&) { return true; }

  DeviceId device(std::int64_t id) {
    auto it = devices_.find(id);
    if (it != devices_.end()) return it->second;
    instrument::DeviceRecord d;
    d.name = "GPU " + std::to_string(id);
    auto dev = b_.add_device(d, f_.path() + "#gpu" + std::to_string(id));
    devices_.emplace(id, dev);
    return dev;
  }

  StreamId stream(RankId rank, std::int64_t device_id, std::int64_t stream_id) {
    auto s = b_.stream(rank, device(device_id), stream_id);
    pid_streams_[{rank.value, stream_id}].push_back(s);
    return s;
  }

  void read_devices() {
    if (f_.has("TARGET_INFO_GPU", "id")) {
      const char* t = "TARGET_INFO_GPU";
      auto st = f_.db().prepare("SELECT id, " + f_.col(t, "name") + ", " + f_.col(t, "uuid") + ", " +
                                f_.col(t, "computeMajor") + ", " + f_.col(t, "computeMinor") + ", " +
                                f_.col(t, "smCount") + ", " + f_.col(t, "totalMemory") +
                                " FROM TARGET_INFO_GPU");
      while (st.step()) {
        instrument::DeviceRecord d;
        const auto id = st.int64(0);
        d.name = st.is_null(1) ? "GPU " + std::to_string(id) : std::string(st.text(1));
        d.uuid = st.text(2);
        d.compute_major = static_cast<int>(st.int64_or(3, -1));
        d.compute_minor = static_cast<int>(st.int64_or(4, -1));
        d.sm_count = static_cast<int>(st.int64_or(5, -1));
        d.memory_bytes = st.int64_or(6, -1);
        // The same GPU (by UUID) seen from two exports is one device.
        const auto key = d.uuid.empty() ? f_.path() + "#gpu" + std::to_string(id) : "uuid:" + d.uuid;
        devices_.emplace(id, b_.add_device(d, key));
      }
    }
    // TARGET_INFO_CUDA_DEVICE: which GPU each process opened; it names a
    // device where TARGET_INFO_GPU is absent, and each rank's default device.
    const char* t = "TARGET_INFO_CUDA_DEVICE";
    if (f_.has(t, "cudaId") && f_.has(t, "pid")) {
      auto st = f_.db().prepare("SELECT cudaId, pid, " + f_.col(t, "gpuId") + ", " + f_.col(t, "uuid") +
                                ", " + f_.col(t, "numMultiprocessors") + " FROM " + t);
      while (st.step()) {
        const auto gpu = st.is_null(2) ? st.int64(0) : st.int64(2);
        if (!devices_.count(gpu)) {
          instrument::DeviceRecord d;
          d.name = "GPU " + std::to_string(gpu);
          d.uuid = st.text(3);
          d.sm_count = static_cast<int>(st.int64_or(4, -1));
          const auto key = d.uuid.empty() ? f_.path() + "#gpu" + std::to_string(gpu) : "uuid:" + d.uuid;
          devices_.emplace(gpu, b_.add_device(d, key));
        }
        auto r = ranks_.find(st.int64(1));
        if (r != ranks_.end()) b_.set_default_device(r->second, devices_.at(gpu));
      }
    }
  }

  // Rows of a GPU activity table: the columns kernels, copies and memsets
  // share (0-5: start, end, deviceId, streamId, correlationId, globalPid),
  // then `extra` from column 6 on, which fill(statement, record) reads.
  template <class Record, class Fill>
  void read_gpu_activity(const char* t, const std::string& extra, Fill fill) {
    if (!f_.has(t)) return;
    const std::string columns = "start, \"end\", " + f_.col(t, "deviceId") + ", streamId, " +
                                f_.col(t, "correlationId") + ", " + f_.col(t, "globalPid") + ", " + extra;
    each_row(t, "globalPid", columns, 5, every, [&](auto& st, RankId rank) {
      Record r;
      r.rank = rank;
      r.start_ns = at(st.int64(0));
      r.end_ns = at(st.int64(1));
      r.stream = stream(rank, st.int64_or(2, 0), st.int64(3));
      r.correlation_id = st.int64_or(4, 0);
      fill(st, r);
      b_.add(r);
    });
  }

  void read_kernels() {
    const char* t = kKernel;
    if (!f_.has(t)) return;
    const std::string extra =
        f_.col(t, "demangledName") + ", " + f_.col(t, "shortName") + ", " + f_.col(t, "mangledName") +
        ", " + f_.col(t, "gridX") + ", " + f_.col(t, "gridY") + ", " + f_.col(t, "gridZ") + ", " +
        f_.col(t, "blockX") + ", " + f_.col(t, "blockY") + ", " + f_.col(t, "blockZ") + ", " +
        f_.col(t, "staticSharedMemory") + ", " + f_.col(t, "dynamicSharedMemory") + ", " +
        f_.col(t, "registersPerThread");
    std::unordered_map<std::int64_t, StringId> names;  // StringIds id -> interned demangled name
    read_gpu_activity<instrument::KernelRecord>(t, extra, [&](auto& st, instrument::KernelRecord& k) {
      // demangledName, else shortName, else mangledName (demangled here).
      const int name_col = !st.is_null(6) ? 6 : !st.is_null(7) ? 7 : 8;
      const auto name_id = st.int64_or(name_col, -1);
      const auto cache_key = name_id * 4 + (name_col - 6);
      auto it = names.find(cache_key);
      if (it == names.end()) {
        std::string name = demangle(f_.str(name_id));
        if (name.empty()) name = "(unnamed kernel)";
        it = names.emplace(cache_key, b_.kernel_name(name)).first;
      }
      k.name = it->second;
      if (!st.is_null(9) && !st.is_null(12)) {
        for (int i = 0; i < 3; ++i) {
          k.grid[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(st.int64_or(9 + i, 1));
          k.block[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(st.int64_or(12 + i, 1));
        }
        if (!st.is_null(15) || !st.is_null(16))
          k.shared_bytes = static_cast<std::int32_t>(st.int64_or(15, 0) + st.int64_or(16, 0));
        k.registers = static_cast<std::int32_t>(st.int64_or(17, -1));
      }
    });
  }

  void read_memcpy() {
    const char* t = kMemcpy;
    if (!f_.has(t)) return;
    read_gpu_activity<instrument::MemcpyRecord>(
        t, "bytes, copyKind, " + f_.col(t, "srcKind") + ", " + f_.col(t, "dstKind"),
        [&](auto& st, instrument::MemcpyRecord& m) {
          m.bytes = st.int64(6);
          m.copy_kind = copy_kind(st.int64(7));
          m.src_kind = st.is_null(8) ? schema::MemoryKind::kUnknown : memory_kind(st.int64(8));
          m.dst_kind = st.is_null(9) ? schema::MemoryKind::kUnknown : memory_kind(st.int64(9));
        });
  }

  void read_memset() {
    const char* t = kMemset;
    if (!f_.has(t)) return;
    read_gpu_activity<instrument::MemsetRecord>(
        t, "bytes, " + f_.col(t, "value"), [&](auto& st, instrument::MemsetRecord& m) {
          m.bytes = st.int64(6);
          if (st.is_null(7)) m.value.reset(); else m.value = static_cast<std::int32_t>(st.int64(7));
        });
  }

  void read_runtime() {
    if (!f_.has(kRuntime)) return;
    const char* t = kRuntime;
    std::unordered_map<std::int64_t, StringId> names;
    // Exports without eventClass hold runtime calls only. "CUDA backtrace"
    // rows (class 67) repeat a call (same correlation id) to carry its call
    // stack; keeping them would count the call twice.
    auto api_call = [&](auto& st) {
      const auto cls = st.int64_or(2, kClassRuntime);
      if (cls == kClassRuntime || cls == kClassDriver) return true;
      b_.skip(cls == kClassBacktrace ? "runtime_backtrace_duplicate" : "runtime_event_class_" + std::to_string(cls));
      return false;
    };
    const std::string columns = "start, \"end\", " + f_.col(t, "eventClass") + ", " + f_.col(t, "globalTid") + ", " +
                                f_.col(t, "correlationId") + ", nameId, " + f_.col(t, "returnValue");
    each_row(t, "globalTid", columns, 3, api_call, [&](auto& st, RankId rank) {
      instrument::ApiCallRecord a;
      a.rank = rank;
      a.thread_id = tid_of(st.int64(3));
      a.start_ns = at(st.int64(0));
      a.end_ns = at(st.int64(1));
      a.api = st.int64_or(2, kClassRuntime) == kClassDriver ? schema::ApiKind::kDriver : schema::ApiKind::kRuntime;
      const auto name_id = st.int64(5);
      auto it = names.find(name_id);
      if (it == names.end()) it = names.emplace(name_id, b_.intern(strip_api_version(f_.str(name_id)))).first;
      a.name = it->second;
      a.correlation_id = st.int64_or(4, 0);
      a.return_code = static_cast<std::int32_t>(st.int64_or(6, 0));
      b_.add(a);
    });
  }

  void read_sync() {
    if (!f_.has(kSync)) return;
    const char* t = kSync;
    const std::string columns = "start, \"end\", " + f_.col(t, "deviceId") + ", " + f_.col(t, "streamId") + ", " +
                                f_.col(t, "correlationId") + ", " + f_.col(t, "globalPid") + ", " +
                                f_.col(t, "syncType");
    each_row(t, "globalPid", columns, 5, every, [&](auto& st, RankId rank) {
      instrument::SyncRecord s;
      s.rank = rank;
      s.start_ns = at(st.int64(0));
      s.end_ns = at(st.int64(1));
      // Context-wide waits carry stream id 0xFFFFFFFF (or none).
      const auto stream_id = st.int64_or(3, -1);
      if (stream_id >= 0 && stream_id < 0xFFFFFFFFll) s.stream = stream(rank, st.int64_or(2, 0), stream_id);
      s.correlation_id = st.int64_or(4, 0);
      s.kind = static_cast<std::int32_t>(st.int64_or(6, 0));
      b_.add(s);
    });
  }

  void read_overhead() {
    if (!f_.has(kOverhead)) return;
    const char* t = kOverhead;
    const bool has_tid = f_.has(t, "globalTid");
    const std::string columns = "start, \"end\", " + f_.col(t, "globalTid") + ", " + f_.col(t, "overheadType");
    each_row(t, "globalTid", columns, 2, every, [&](auto& st, RankId rank) {
      instrument::OverheadRecord o;
      o.rank = rank;
      o.thread_id = has_tid && !st.is_null(2) ? tid_of(st.int64(2)) : -1;
      o.start_ns = at(st.int64(0));
      o.end_ns = at(st.int64(1));
      o.kind = overhead_kind(st.int64_or(3, 1));
      b_.add(o);
    });
  }

  void read_nvtx() {
    if (!f_.has(kNvtx)) return;
    const char* t = kNvtx;
    const bool has_tid = f_.has(t, "globalTid");
    // Domain names first: eventType 75 rows name (process, domainId).
    std::map<std::pair<std::int64_t, std::int64_t>, StringId> domains;
    if (f_.has(t, "domainId")) {
      auto st = f_.db().prepare("SELECT " + f_.col(t, "globalTid") + ", domainId, " + f_.col(t, "text") +
                                ", " + f_.col(t, "textId") + " FROM NVTX_EVENTS WHERE eventType = 75");
      while (st.step()) {
        auto name = st.is_null(2) ? f_.str(st.int64_or(3, -1)) : st.text(2);
        if (!name.empty()) domains[{pid_of(st.int64_or(0, 0)), st.int64(1)}] = b_.intern(name);
      }
    }
    auto st = f_.db().prepare(
        "SELECT start, \"end\", eventType, " + f_.col(t, "globalTid") + ", " + f_.col(t, "text") + ", " +
        f_.col(t, "textId") + ", " + f_.col(t, "domainId") + ", " + f_.col(t, "category") + ", " +
        f_.col(t, "color") + ", " + f_.col(t, "int64Value") + ", " + f_.col(t, "uint64Value") + ", " +
        f_.col(t, "int32Value") + ", " + f_.col(t, "uint32Value") + ", " + f_.col(t, "doubleValue") +
        ", " + f_.col(t, "floatValue") + ", " + f_.col(t, "jsonText") + ", " + f_.col(t, "jsonTextId") +
        ", " + f_.col(t, "binaryData") + " FROM NVTX_EVENTS");
    std::unordered_map<std::int64_t, StringId> text_ids;
    const PayloadSchemas schemas = read_payload_schemas();
    std::vector<NcclCall> nccl_calls;
    std::map<std::int64_t, std::int32_t> comm_sizes;
    while (st.step()) {
      step();
      const auto type = st.int64(2);
      if (type == kNvtxDomainCreate || type == kNvtxDomainDestroy || type == kNvtxThread ||
          type == kNvtxCategory)
        continue;  // metadata, used above (domains) or by the prescan (thread names)
      if (type != kNvtxPushPop && type != kNvtxStartEnd) {
        b_.skip(type == kNvtxMark ? "nvtx_mark" : "nvtx_event_type_" + std::to_string(type));
        continue;
      }
      auto rank = rank_of(has_tid, st.int64(3));
      if (!rank) {
        b_.skip("nvtx_other_process");
        continue;
      }
      instrument::NvtxRangeRecord r;
      r.rank = *rank;
      r.thread_id = tid_of(st.int64_or(3, 0));
      r.start_ns = at(st.int64(0));
      r.end_ns = st.is_null(1) ? -1 : at(st.int64(1));
      const std::string_view name_text = !st.is_null(4) ? st.text(4) : f_.str(st.int64_or(5, -1));
      if (!st.is_null(4)) {
        r.name = b_.intern(name_text);
      } else {
        const auto id = st.int64_or(5, -1);
        auto it = text_ids.find(id);
        if (it == text_ids.end()) it = text_ids.emplace(id, b_.intern(name_text)).first;
        r.name = it->second;
      }
      const auto domain = st.int64_or(6, 0);
      if (domain != 0) {
        auto it = domains.find({pid_of(st.int64_or(3, 0)), domain});
        r.domain = it != domains.end() ? it->second : b_.intern("domain " + std::to_string(domain));
      }
      r.category = static_cast<std::int32_t>(st.int64_or(7, -1));
      r.color = st.is_null(8) ? -1 : (st.int64(8) & 0xFFFFFFFFll);
      for (int c = 9; c <= 12; ++c)
        if (!st.is_null(c)) {
          r.payload_int = st.int64(c);
          break;
        }
      if (!st.is_null(13)) r.payload_double = st.real(13);
      else if (!st.is_null(14)) r.payload_double = st.real(14);
      if (!st.is_null(15) || !st.is_null(16)) b_.skip("nvtx_json_payload");
      if (!st.is_null(17)) {
        const auto decoded = decode_payload(st.text(17), schemas);
        if (!decoded) {
          b_.skip("nvtx_binary_payload");
        } else {
          nccl_payload(r, name_text, *decoded, nccl_calls, comm_sizes);
        }
      }
      b_.add(r);
    }
    // Group sizes come from the communicator's init range, which an export
    // need not list first.
    for (auto& c : nccl_calls) {
      if (auto it = comm_sizes.find(c.comm); it != comm_sizes.end()) c.record.group_size = it->second;
      b_.add(c.record);
    }
  }

  // NVTX payload schemas (nvtx_payload.h), where the export has them.
  PayloadSchemas read_payload_schemas() {
    PayloadSchemas schemas;
    const char* s = "NVTX_PAYLOAD_SCHEMAS";
    const char* e = "NVTX_PAYLOAD_SCHEMA_ENTRIES";
    if (!f_.has(s, "schemaId") || !f_.has(s, "payloadSize") || !f_.has(e, "schemaId") || !f_.has(e, "name") ||
        !f_.has(e, "type"))
      return schemas;
    auto st = f_.db().prepare(std::string("SELECT DISTINCT schemaId, payloadSize FROM ") + s);
    while (st.step())
      if (!st.is_null(0)) schemas.emplace(st.int64(0), PayloadSchema{st.int64_or(1, 0), {}});
    auto en = f_.db().prepare("SELECT DISTINCT schemaId, " + f_.col(e, "idx") + ", \"type\", name, " +
                              f_.col(e, "offset") + " FROM " + e + " ORDER BY schemaId, 2");
    while (en.step()) {
      auto it = schemas.find(en.int64_or(0, -1));
      if (it == schemas.end()) continue;
      it->second.fields.push_back({std::string(en.text(3)), static_cast<int>(en.int64_or(2, 0)), en.int64_or(4, 0)});
    }
    return schemas;
  }

  struct NcclCall {
    instrument::CollectiveRecord record;
    std::int64_t comm = 0;
  };

  // NCCL's payload fields: a range with a message size is a collective or
  // point-to-point call (a row of `collectives`, host times, the size as
  // bytes: dtype uint8); one with "No. of ranks" initialises a communicator.
  void nccl_payload(instrument::NvtxRangeRecord& r, std::string_view name, const DecodedPayload& p,
                    std::vector<NcclCall>& calls,
                    std::map<std::int64_t, std::int32_t>& comm_sizes) {
    const auto& v = p.integers;
    auto field = [&](const char* key) -> std::optional<std::int64_t> {
      auto it = v.find(key);
      return it == v.end() ? std::nullopt : std::optional(it->second);
    };
    const auto comm = field("NCCL communicator ID");
    if (const auto n = field("No. of ranks"); n && comm) comm_sizes[*comm] = static_cast<std::int32_t>(*n);
    const auto bytes = field("Message size [bytes]");
    if (!bytes) return;
    r.payload_int = *bytes;
    NcclCall c;
    c.comm = comm.value_or(0);
    auto& k = c.record;
    k.rank = r.rank;
    k.start_ns = r.start_ns;
    k.end_ns = r.end_ns < r.start_ns ? r.start_ns : r.end_ns;
    k.name = std::string(name);
    k.in_nelems = k.out_nelems = *bytes;
    k.dtype = "uint8";
    if (comm) {
      char hex[32];
      std::snprintf(hex, sizeof hex, "%#llx", static_cast<unsigned long long>(*comm));
      k.process_group = std::string("NCCL communicator ") + hex;
    }
    if (const auto peer = field("Peer rank")) k.group_ranks = "peer " + std::to_string(*peer);
    calls.push_back(std::move(c));
  }

  void read_memory() {
    if (!f_.has(kMemory)) return;
    const char* t = kMemory;
    const std::string columns = "start, " + f_.col(t, "globalPid") + ", address, bytes, " + f_.col(t, "memKind") +
                                ", memoryOperationType, " + f_.col(t, "correlationId");
    each_row(t, "globalPid", columns, 1, every, [&](auto& st, RankId rank) {
      // memoryOperationType: 0 allocation, 1 free; anything else is not an
      // allocation event we can place on the memory timeline.
      const auto op = st.int64(5);
      if (op != 0 && op != 1) {
        b_.skip("memory_operation_" + std::to_string(op));
        return;
      }
      instrument::MemoryEventRecord m;
      m.rank = rank;
      m.ts_ns = at(st.int64(0));
      m.alloc = op == 0;
      m.address = static_cast<std::uint64_t>(st.int64(2));
      m.bytes = st.int64(3);
      m.memory_kind = st.is_null(4) ? schema::MemoryKind::kUnknown : memory_kind(st.int64(4));
      m.correlation_id = st.int64_or(6, 0);
      b_.add(m);
    });
  }

  // TARGET_INFO_CUDA_STREAM: the priority each process gave its streams.
  void apply_stream_priorities() {
    const char* t = "TARGET_INFO_CUDA_STREAM";
    if (!f_.has(t, "streamId") || !f_.has(t, "processId") || !f_.has(t, "priority")) return;
    auto st = f_.db().prepare("SELECT processId, streamId, priority FROM TARGET_INFO_CUDA_STREAM");
    while (st.step()) {
      auto r = ranks_.find(st.int64(0));
      if (r == ranks_.end()) continue;
      auto it = pid_streams_.find({r->second.value, st.int64(1)});
      if (it == pid_streams_.end()) continue;
      // Stored as an unsigned 32-bit value (4294967291 is priority -5).
      const auto priority = static_cast<std::int32_t>(static_cast<std::uint32_t>(st.int64(2)));
      for (auto s : it->second) b_.set_stream_priority(s, priority);
    }
  }

  ExportFile& f_;
  TraceBuilder& b_;
  std::map<std::int64_t, RankId> ranks_;  // pid -> rank
  std::int64_t offset_;
  double progress_base_, progress_span_;
  std::int64_t total_rows_ = 0, rows_done_ = 0;
  std::map<std::int64_t, DeviceId> devices_;  // this file's GPU id -> device
  std::map<std::pair<std::int32_t, std::int64_t>, std::vector<StreamId>> pid_streams_;
};

}  // namespace

void import_files(const std::vector<std::string>& paths, TraceBuilder& builder) {
  std::vector<std::unique_ptr<ExportFile>> files;
  std::vector<ProcessInfo> processes;
  for (std::size_t i = 0; i < paths.size(); ++i) {
    builder.progress("scanning " + file_name(paths[i]), 0.0);
    auto f = std::make_unique<ExportFile>(paths[i]);
    // Ranks are the processes that used CUDA; a trace of NVTX only makes
    // its NVTX processes the ranks.
    auto pids = cuda_pids(*f);
    if (pids.empty()) pids = nvtx_pids(*f);
    // Hand-trimmed exports may lack pids altogether: the file is one process.
    if (pids.empty() && (f->has(kKernel) || f->has(kRuntime) || f->has(kMemcpy) || f->has(kNvtx)))
      pids.insert(0);
    const auto names = process_names(*f);
    const auto mpi = mpi_rank_names(*f);
    for (auto pid : pids) {
      ProcessInfo p;
      p.file = i;
      p.pid = pid;
      if (auto it = names.find(pid); it != names.end()) p.name = it->second;
      if (auto it = mpi.find(pid); it != mpi.end()) p.mpi_rank = it->second;
      processes.push_back(p);
    }
    files.push_back(std::move(f));
  }

  // Rank numbers: the MPI ranks the threads are named after, when every
  // process has one and no two share it; otherwise the order of the files on
  // the command line, then of pids within a file.
  bool use_mpi = !processes.empty();
  std::set<int> seen;
  for (const auto& p : processes)
    if (!p.mpi_rank || !seen.insert(*p.mpi_rank).second) use_mpi = false;
  builder.config("import.nsys.rank_source", use_mpi ? "MPI rank thread names" : "file order");

  // One clock: each export counts from its own session start, whose UTC time
  // TARGET_INFO_SESSION_START_TIME gives; shift every file onto the earliest.
  std::vector<std::int64_t> offsets(files.size(), 0);
  if (files.size() > 1) {
    std::int64_t earliest = INT64_MAX;
    for (const auto& f : files) {
      if (!f->session_start_utc_ns())
        throw Error(f->path() + ": no TARGET_INFO_SESSION_START_TIME, so it cannot be put on one "
                                "clock with the other exports; import it alone");
      earliest = std::min(earliest, *f->session_start_utc_ns());
    }
    for (std::size_t i = 0; i < files.size(); ++i) offsets[i] = *files[i]->session_start_utc_ns() - earliest;
  }

  std::vector<std::map<std::int64_t, RankId>> file_ranks(files.size());
  int next = 0;
  for (const auto& p : processes) {
    const int number = use_mpi ? *p.mpi_rank : next++;
    auto& f = *files[p.file];
    std::string label = f.label() + " pid " + std::to_string(p.pid);
    if (!p.name.empty()) label += " (" + p.name + ")";
    file_ranks[p.file][p.pid] = builder.add_rank(number, p.pid, f.host(), label);
  }

  for (std::size_t i = 0; i < files.size(); ++i) {
    auto& f = *files[i];
    const auto idx = std::to_string(i);
    builder.config("import.nsys.schema_version." + idx, f.schema_version().empty() ? "unknown" : f.schema_version());
    if (!f.product_version().empty()) builder.config("import.nsys.product_version." + idx, f.product_version());
    if (f.session_start_utc_ns())
      builder.config("import.nsys.session_start_utc_ns." + idx, std::to_string(*f.session_start_utc_ns()));
    builder.config("import.nsys.clock_offset_ns." + idx, std::to_string(offsets[i]));
    const double span = 1.0 / static_cast<double>(files.size());
    FileImporter(f, builder, file_ranks[i], offsets[i], span * static_cast<double>(i), span).run();
  }
}

}  // namespace moetrace::importers::nsys
