// One struct per trace table (schemas/trace_schema_v2.sql). Negative ids and
// sizes mean "absent" and are stored as NULL; so are correlation ids of 0.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <string>

#include "moetrace/schema/ids.h"
#include "moetrace/schema/op_kind.h"
#include "moetrace/schema/schema.h"

namespace moetrace::instrument {

struct RunRecord {
  std::string name{};
  std::string backend{};         // "cuda", "sim", "synthetic", ...
  std::string variant{};         // "dpmoe", "pipemoe", ...; empty where none
  bool simulated = false;
  int world_size = 1;
  std::string host{};
  std::string config_json{};     // the full configuration, as given
};

struct DeviceRecord {
  DeviceId id{};
  std::string name{};
  std::string uuid{};
  int compute_major = -1, compute_minor = -1;
  int sm_count = -1;
  std::int64_t memory_bytes = -1;
  bool simulated = false;
};

struct RankRecord {
  RankId rank{};
  DeviceId device{};
  int local_rank = -1;
  std::string host{};
  std::int64_t pid = -1;
};

// Stream roles as the timeline groups them.
inline constexpr const char* kRoleCompute = "compute";
inline constexpr const char* kRoleComm = "comm";
inline constexpr const char* kRoleCopy = "copy";
inline constexpr const char* kRoleOther = "other";

struct StreamRecord {
  StreamId id{};
  RankId rank{};
  DeviceId device{};
  std::int64_t native_id = -1;   // the CUDA/CUPTI stream id, where one exists
  std::string role = kRoleCompute;
  std::string name{};
  int priority = 0;
};

struct LayerRecord {
  int layer = 0;
  std::string kind = "moe";      // "moe" or "dense"
  int num_experts = -1, top_k = -1;
  std::int64_t model_dim = -1, hidden_dim = -1, tokens = -1;
};

struct KernelRecord {
  RankId rank{};
  StreamId stream{};
  std::int64_t start_ns = 0, end_ns = 0;
  StringId name{};
  std::int64_t correlation_id = 0;
  // Launch configuration; interned by the writer into launch_configs. A
  // negative grid[0] means unknown.
  std::array<std::int32_t, 3> grid{-1, -1, -1};
  std::array<std::int32_t, 3> block{-1, -1, -1};
  std::int32_t shared_bytes = -1;
  std::int32_t registers = -1;
  OpId op{};
};

// A kernel's launch configuration as the writer interns it into the
// launch_configs table, numbered in order of first use. Readers that build
// a trace's model from records in memory number them with the same key.
struct LaunchConfigKey {
  std::array<std::int32_t, 3> grid, block;
  std::int32_t shared_bytes, registers;
  auto operator<=>(const LaunchConfigKey&) const = default;
};
inline LaunchConfigKey launch_config_key(const KernelRecord& r) {
  return {r.grid, r.block, r.shared_bytes, r.registers};
}

struct MemcpyRecord {
  RankId rank{};
  StreamId stream{};
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t bytes = 0;
  schema::CopyKind copy_kind = schema::CopyKind::kUnknown;
  schema::MemoryKind src_kind = schema::MemoryKind::kUnknown;
  schema::MemoryKind dst_kind = schema::MemoryKind::kUnknown;
  std::int64_t correlation_id = 0;
  OpId op{};
};

struct MemsetRecord {
  RankId rank{};
  StreamId stream{};
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t bytes = 0;
  std::optional<std::int32_t> value = 0;  // nullopt: unknown (stored as NULL)
  std::int64_t correlation_id = 0;
  OpId op{};
};

struct MemoryEventRecord {
  RankId rank{};
  std::int64_t ts_ns = 0;
  bool alloc = true;             // false: a free
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  schema::MemoryKind memory_kind = schema::MemoryKind::kDevice;
  StreamId stream{};
  std::int64_t correlation_id = 0;
  BufferId buffer{};
};

struct ApiCallRecord {
  RankId rank{};
  std::int64_t thread_id = 0;
  std::int64_t start_ns = 0, end_ns = 0;
  schema::ApiKind api = schema::ApiKind::kRuntime;
  StringId name{};
  std::int64_t correlation_id = 0;
  std::int32_t return_code = 0;
};

struct SyncRecord {
  RankId rank{};
  StreamId stream{};
  std::int64_t start_ns = 0, end_ns = 0;
  std::int32_t kind = 0;         // CUpti_ActivitySynchronizationType
  std::int64_t correlation_id = 0;
  // An event wait (kinds 1, 2): the stream that recorded the event and the
  // correlation id of its cudaEventRecord call (0: not recorded).
  StreamId wait_stream{};
  std::int64_t event_record_correlation_id = 0;
};

struct OverheadRecord {
  RankId rank{};
  std::int64_t thread_id = -1;
  std::int64_t start_ns = 0, end_ns = 0;
  std::string kind{};            // "cupti_buffer_flush", "driver_compiler", ...
};

struct NvtxRangeRecord {
  RankId rank{};
  std::int64_t thread_id = 0;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = -1;      // -1: never closed (process ended inside it)
  StringId domain{};
  StringId name{};
  std::int32_t category = -1;
  std::int64_t color = -1;
  std::optional<std::int64_t> payload_int{};
  std::optional<double> payload_double{};
  // PyTorch's autograd sequence number of the range (a cpu_op's "Sequence
  // number"): a forward op and the backward node computing its gradient
  // share it (table autograd_ranges).
  std::optional<std::int64_t> autograd_seq{};
  bool autograd_backward = false;  // a backward node
  // A PyTorch op's input shapes and types as the profiler recorded them with
  // record_shapes=True ("Input Dims", "Input type"), as JSON text; empty:
  // none (table input_shapes).
  std::string input_dims{}, input_types{};
};

// An NCCL collective as the source tool described its kernel (Kineto's kernel
// args); linked to the kernel by (rank, correlation_id). Empty strings and
// negative counts are stored as NULL.
struct CollectiveRecord {
  RankId rank{};
  StreamId stream{};
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t correlation_id = 0;
  std::string name{};            // as the source names it: "allreduce", "all_to_all", ...
  std::int64_t in_nelems = -1, out_nelems = -1;
  std::string dtype{};
  std::int32_t group_size = -1;
  std::string group_ranks{};     // e.g. "[0, 1]"
  std::string process_group{};   // process group name and description
  std::string in_splits{}, out_splits{};
  // The call's sequence number in its process group (Kineto's "Seq"): the
  // same on every member for one call. -1: none (table collective_seq).
  std::int64_t seq = -1;
};

// An op of a plan as executed: its MoE coordinates and its time on its stream.
struct OpRangeRecord {
  OpId id{};                     // the plan's op id; assigned by the writer if absent
  RankId rank{};
  StreamId stream{};
  OpKind kind = OpKind::kOtherOp;
  StringId name{};
  std::int32_t layer = -1, iteration = -1, micro_batch = -1, chunk = -1;
  Phase phase = Phase::kForward;
  std::int64_t start_ns = 0, end_ns = 0;            // on the device (or simulated)
  std::int64_t launch_start_ns = -1, launch_end_ns = -1;  // host-side range, GPU runs
  double flops = -1;
  std::int64_t bytes = -1;
  // All-to-all: bytes this rank receives from the other ranks in the call
  // (its own segment not included); -1: unknown (table op_recv_bytes).
  std::int64_t recv_bytes = -1;
  RankId peer{};
  std::int64_t nvtx_id = -1;
};

struct OpDepRecord {
  OpId op{};
  OpId dep{};
};

// Buffer tags in the papers' words (mpipemoe Fig. 5): T_I, T_DI, T_M, T_DO,
// T_O, and params, grads, optimizer, workspace.
struct BufferRecord {
  BufferId id{};
  RankId rank{};
  std::string tag{};
  std::int64_t bytes = 0;
  schema::MemoryKind memory_kind = schema::MemoryKind::kDevice;
  std::int32_t layer = -1, chunk = -1;
  std::int64_t alloc_ns = -1, free_ns = -1;
  std::uint64_t address = 0;
};

struct OpBufferRecord {
  OpId op{};
  BufferId buffer{};
  schema::Access access = schema::Access::kRead;
};

struct ExpertLoadRecord {
  std::int32_t iteration = 0, layer = 0, src_rank = 0, expert = 0;
  std::int64_t tokens = 0;
};

struct ExpertPlacementRecord {
  std::int32_t iteration = 0, layer = 0, expert = 0, rank = 0;
  std::string role = "home";     // "home", "replica" (Pro-Prophet), "shadow" (FasterMoE)
};

}  // namespace moetrace::instrument
