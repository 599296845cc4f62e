// CUPTI activity records -> trace records. A pure, single-threaded state
// machine (the collector serialises calls): it needs the CUPTI headers for
// the record structs, never the driver, so the unit tests feed it synthetic
// CUpti_ActivityKernel10 etc. built by hand.
//
// What it does beyond copying fields:
//  - streams: CUPTI stream ids are per context; (context, stream) pairs the
//    executor registered map to the plan's StreamIds (and so to ranks: in
//    the emulated mode all ranks share one device and the stream tells the
//    rank); others get fresh ids from kFirstAutoStream with role "other"
//    and the rank of their device.
//  - ops: the executor pushes the op id as a CUPTI external correlation id
//    around everything it issues for an op; EXTERNAL_CORRELATION records map
//    correlation ids to op ids, so every kernel, memcpy and memset gets its
//    op, and an op range's device start/end are the first start and the last
//    end of its activities. The NVTX range of the op (domain "moetrace",
//    op_message.h) supplies the op's coordinates and its host launch range.
//    Records may arrive in any order across CUPTI buffers, so activities whose
//    correlation is not known yet wait in a pending list; op ranges are
//    written by finish(), when every buffer has been delivered.
//  - graphs: a kernel, memcpy or memset that a CUDA graph launched carries
//    the correlation id of the graph launch, not of the call that issued it
//    while the graph was captured, and the id of its graph node
//    (graphNodeId). The collector announces each node created while an op's
//    scope was open (note_graph_node) and each node an instantiation cloned
//    from one (note_graph_node_clone): the node's op is the activity's op.
//  - memory: MEMORY2 allocations at an address the executor announced
//    (note_allocation) get that plan buffer's id.
#pragma once

#include <cupti_activity.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "moetrace/cupti/op_message.h"
#include "moetrace/cupti/record_sink.h"

namespace moetrace::cupti {

struct ConverterOptions {
  RankId default_rank{0};  // API calls, NVTX ranges and unmapped devices
  // Name of a runtime or driver API callback id (cuptiGetCallbackName in a
  // real run; the tests pass a fake).
  std::function<std::string(schema::ApiKind, std::uint32_t)> api_name;
};

struct ConverterStats {
  std::int64_t kernels = 0, memcpys = 0, memsets = 0, memory_events = 0, api_calls = 0,
               syncs = 0, overheads = 0, nvtx_ranges = 0, op_ranges = 0, correlations = 0;
  std::int64_t unknown_kinds = 0;           // records of kinds we do not convert
  std::int64_t activities_without_op = 0;   // device activities outside any op scope
  std::int64_t graph_activities = 0;        // device activities a CUDA graph launched
  std::int64_t kernel_names = 0;            // distinct kernel names demangled (once each)
};

class ActivityConverter {
 public:
  static constexpr std::int32_t kFirstAutoStream = 1000;

  ActivityConverter(RecordSink& sink, ConverterOptions options);

  void map_stream(std::uint32_t context, std::uint32_t stream, const instrument::StreamRecord& record);
  void map_device(std::uint32_t device, RankId rank);
  void note_allocation(std::uint64_t address, BufferId buffer);
  // An op the executor issued, with its host launch range: the fallback where
  // NVTX ranges are not delivered (no NVTX injection); an NVTX range of the
  // same op wins.
  void note_op(const OpLabel& label, std::int64_t launch_start, std::int64_t launch_end);
  // The work of `op` waits for the work of `waits_for` (cross-stream waits
  // the executor issued): where an op ran nothing on the device, it is placed
  // after them.
  void note_waits(OpId op, const std::vector<OpId>& waits_for);

  // Graph node `node` (cuptiGetGraphNodeId) was created while `op` issued
  // its work (stream capture); `clone` is a copy of node `original` (graph
  // instantiation), with the original's op where it has one.
  void note_graph_node(std::uint64_t node, OpId op);
  void note_graph_node_clone(std::uint64_t clone, std::uint64_t original);

  void convert(const CUpti_Activity* record);
  // Writes what waits for later records: pending activities (with whatever
  // op they resolved to), op ranges, NVTX ranges never closed. Idempotent.
  void finish();

  const ConverterStats& stats() const { return stats_; }

