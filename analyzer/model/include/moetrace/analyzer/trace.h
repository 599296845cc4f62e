// The in-memory trace model: one run loaded from a moetrace trace database
// into per-track sorted arrays. The analyses, the reports and the GUI all read
// this model; none of them touches SQLite.
#pragma once

#include <cstdint>
#include <optional>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moetrace/schema/ids.h"
#include "moetrace/schema/op_kind.h"
#include "moetrace/schema/schema.h"

namespace moetrace::analyzer {

struct RunFiles;  // run_loader.h

struct RunInfo {
  std::string path;
  std::string name, backend, variant, host, moetrace_version, config_json;
  bool simulated = false;
  bool finalized = false;  // false: the writer never closed (killed run); no indexes
  int world_size = 1;
  std::int64_t created_unix_s = 0;
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t dropped_records = 0;
  int schema_version = 0;
  std::vector<std::pair<std::string, std::string>> config;  // run_config
  // The loader's check against the writer's integrity record (schemas/README.md,
  // "Integrity record"): "verified" (every table read matched it),
  // "not recorded" (traces of older writers and of runs killed before close:
  // checked by references and value ranges only), or "imported in memory" (a
  // trace of another tool read by its importer, no file in between). A run of
  // several files: their common state, or "mixed" where they differ.
  std::string integrity;
  // One line per table whose references were damaged: the table and what the
  // loader left out of it. Reports show each as a warning. A run of several
  // files: empty; each file's lines are in its FileState.
  std::vector<std::string> damage;
  // A run of several files: each file whose own state a report warns of
  // (no integrity record, damage, dropped records, events of devices not
  // read), so that every warning names its file. Empty for one file.
  struct FileState {
    std::string path;
    std::string integrity;
    std::vector<std::string> damage;
    std::int64_t dropped_records = 0;
    std::vector<std::pair<std::string, std::string>> skipped;  // its config's import.skipped.* rows
  };
  std::vector<FileState> file_states;
};

struct Device {
  DeviceId id;
  std::string name, uuid;
  int compute_major = -1, compute_minor = -1, sm_count = -1;
  std::int64_t memory_bytes = -1;
  bool simulated = false;
};

struct Rank {
  RankId rank;
  DeviceId device;
  int local_rank = -1;
  std::string host;
  std::int64_t pid = -1;
};

struct Stream {
  StreamId id;
  RankId rank;
  DeviceId device;
  std::int64_t native_id = -1;
  std::string role;  // "compute", "comm", "copy", "other"
  std::string name;
};

struct Layer {
  int layer = 0;
  std::string kind;
  int num_experts = -1, top_k = -1;
  std::int64_t model_dim = -1, hidden_dim = -1, tokens = -1;
};

enum class ActivityType : std::uint8_t { kKernel, kMemcpy, kMemset };

// A kernel, memcpy or memset on a device stream.
struct Activity {
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t correlation_id = 0;  // 0: none
  std::int64_t bytes = 0;           // memcpy/memset
  StringId name;                    // kernels
  std::int32_t op = -1;             // index into Trace::ops of the op that launched it; -1: none
  std::int32_t stream = -1;         // index into Trace::streams
  RankId rank;
  std::int32_t launch = -1;         // index into Trace::launch_configs; -1: unknown
  // Index into Trace::api_calls of its launching call (Trace::launching_call);
  // -1: not looked up yet, -2: none.
  std::int32_t launched_by = -1;
  ActivityType type = ActivityType::kKernel;
  std::uint8_t copy_kind = 0;       // schema::CopyKind
  std::uint8_t src_kind = 0, dst_kind = 0;  // schema::MemoryKind of a memcpy's source and destination
  std::int64_t duration() const { return end_ns - start_ns; }
};

struct LaunchConfig {
  std::int32_t grid[3] = {-1, -1, -1};
  std::int32_t block[3] = {-1, -1, -1};
  std::int32_t shared_bytes = -1, registers = -1;
};

// An op of the plan as executed, with its MoE coordinates.
struct OpRange {
  OpId id;
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t launch_start_ns = -1, launch_end_ns = -1;
  double flops = -1;
  std::int64_t bytes = -1;
  std::int64_t recv_bytes = -1;  // all-to-all: bytes received from the other ranks; -1: unknown
  std::int32_t stream = -1;  // index into Trace::streams
  RankId rank;
  RankId peer;
  std::int32_t layer = -1, iteration = -1, micro_batch = -1, chunk = -1;
  StringId name;
  OpKind kind = OpKind::kOtherOp;
  Phase phase = Phase::kForward;
  std::int64_t nvtx_id = -1;
  std::int64_t duration() const { return end_ns - start_ns; }
};

struct ApiCall {
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t correlation_id = 0;
  std::int64_t thread_id = 0;
  RankId rank;
  StringId name;
  schema::ApiKind api = schema::ApiKind::kRuntime;
  std::int32_t return_code = 0;
};

struct NvtxRange {
  std::int64_t id = 0;
  std::int64_t start_ns = 0, end_ns = -1;
  std::int64_t thread_id = 0;
  RankId rank;
  StringId domain, name;
  // NVTX's category; in a PyTorch-profiler import (domain "pytorch") 1 cpu_op,
  // 2 user_annotation, 3 python_function (schemas/README.md); -1: none.
  std::int32_t category = -1;
  std::int64_t payload_int = 0;
  bool has_payload_int = false;
  // PyTorch's autograd sequence number (-1: none): a forward op and the
  // backward node of its gradient share it (table autograd_ranges).
  std::int64_t autograd_seq = -1;
  bool autograd_backward = false;
  std::int32_t input_shape = -1;  // index into Trace::input_shapes; -1: none recorded
};

// A framework op's input shapes and types as the profiler recorded them
// (table input_shapes): JSON text, "[[8192,4096],[14336,4096]]".
struct InputShape {
  std::string dims, types;
};

// A GPU-side synchronisation record (table sync_events: CUPTI's
// synchronization activity, Kineto's "cuda_sync" events), linked to the
// runtime call that waited by (rank, correlation id).
struct SyncEvent {
  enum Kind : std::int32_t {  // CUpti_ActivitySynchronizationType
    kEventSynchronize = 1,    // Kineto "Event Sync"
    kStreamWaitEvent = 2,     // "Stream Wait Event"
    kStreamSynchronize = 3,   // "Stream Sync"
    kContextSynchronize = 4,  // "Context Sync"
  };
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t correlation_id = 0;
  StreamId stream;           // invalid (-1): none (event and context synchronisation)
  RankId rank;
  std::int32_t kind = 0;
  // An event wait, where the profiler recorded it (Kineto's wait_on_stream
  // and wait_on_cuda_event_record_corr_id): the stream that recorded the
  // event and the correlation id of that cudaEventRecord call (0: unknown).
  StreamId wait_stream;
  std::int64_t event_record_correlation_id = 0;
};

struct MemoryEvent {
  std::int64_t ts_ns = 0;
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  BufferId buffer;
  RankId rank;
  bool alloc = true;
  schema::MemoryKind memory_kind = schema::MemoryKind::kDevice;
};

struct Buffer {
  BufferId id;
  RankId rank;
  std::string tag;
  std::int64_t bytes = 0;
  schema::MemoryKind memory_kind = schema::MemoryKind::kDevice;
  std::int32_t layer = -1, chunk = -1;
  std::int64_t alloc_ns = -1, free_ns = -1;
};

struct OpBuffer {
  OpId op;
  BufferId buffer;
  schema::Access access = schema::Access::kRead;
};

struct OpDep {
  OpId op, dep;
};

struct ExpertLoad {
  std::int32_t iteration = 0, layer = 0, src_rank = 0, expert = 0;
  std::int64_t tokens = 0;
};

struct ExpertPlacement {
  std::int32_t iteration = 0, layer = 0, expert = 0, rank = 0;
  std::string role;
};

// A collective as the source tool described it (the collectives table:
// Kineto's NCCL kernel args), linked to its kernel by (rank, correlation id).
struct Collective {
  RankId rank;
  std::int64_t start_ns = 0, end_ns = 0;  // host times where the tool recorded the call (nsys), else the kernel's
  std::int64_t correlation_id = 0;  // 0: none (nsys: the NCCL call's NVTX range, matched by host time)
  std::string name;                 // "all_to_all", "allreduce", ... as recorded
  std::int64_t in_nelems = -1, out_nelems = -1;
  std::int32_t group_size = -1;
  std::string dtype;
  std::vector<std::int64_t> in_splits, out_splits;  // all-to-all(v): elements per peer
  std::string group_ranks;    // as recorded: "[0, 4]" (Kineto), "peer 3" (NCCL's NVTX payload)
  std::string process_group;  // name and description: "12 (PIPELINE_MODEL_PARALLEL_GROUP)"
  // The collective's sequence number in its process group (Kineto's "Seq"):
  // the same on every member for one call; -1 where the trace lacks it.
  std::int64_t seq = -1;

