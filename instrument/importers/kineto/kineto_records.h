// The compact records of one parsed Kineto file (kineto_parse.cc reads the
// JSON into them; kineto_importer.cc writes them).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bytes.h"
#include "moetrace/schema/op_kind.h"

namespace moetrace::importers {

class TraceBuilder;

namespace kineto {

enum class ActivityType : std::uint8_t { kKernel, kMemcpy, kMemset };

// Compact records of one parsed file (or of one batch of its events).
struct GpuActivity {
  std::int64_t start = 0, end = 0, correlation = 0, bytes = 0, stream = 0;
  std::int32_t name = -1, device = 0;
  std::int32_t collective = -1;  // index into ParsedFile::collectives
  std::array<std::int32_t, 6> launch{-1, -1, -1, -1, -1, -1};
  std::int32_t registers = -1, shared = -1;
  ActivityType type = ActivityType::kKernel;
  std::uint8_t copy_kind = 0, src_kind = 0, dst_kind = 0;
  std::int64_t op = -1;  // moetrace's own export: the op range it belongs to
};

// An op range of moetrace's own Chrome export (cat "op"): read back as the
// op range it was.
struct OpSlice {
  std::int64_t start = 0, end = 0, pid = 0, tid = 0, id = 0;
  std::int32_t name = -1;
  OpKind kind = OpKind::kOtherOp;
  Phase phase = Phase::kForward;
  std::int32_t layer = -1, iteration = -1, micro_batch = -1, chunk = -1;
  double flops = -1;
  std::int64_t bytes = -1, peer = -1;
};

struct CpuRange {
  std::int64_t start = 0, end = 0, tid = 0, pid = 0;
  std::int32_t name = -1;
  std::int32_t category = 0;
  std::int32_t domain = -1;  // moetrace's own Chrome export: the NVTX domain; -1: "pytorch", -2: none
  std::optional<std::int64_t> payload;
  std::optional<std::int64_t> sequence;  // "Sequence number" (autograd)
  bool backward = false;                 // "Fwd thread id" > 0: a backward node
  std::string input_dims, input_types;   // record_shapes: "Input Dims", "Input type" as JSON text
  std::string comm_dims, comm_types;     // the same of an "nccl:*" range (not written as input shapes)
};

struct ApiCall {
  std::int64_t start = 0, end = 0, pid = 0, tid = 0, correlation = 0;
  std::int32_t name = -1;
  bool driver = false;
};

struct MemoryEvent {
  std::int64_t ts = 0, bytes = 0, address = 0, pid = 0;
};

// A GPU-side synchronisation record (cat "cuda_sync"): kind as CUPTI's
// CUpti_ActivitySynchronizationType (1 "Event Sync", 2 "Stream Wait Event",
// 3 "Stream Sync", 4 "Context Sync"); stream -1 where the record names none.
// An event wait names the stream that recorded the event (wait_on_stream)
// and the correlation id of its cudaEventRecord call; -1 where it does not.
struct SyncActivity {
  std::int64_t start = 0, end = 0, correlation = 0, stream = -1;
  std::int64_t wait_on_stream = -1, event_record_correlation = -1;
  std::int32_t device = 0, kind = 0;
};

struct Collective {
  std::string name, dtype, group_ranks, process_group, in_splits, out_splits;
  std::int64_t in_nelems = -1, out_nelems = -1;
  std::int32_t group_size = -1;
  std::int64_t seq = -1;  // "Seq": the call's sequence number in its process group
};

struct Flow {
  std::int64_t pid = 0, tid = 0, ts = 0, id = 0;
};

struct DeviceProps {
  std::int64_t id = 0;
  std::string name;
  std::int64_t memory = -1;
  int major = -1, minor = -1, sms = -1;
};

// nvtx_ranges.category of imported host ranges (NVTX categories are the
// user's numbers; these are ours, documented in schemas/README.md).
constexpr std::int32_t kCategoryCpuOp = 1;
constexpr std::int32_t kCategoryUserAnnotation = 2;
constexpr std::int32_t kCategoryPythonFunction = 3;

struct ParsedFile {
  std::vector<std::string> strings;
  // Looked up by string_view (heterogeneous lookup): a name is copied once,
  // when first seen, not for every event that carries it.
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::int32_t, NameHash, std::equal_to<>> string_index;
  std::vector<GpuActivity> gpu;
  std::vector<CpuRange> ranges;
  std::vector<ApiCall> api;
  std::vector<MemoryEvent> memory;
  std::vector<SyncActivity> syncs;
  std::vector<Collective> collectives;
  std::vector<OpSlice> ops;
  std::vector<Flow> flows;
  std::vector<DeviceProps> devices;
  std::optional<std::int64_t> rank, world_size;
  std::string backend, nccl_version;
  std::int64_t base_time_ns = 0;
  bool base_time_seen = false;  // baseTimeNanoseconds read (so far)
  std::map<std::string, std::int64_t> skipped;
  bool root_seen = false, has_trace_events = false;
  bool moetrace_export = false;  // written by `moetrace export chrome`: one process per rank

  std::int32_t intern(std::string_view s) {
    auto it = string_index.find(s);
    if (it != string_index.end()) return it->second;
    const auto id = static_cast<std::int32_t>(strings.size());
    strings.emplace_back(s);
    string_index.emplace(std::string(s), id);
    return id;
  }
  void skip(const std::string& reason) { ++skipped[reason]; }
};

// What the last bytes of an uncompressed file say of the top-level members
// Kineto writes after `traceEvents`: `baseTimeNanoseconds`
// and the rank of a `distributedInfo` there (unset where absent). A guess: a key of that name may
// sit in an event's args instead, so whoever relies on it checks it against
// the parse (BatchSink::finish).
struct Tail {
  std::optional<std::int64_t> base_time_ns;
  std::optional<std::int64_t> rank;
};
// A gzip file is inflated to its end for it (not kept); nullopt where the
// file cannot be read or inflated (its parse says why).
std::optional<Tail> read_tail(const std::string& path);
// The same from a file's whole text (inflate_small), its last 1 MiB read as
// read_tail reads it.
Tail tail_of(std::string_view text);

// Takes the records of each batch of events as it is parsed, in input
// order (kineto_importer.cc writes them at once, so the trace is written
// while the file is parsed): called on one thread at a time, with the file's
// members before traceEvents (and those of the batch) already in `file`, and
// the batch's string ids renumbered into the file's. What it leaves in `batch`
// is kept in the parsed file.
class BatchSink {
 public:
  virtual ~BatchSink() = default;
  virtual void take(ParsedFile& file, ParsedFile& batch) = 0;
};

// Parses a whole file (plain or gzip JSON) into records, the events on
// `threads` threads (0: the machine's cores, at most 4); throws
// moetrace::Error naming the file for invalid JSON or not a Chrome trace.
// With a sink, each batch of events goes through it first. With `text`, the
// file's bytes are those (inflate_small), not read again.
// The most events a Kineto JSON text of `bytes` can hold: the shortest event
// a profiler writes, {"ph":"X","cat":"kernel","name":"","pid":0,"tid":0,
// "ts":0,"dur":0}, is 66 bytes, so fewer than one in 64 bytes. A bound for
// reserving room, not an estimate.
inline std::size_t most_events(std::size_t bytes) { return bytes / 64; }

ParsedFile parse(const std::string& path, TraceBuilder& builder, int threads = 0, BatchSink* sink = nullptr,
                 std::optional<Bytes> text = std::nullopt);

}  // namespace kineto
}  // namespace moetrace::importers