 private:
  // Hands `r` to the sink and counts it in `count` (a field of stats_).
  template <class Record, class Count>
  void add_counted(const Record& r, Count& count) {
    sink_.add(r);
    ++count;
  }
  struct StreamInfo {
    StreamId id;
    RankId rank;
  };
  struct OpTimes {
    std::int64_t start = INT64_MAX, end = INT64_MIN;
  };
  struct OpenMarker {
    std::int64_t start = 0;
    std::string name, domain;
    std::int64_t thread = 0;
    std::int32_t category = -1;
    std::int64_t color = -1;
    std::optional<std::int64_t> payload_int;
    std::optional<double> payload_double;
    bool have_start = false;
  };
  struct SeenOp {
    OpLabel label;
    std::int64_t launch_start = -1, launch_end = -1;
    bool from_nvtx = false;
  };
  // A device activity waiting for the correlation record of its op.
  struct Pending {
    std::uint32_t correlation = 0, runtime_correlation = 0;
    std::uint64_t graph_node = 0;  // 0: not launched by a graph
    int kind = 0;  // 0 kernel, 1 memcpy, 2 memset
    instrument::KernelRecord kernel{};
    instrument::MemcpyRecord memcpy{};
    instrument::MemsetRecord memset{};
  };

  StreamInfo stream_of(std::uint32_t device, std::uint32_t context, std::uint32_t stream);
  RankId rank_of_device(std::uint32_t device) const;
  OpId op_of(std::uint32_t correlation) const;
  // The op of a pending activity: its graph node's, else its correlations'.
  OpId op_of(const Pending& p) const;
  void note_op_time(OpId op, std::int64_t start, std::int64_t end);
  void emit(Pending& p, OpId op);
  void emit_or_hold(Pending p);
  void convert_marker(const CUpti_ActivityMarker2& m);
  void convert_marker_data(const CUpti_ActivityMarkerData2& d);
  void close_marker(std::uint32_t id, std::int64_t end);
  // The range of a marker that ends at `end` (-1: never closed), on the
  // default rank.
  instrument::NvtxRangeRecord nvtx_range(const OpenMarker& o, std::int64_t end);
  void resolve_pending(std::uint32_t correlation);
  StringId kernel_name(const char* mangled);
  // The other kinds of record, one each (convert() dispatches on the kind).
  void convert_memory(const CUpti_ActivityMemory4& m);
  void convert_api(const CUpti_ActivityAPI& a);
  void convert_sync(const CUpti_ActivitySynchronization2& s);
  void convert_overhead(const CUpti_ActivityOverhead3& o);

  RecordSink& sink_;
  ConverterOptions options_;
  ConverterStats stats_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, StreamInfo> streams_;
  std::unordered_map<std::uint32_t, RankId> devices_;
  std::int32_t next_auto_stream_ = kFirstAutoStream;
  std::unordered_map<std::uint32_t, OpId> correlation_op_;
  std::unordered_map<std::uint64_t, OpId> graph_node_op_;  // graph node id -> op (clones included)
  // Where each op that ran nothing on the device is placed (by op id).
  std::unordered_map<std::int64_t, std::int64_t> empty_op_points() const;

  std::unordered_map<std::int64_t, OpTimes> op_times_;
  std::unordered_map<std::int64_t, std::vector<std::int64_t>> waits_;  // op -> ops it waits for
  std::map<std::int64_t, SeenOp> ops_;
  std::unordered_map<std::uint32_t, OpenMarker> markers_;
  std::unordered_multimap<std::uint32_t, std::size_t> pending_by_corr_;
  std::vector<Pending> pending_;
  std::vector<char> pending_done_;
  std::unordered_map<std::uint64_t, std::vector<BufferId>> announced_;  // address -> FIFO
  std::unordered_map<std::uint64_t, BufferId> live_;
  std::unordered_map<std::uint64_t, StringId> api_names_;  // (kind << 32 | cbid) -> name
  // Mangled kernel name -> its demangled, interned name: a run launches a few
  // hundred distinct kernels millions of times, and __cxa_demangle costs
  // microseconds per call.
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, StringId, NameHash, std::equal_to<>> kernel_names_;
  bool finished_ = false;
};

// Shared helpers, exposed for the tests.
schema::MemoryKind memory_kind_from_cupti(std::uint32_t kind);
std::string overhead_kind_name(CUpti_ActivityOverheadKind kind);
std::string demangle(const char* name);

}  // namespace moetrace::cupti