  // The ranks of the group: those group_ranks lists ("peer N": this rank and
  // its peer), else group_size; -1 where the trace records neither.
  int recorded_ranks() const {
    if (group_ranks.starts_with("peer")) return 2;
    int n = 0;
    bool digit = false;
    for (char ch : group_ranks) {
      const bool d = ch >= '0' && ch <= '9';
      if (d && !digit) ++n;
      digit = d;
    }
    return n > 0 ? n : group_size > 0 ? group_size : -1;
  }
};

// What the NVTX-to-GPU projection (projection.h) did to a trace's activities.
struct ProjectionStats {
  bool ran = false;                      // false: the trace was loaded without it
  std::int64_t activities = 0;           // kernels, memcpy and memset rows
  std::int64_t attributed_in_trace = 0;  // carried an op_id already (kept)
  std::int64_t projected = 0;            // attributed here through their correlation id
  std::int64_t no_correlation = 0;       // unattributed, no correlation id
  std::int64_t no_api_call = 0;          // unattributed, no API call with that id on the rank
  std::int64_t outside_ranges = 0;       // unattributed, API call outside every op range
  std::int64_t ops_retimed = 0;          // GPU-run op ranges given their GPU start/end
  std::int64_t unattributed() const { return no_correlation + no_api_call + outside_ranges; }
};

// What MoE recognition (moe_recognition.h) found and derived, for the
// report's "derived from" lines.
struct RecognitionStats {
  bool ran = false;                    // false: the trace has op ranges of its own
  bool moe = false;                    // MoE evidence found: op ranges were materialised
  std::int64_t ranges_matched = 0;     // host ranges that became contexts
  std::int64_t annotations = 0;        // of them, by the annotation convention
  std::int64_t annotations_malformed = 0;
  std::string first_malformed;         // name and reason of the first malformed one
  std::int64_t activities_placed = 0;  // activities that became op ranges
  std::int64_t activities_total = 0;
  std::int64_t kernels_by_name = 0;    // of the placed, kind from a kernel rule
  std::int64_t layers_by_order = 0;    // ops whose layer was inferred by order
  std::int64_t layers_by_nesting = 0;  // schedule parts placed in a layer instance by the ranges enclosing them
  std::int64_t directions_by_order = 0;  // all-to-all ops whose direction was inferred by order
  std::int64_t backward_by_sequence = 0;  // backward activities placed by their forward op's autograd sequence
  std::int64_t a2a_assumed_moe = 0;    // all-to-alls outside MoE ranges taken as MoE dispatch/combine
  bool iterations_marked = false;      // some range gave iterations
  bool iterations_from_steps = false;  // ... counted from ranges that end one (optimizer steps)
  bool phases_marked = false;          // some range gave backward phases
  bool layers_marked = false;          // some range gave layers (numbered or not)
  std::vector<std::string> ambiguities;  // one line each
  std::map<std::string, std::int64_t> rules_used;  // "preset: label" -> ranges or kernels matched
  std::int64_t load_collectives = 0;   // all-to-all(v) calls whose split sizes gave load
};

class Trace {
 public:
  RunInfo run;
  std::vector<std::string> strings;
  std::vector<Device> devices;
  std::vector<Rank> ranks;
  std::vector<Stream> streams;  // sorted by (rank, id)
  std::vector<Layer> layers;
  std::vector<LaunchConfig> launch_configs;
  // Sorted by (stream index, start); track t is [activity_track_begin[t], [t+1]).
  std::vector<Activity> activities;
  std::vector<std::size_t> activity_track_begin;
  // Sorted by (stream index, start, -end); same track layout.
  std::vector<OpRange> ops;
  std::vector<std::size_t> op_track_begin;
  std::vector<ApiCall> api_calls;          // sorted by correlation id, then rank
  std::vector<NvtxRange> nvtx;             // sorted by (rank, thread, start)
  std::vector<SyncEvent> sync_events;      // sorted by (rank, start)
  std::vector<MemoryEvent> memory_events;  // sorted by (rank, ts)
  std::vector<Buffer> buffers;
  std::vector<OpBuffer> op_buffers;
  std::vector<OpDep> op_deps;
  std::vector<ExpertLoad> expert_load;     // sorted by (iteration, layer, src_rank, expert)
  std::vector<ExpertPlacement> placements;
  std::vector<InputShape> input_shapes;  // NvtxRange::input_shape indexes it
  std::vector<Collective> collectives;     // sorted by (rank, correlation id)
  // Where expert_load came from when not from the trace's own table (MoE
  // recognition fills it from all-to-all split sizes: one "expert" per
  // destination rank); empty: the trace's expert_load table.
  std::string expert_load_origin;
  // The columns of expert_load are destination ranks, not experts, and its
  // counts elements sent, not tokens (the all-to-all split sizes).
  bool expert_load_by_rank = false;
  ProjectionStats projection;
  RecognitionStats recognition;
  // By string id: the Category (as int) of each kernel name by the rules of
  // analyzer/data/kernel_classes.json; -1 where not a kernel name. Filled by
  // classify_kernel_names() (the loader calls it); classify_activity falls
  // back to matching the name where it is missing.
  std::vector<std::int8_t> kernel_category;
  // A run read from several rank files (run_loader.h): the files, gaps and
  // clock alignment; null for a trace read from one file.
  std::shared_ptr<const RunFiles> files;

  std::string_view str(StringId id) const {
    return id.valid() && static_cast<std::size_t>(id.value) < strings.size()
               ? std::string_view(strings[static_cast<std::size_t>(id.value)])
               : std::string_view();
  }
  std::span<const Activity> track_activities(std::size_t stream_index) const {
    return {activities.data() + activity_track_begin[stream_index],
            activities.data() + activity_track_begin[stream_index + 1]};
  }
  std::span<const OpRange> track_ops(std::size_t stream_index) const {
    return {ops.data() + op_track_begin[stream_index], ops.data() + op_track_begin[stream_index + 1]};
  }
  const LaunchConfig* launch_config(const Activity& a) const {
    return a.launch >= 0 && static_cast<std::size_t>(a.launch) < launch_configs.size()
               ? &launch_configs[static_cast<std::size_t>(a.launch)]
               : nullptr;
  }
  // Index into streams of a stream id, or -1.
  int stream_index(StreamId id) const;
  // Index into ops of an op id, or -1.
  int op_index(OpId id) const;
  // The API call with this correlation id (on the lowest rank that has
  // one), or nullptr; launching_call() for an activity's.
  const ApiCall* api_call(std::int64_t correlation_id) const;
  // The API call that launched an activity: its correlation id on its rank
  // (ids repeat across ranks), or nullptr.
  const ApiCall* launching_call(const Activity& a) const;
  // Looks up every activity's launching call once (Activity::launched_by),
  // so that launching_call() reads it instead of searching; the loader and
  // merge_traces() call it once api_calls is complete and sorted. The range
  // form: the activities [begin, end) only (two ranges may be indexed on two
  // threads at once).
  void index_launching_calls();
  void index_launching_calls(std::size_t begin, std::size_t end);
  // Number of timed events (activities, ops, API calls, NVTX ranges, memory events).
  std::int64_t event_count() const;
  std::vector<RankId> rank_ids() const;  // every rank that appears, sorted
  // Value of a run_config key, or of the first key that ends in "." + key
  // (run_config flattens nested JSON: "model.elem_bytes"); empty if none.
  std::string_view config_value(std::string_view key) const;
  // That value as a whole integer; nullopt if absent or not all digits.
  std::optional<std::int64_t> config_int(std::string_view key) const;

  // Fills kernel_category for the names of every kernel in activities.
  void classify_kernel_names();

  // Re-sorts ops into track order after their times changed, and remaps
  // Activity::op and the op-id index accordingly.
  void sort_ops();
  // After ops were added: sorts them into tracks and rebuilds the op-id
  // index and the track offsets (ops' ids must be unique).
  void index_ops();

 private:
  friend class TraceLoader;
  friend class TraceMerger;  // run_loader.h
  std::vector<std::pair<std::int64_t, std::int32_t>> op_index_;      // (op id, index), sorted
  std::vector<std::pair<std::int32_t, std::int32_t>> stream_index_;  // (stream id, index), sorted
};

struct LoadOptions {
  bool api_calls = true;
  bool nvtx = true;
  bool memory = true;
  // Attribute activities to the op ranges that launched them (projection.h).
  bool project = true;
  // MoE recognition (moe_recognition.h) on traces without op ranges of their
  // own; `moe_rules`: a user's rules file, tried before the built-in presets.
  bool recognize = true;
  std::string moe_rules;
  // Stage name and fraction done in [0, 1]; called from the loading thread.
  std::function<void(std::string_view stage, double fraction)> progress;
  // Tables of a trace file read at once: 0: the op ranges, memory and MoE
  // tables on a thread and connection of their own beside the device and
  // host tables, the API calls shared between the two threads, where the
  // machine has two cores or more; 1: one after the other. The same trace,
  // checks and errors either way.
  int threads = 0;
};

// Loads and validates a trace. Throws moetrace::Error("<path>: <problem>") for
// a missing file, a non-SQLite file, a foreign database, a newer schema, a
// damaged file, or a trace that holds no events. A trace of another tool (a
// PyTorch-profiler/Kineto JSON file, plain or gzipped, or an Nsight Systems
// SQLite export) is read by its importer straight into the model: the same
// model as `moetrace import` and a load of its file give, without the file
// (RunInfo::integrity "imported in memory"); its errors are the importer's.
Trace load_trace(const std::string& path, const LoadOptions& options = {});

// Trace metadata and per-table row counts without loading the events.
struct TraceSummary {
  RunInfo run;
  std::vector<std::pair<std::string, std::int64_t>> table_rows;
  int ranks = 0, streams = 0, layers = 0, iterations = 0;
};
TraceSummary summarize_trace(const std::string& path);

// Category of an activity that no op range claims: copies and memsets are
// memcpy; a kernel is classified by its name with the rules of
// analyzer/data/kernel_classes.json (kernel_classes.h): NCCL all-to-all and
// send/recv -> all-to-all, all-reduce -> all-reduce, other NCCL -> other
// communication, grouped/MoE GEMMs -> expert compute, top-k routers ->
// gating, the rest (permutes included) -> other compute.
Category classify_activity(const Trace& trace, const Activity& a);

// The order of ops on their tracks: by stream, then start, the longer first
// where two start together (an enclosing op before what it encloses).
inline bool op_track_order(const OpRange& a, const OpRange& b) {
  if (a.stream != b.stream) return a.stream < b.stream;
  if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
  return a.end_ns > b.end_ns;
}

// Where each of `streams` streams' events begin in `events`, sorted by stream
// (streams + 1 offsets; the last is events.size()).
template <class Events>
std::vector<std::size_t> track_offsets(const Events& events, std::size_t streams) {
  std::vector<std::size_t> begin(streams + 1, 0);
  for (const auto& e : events) ++begin[static_cast<std::size_t>(e.stream) + 1];
  for (std::size_t i = 0; i < streams; ++i) begin[i + 1] += begin[i];
  return begin;
}

// Collective kind of an op kind ("all_to_all", ...), empty for non-collectives.
std::string_view collective_kind(OpKind k);

}  // namespace moetrace::analyzer
