// The plan IR: one MoE training run (layers x iterations, forward and
// backward) as a graph of ops on ranks and streams. Builders (builders.h) turn
// a variant's configuration into a plan; executors run it: the CPU executor
// (cpu_executor.h) on float64 tensors, the discrete-event simulator
// (kernels/sim) with cost models, the CUDA executor (kernels/cuda) with real
// kernels. All of them read the same fields, documented here.
//
// Execution rules every executor follows:
//  1. Ids are dense indices: ops[i].id.value == i, buffers[i].id.value == i,
//     streams[i].id.value == i.
//  2. `ops` is in a topological order: every dependency of ops[i] has a
//     smaller index.
//  3. A stream runs its ops one at a time, in the order they appear in `ops`
//     (CUDA stream semantics). An op starts when it is at the head of its
//     stream and all its `deps` have finished.
//  4. The ops of one collective (same Collective::id, one op per rank of the
//     group) start together, once every one of them could start by rule 3, as
//     NCCL does; the builders issue collectives in the same order on every
//     rank's stream, so this never deadlocks.
//  5. `alloc_before` buffers are allocated when the op starts, `free_after`
//     buffers are released when it ends; persistent buffers live for the
//     whole plan. Every non-persistent buffer that an op touches is allocated
//     exactly once by an op that precedes (or is) every op touching it, and
//     freed exactly once by an op that follows (or is) every such op
//     (validate.h checks this).
//  6. `deps` hold every data hazard (read-after-write, write-after-read,
//     write-after-write, including those on the same stream), computed from
//     the ops' buffer accesses, plus the ordering edges a schedule adds.
//
// Data semantics: every op that moves or computes data says exactly what, in
// `data`, so the CPU and CUDA executors run it on real tensors. A buffer is a
// row-major 2-D array (rows x cols); ops address whole rows (View). Ops whose
// `data` is TimingOnly (attention, the Pro-Prophet Plan search) model time
// only: the executors write no tensor of the plan for them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "moetrace/schema/ids.h"
#include "moetrace/schema/op_kind.h"
#include "moetrace/schema/schema.h"

namespace moetrace::plan {

// Shared by the participating ranks' ops of one collective.
using CollectiveId = StrongId<struct CollectiveTag, std::int64_t>;

// ---------------------------------------------------------------------------
// Streams

// Per-rank logical streams. Their names match instrument::kRole* ("compute",
// "comm", "copy") so executors can write StreamRecord.role directly.
enum class StreamRole : std::uint8_t { kCompute = 0, kComm = 1, kCopy = 2 };
std::string_view stream_role_name(StreamRole r);

struct Stream {
  StreamId id;
  RankId rank;
  StreamRole role = StreamRole::kCompute;
  std::string name;  // "rank0.compute"
  int priority = 0;  // CUDA stream priority hint (lower = higher priority)
};

// ---------------------------------------------------------------------------
// Buffers

// Tags in the papers' words. T_I .. T_O follow mpipemoe Fig. 1/5: T_I the
// tensor that is sliced and dispatched (here: the permuted send buffer),
// T_DI the dispatched input, T_M the expert's hidden activation (before GeLU,
// kept for the backward pass), T_DO the expert output, T_O the combined
// output on the source rank. The d* tags are their gradients (mpipemoe's
// "temporary buffers", Eq. 3).
enum class BufferTag : std::uint8_t {
  kTI = 0,
  kTDI = 1,
  kTM = 2,
  kTDO = 3,
  kTO = 4,
  kGradTI = 5,
  kGradTDI = 6,
  kGradTM = 7,
  kGradTDO = 8,
  kGradTO = 9,
  kActivation = 10,      // layer inputs/outputs, dense-FFN hidden activations
  kActivationGrad = 11,  // their gradients
  kRouting = 12,         // gate probabilities, top-k ids and weights, d(weights)
  kParams = 13,
  kGrads = 14,
  kOptimizer = 15,       // Adam moments (mpipemoe Eq. 1 counts them)
  kWorkspace = 16,
  kHostOffload = 17,     // pinned host copies of T_DI / T_M (mpipemoe S1-S3)
};
// "T_I", "T_DI", "T_M", "T_DO", "T_O", "dT_I", ..., "activation",
// "activation_grad", "routing", "params", "grads", "optimizer", "workspace",
// "host_offload".
std::string_view buffer_tag_name(BufferTag t);

// Which parameter tensor (or slice of it) a params/grads buffer holds.
enum class ParamKind : std::uint8_t {
  kGate = 0,    // gate weight W_g, model_dim x num_experts
  kExpert = 1,  // [W1; W2^T] of one expert: 2*model_dim rows x expert_hidden
  kDense = 2,   // [A; B^T] of the block's dense FFN: 2*model_dim x dense_hidden
};
std::string_view param_kind_name(ParamKind k);

// A column slice [col_begin, col_begin + cols) of a parameter, in the layout
// above. Expert and dense FFN parameters are stored as two stacked
// model_dim x hidden matrices, W1 and W2 transposed, so a tensor-parallel
// slice of the hidden dimension (Megatron column/row split, ppmoe 3.1.3) is a
// column slice of one buffer, and a partial transfer (Pro-Prophet SubTrans)
// is a row range.
struct ParamSlice {
  ParamKind kind = ParamKind::kGate;
  int layer = -1;
  int expert = -1;           // kExpert only
  std::int64_t col_begin = 0;
  std::int64_t cols = 0;
};

// What the executor does with a buffer at allocation, and which buffers it
// reports at the end. A "block" is one batch of tokens that enters the model
// together: for the expert-parallel variants, the tokens of one rank in one
// iteration (block = rank); for PPMoE, one micro-batch of one data-parallel
// group (block = dp_group * micro_batches + micro_batch).
struct BufferBinding {
  enum class Kind : std::uint8_t {
    kNone = 0,         // uninitialised (the CPU executor fills it with NaN)
    kZero = 1,         // zero-filled (accumulation targets)
    kParam = 2,        // parameter values, `param` slice of the model's initial weights
    kGrad = 3,         // gradient of `param`, zero-filled, zeroed again by SgdStep
    kOptimizerState = 4,
    kModelInput = 5,   // input tokens of (iteration, block)
    kOutputGrad = 6,   // d(loss)/d(model output) of (iteration, block)
    kModelOutput = 7,  // the model output of (iteration, block): zero-filled, reported when freed
    kInputGrad = 8,    // d(loss)/d(model input) of (iteration, block): zero-filled, reported when freed
  };
  Kind kind = Kind::kNone;
  ParamSlice param;      // kParam, kGrad, kOptimizerState
  int iteration = -1;    // kModelInput .. kInputGrad
  int block = -1;
};

struct Buffer {
  BufferId id{};
  RankId rank{};
  BufferTag tag = BufferTag::kWorkspace;
  std::string name{};  // "L0.it1.T_DI.c2"
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  int elem_bytes = 2;  // nominal element size for memory and traffic; the CPU executor computes in float64
  schema::MemoryKind memory = schema::MemoryKind::kDevice;
  int layer = -1, iteration = -1, micro_batch = -1, chunk = -1;
  bool persistent = false;  // alive for the whole plan: never in alloc_before / free_after
  BufferBinding binding{};

  std::int64_t elements() const { return rows * cols; }
  std::int64_t bytes() const { return rows * cols * elem_bytes; }
  std::int64_t row_bytes() const { return cols * elem_bytes; }
};

// Rows [row, row + rows) of a buffer, all columns.
struct View {
  BufferId buffer;
  std::int64_t row = 0;
  std::int64_t rows = 0;
};

struct RowSpan {
  std::int64_t begin = 0;
  std::int64_t count = 0;
};

// pipemoe Eq. 5: floor(n * c / chunks), the first of the n rows of an
// (expert, source) pair that chunk c holds.
inline std::int64_t chunk_begin(std::int64_t n, int c, int chunks) { return n * c / chunks; }
// Rows of those n that chunk c holds.
inline std::int64_t chunk_rows(std::int64_t n, int c, int chunks) {
  return chunk_begin(n, c + 1, chunks) - chunk_begin(n, c, chunks);
}

// ---------------------------------------------------------------------------
// Routing layout: where each routed token row sits in a permuted buffer.
//
// A source block has `tokens` tokens; the gate sends each to `top_k` distinct
// experts. The (token, expert) pairs of the listed `experts` are laid out
// chunk by chunk (pipemoe Eq. 5: chunk c holds rows [c N/r, (c+1) N/r) of
// every expert); within a chunk, in the order of `experts`; within an expert,
// by increasing token index. Chunk c of an expert that receives n rows from
// this source holds its rows q with chunk_begin(n, c) <= q < chunk_begin(n, c+1).
// Builders list experts grouped by the rank that serves them, so the rows one
// all-to-all sends to one peer are contiguous. Experts not listed are skipped
// (PPMoE: experts held by other tensor-parallel ranks).
struct RoutedLayout {
  std::int64_t tokens = 0;
  int top_k = 1;
  int num_chunks = 1;
  std::vector<int> experts;                // global expert indices, in layout order
  std::vector<std::int64_t> expert_rows;   // [i]: rows this source routes to experts[i]

  // First row (within one expert) of chunk c: plan::chunk_begin.
  std::int64_t chunk_begin(std::int64_t n, int c) const { return plan::chunk_begin(n, c, num_chunks); }
  std::int64_t rows_in_chunk(int c, std::size_t i) const {
    return plan::chunk_rows(expert_rows[i], c, num_chunks);
  }
  // First row of chunk c, and of experts[i] within chunk c.
  std::int64_t chunk_offset(int c) const;
  std::int64_t offset(int c, std::size_t i) const;
  std::int64_t chunk_total(int c) const;
  std::int64_t total_rows() const;
  // Position in `experts` of a global expert index, or -1.
  int index_of(int expert) const;
};

// ---------------------------------------------------------------------------
// Op data semantics (Op::data). The executors implement exactly these.

// What a timing-only attention op stands for, so that an executor can run
// work of its shape: unfused multi-head self-attention of this rank's heads
// over `sequences` sequences of `sequence_length` tokens (forward: QKV
// projection, scores, softmax, context, output projection; backward: their
// gradients, twice the FLOPs), reading `input` (the block's activation, or
// its gradient) and writing only scratch.
struct AttentionWork {
  View input;                        // tokens x model_dim
  std::int64_t sequences = 0;        // ceil(tokens / sequence_length)
  std::int64_t sequence_length = 0;  // min(the model's, tokens)
  std::int64_t model_dim = 0;
  int heads = 0;                     // this rank's: the model's over the tensor-parallel degree
  std::int64_t head_dim = 0;
  bool backward = false;
};

// What Pro-Prophet's Plan search stands for: the expert load of this rank's
// gate output (`routing`, tokens x 2 top_k) and Algorithm 1's greedy
// placement of `experts` experts on `devices` devices.
struct PlanSearchWork {
  View routing;
  int top_k = 1;
  int experts = 0;
  int devices = 0;
};

// Models time only: no tensor of the plan is written (attention, Plan
// search). Where the work's shape is known, an executor may run work of that
// shape on scratch (reading the views named); else it only has the FLOPs.
struct TimingOnly {
  std::optional<AttentionWork> attention;
  std::optional<PlanSearchWork> plan_search;
};

// mpipemoe/pipemoe gating: logits = x W_g; probs = softmax(logits); the
// top_k largest probabilities (ties: lower expert index) are the token's
// experts, weighted by their (unrenormalised) probabilities.
// probs: tokens x num_experts. routing: tokens x 2*top_k, columns [0, k) the
// expert ids (as exact values), [k, 2k) their weights.
struct GateForward {
  View x;
  BufferId weight;  // W_g, model_dim x num_experts
  BufferId probs;
  BufferId routing;
  int top_k = 1;
};

// Backward of GateForward given d(weights) (tokens x top_k): d(logits) by the
// softmax Jacobian, grad += x^T d(logits), dx += d(logits) W_g^T.
struct GateBackward {
  View x;
  BufferId weight;
  BufferId grad;       // accumulated
  BufferId probs;
  BufferId routing;
  BufferId d_weights;  // tokens x top_k
  View dx;             // accumulated
};

// Copies each routed (token, expert) row of x into `out` at its RoutedLayout
// position (GShard "dispatch mask" encode; PPMoE index_select of Alg. 1).
struct Permute {
  View x;
  BufferId routing;
  RoutedLayout layout;
  View out;  // layout.total_rows() rows
};

// dx[token] += d_permuted[row] for every routed row (the transpose of Permute).
struct PermuteBackward {
  BufferId routing;
  RoutedLayout layout;
  View d_permuted;
  View dx;  // accumulated
};

// y[token] = sum over the token's experts listed in the layout of
// weight * combined[row] (GShard combine; PPMoE index assignment, Alg. 1).
// Tokens with none of the listed experts get 0.
struct Unpermute {
  BufferId routing;
  RoutedLayout layout;
  View combined;  // T_O
  View y;         // overwritten
};

// d_combined[row] = weight * dy[token]; d_weights[token, slot] =
// <dy[token], combined[row]> for listed experts, 0 for the others.
struct UnpermuteBackward {
  BufferId routing;
  RoutedLayout layout;
  View dy;
  View combined;    // T_O saved by the forward pass
  View d_combined;  // overwritten
  BufferId d_weights;  // tokens x top_k, overwritten
};

// Two-layer FFN with GeLU on the listed rows (same row indices in input,
// middle and output): middle = input W1 (pre-activation, the T_M kept for
// backward), output = gelu(middle) W2. `expert` is the global expert index,
// or -1 for a block's dense FFN. A tensor-parallel slice (hidden columns
// [c0, c0+h)) yields the partial output, summed by a following all-reduce.
struct FfnForward {
  int expert = -1;
  BufferId params;  // [W1; W2^T], 2*model_dim x hidden
  BufferId input;
  BufferId middle;
  BufferId output;  // overwritten
  std::vector<RowSpan> rows;
  // Computed in one batched GEMM with the rank's previous local expert of
  // the same chunk (Tutel's fused experts): no startup of its own.
  bool batched = false;
};

// Backward of FfnForward: with a = gelu(middle), g = d_output W2^T * gelu'(middle):
// grad(W2) += a^T d_output, grad(W1) += input^T g, d_input = g W1^T.
struct FfnBackward {
  int expert = -1;
  BufferId params;
  BufferId grads;   // accumulated, same layout as params
  BufferId input;
  BufferId middle;
  BufferId d_output;
  BufferId d_input;  // overwritten on `rows`
  std::vector<RowSpan> rows;
  bool batched = false;  // as FfnForward::batched
};

// Restores T_M by the first GEMM only: middle = input W1 (mpipemoe S3/S4).
struct FfnRecompute {
  int expert = -1;
  BufferId params;
  BufferId input;
  BufferId middle;
  std::vector<RowSpan> rows;
};

enum class CollectiveKind : std::uint8_t {
  kAllToAllV = 0,  // uneven all-to-all: sends[i] goes to sends[i].peer
  kAllReduce = 1,  // sum of every rank's `inout` view, in place on all
  kBroadcast = 2,  // root sends its view to every other rank
  kReduce = 3,     // the root adds every other rank's view into its own
  kSendRecv = 4,   // point-to-point (pipeline stages)
};
std::string_view collective_kind_name(CollectiveKind k);

// One peer's share of a collective, seen from this op's rank. `bytes` is the
// traffic to (sends) or from (recvs) that peer; a rank's segment to itself is
// listed too (it is a local copy, as in NCCL all-to-all).
struct PeerTransfer {
  RankId peer;
  View view;
  std::int64_t bytes = 0;
};

// A collective as seen by one participating rank. Each participant has one op
// with the same id, kind, group and root. All-to-all-v: this rank's sends[j]
// to peer q matches q's recvs[] entry from this rank, row for row.
// Broadcast: the root's sends / the others' single recv. Reduce: the
// others' single send / the root's recvs, added into the root's view.
// SendRecv: one send on the source, one recv on the destination.
// All-reduce: `inout` on every rank; bytes = the view's size.
// moves_data = false marks a timing-only collective (the all-reduce of a
// timing-only attention op): participants synchronise, no data moves.
struct Collective {
  CollectiveId id;
  CollectiveKind kind = CollectiveKind::kAllToAllV;
  std::vector<RankId> group;  // ascending
  RankId root;                // broadcast / reduce
  std::vector<PeerTransfer> sends;
  std::vector<PeerTransfer> recvs;
  View inout;                 // all-reduce
  bool moves_data = true;
  // All-to-all-v run as one step of an exchange split by peer groups
  // (FasterMoE's smart schedule, FasterMoeConfig::smart_schedule_group):
  // the peers each rank exchanges with in this step; 0: every other rank.
  // The simulator charges exchange_peers / (P - 1) of the all-to-all's
  // startup alpha(P), as pipemoe Table II's 1-factor all-to-all pays
  // alpha once per peer round (alpha_a = (P - 1) alpha).
  int exchange_peers = 0;
};

// dst = src (same shape); offload is device -> pinned host, prefetch the
// reverse (mpipemoe Fig. 7 D and H).
struct Copy {
  View src;
  View dst;
};

// params -= learning_rate * grads, then grads = 0. The executors apply plain
// SGD so the CPU check is exact; the memory model still counts Adam states
// (mpipemoe Eq. 1), whose FLOPs the op's `flops` carries.
struct SgdStep {
  BufferId params;
  BufferId grads;
  ParamSlice param;
  double learning_rate = 0;
};

using OpData = std::variant<TimingOnly, GateForward, GateBackward, Permute, PermuteBackward,
                            Unpermute, UnpermuteBackward, FfnForward, FfnBackward, FfnRecompute,
                            Collective, Copy, SgdStep>;

struct BufferAccess {
  BufferId buffer;
  schema::Access access = schema::Access::kRead;
};

// The buffers an op's data semantics read and write (a buffer both read and
// written, or accumulated into, is kReadWrite). Op::buffers holds these plus
// what timing-only ops declare to be ordered.
std::vector<BufferAccess> data_accesses(const OpData& data);

// ---------------------------------------------------------------------------
// Ops

// MoE coordinates of an op (the trace's op_ranges columns). -1: not applicable.
struct Coords {
  int layer = -1;
  int iteration = -1;
  int micro_batch = -1;
  int chunk = -1;  // pipeline chunk (PipeMoE) / partition (MPipeMoE)
  Phase phase = Phase::kForward;
};

struct Op {
  OpId id;
  OpKind kind = OpKind::kOtherOp;
  std::string name;  // "L1.it0.dispatch_all_to_all.c1"
  RankId rank;
  StreamId stream;
  std::vector<OpId> deps;
  // Work: FLOPs of compute ops (2 per multiply-add); bytes of copies and, for
  // collectives, the bytes this rank sends to other ranks (its segment to
  // itself is a local copy; all-reduce: the reduced size; per-peer bytes are
  // in Collective::sends/recvs);
  // memory-bound compute ops (permute, unpermute) carry the bytes they move.
  double flops = 0;
  std::int64_t bytes = 0;
  std::vector<BufferAccess> buffers;  // what it reads and writes (the trace's op_buffers)
  std::vector<BufferId> alloc_before;
  std::vector<BufferId> free_after;
  Coords coords;
  OpData data;

  const Collective* collective() const { return std::get_if<Collective>(&data); }
  Category category() const { return op_category(kind); }
  // An all-to-all-v: the bytes this rank receives from the other ranks (its
  // segment to itself not counted; `bytes` is what it sends; one without
  // transfers, timing-only, receives `bytes`); -1 otherwise.
  std::int64_t received_bytes() const;
  // A send/recv: the other rank; RankId{} otherwise. What the trace's op
  // rows record as the op's peer.
  RankId send_recv_peer() const;
};

// ---------------------------------------------------------------------------
// Plan

// Expert placement per (iteration, layer), for the trace's expert_placement
// table: "home" (expert-parallel owner), "replica" (Pro-Prophet Trans target),
// "shadow" (FasterMoE broadcast target).
struct Placement {
  int iteration = 0, layer = 0, expert = 0;
  RankId rank;
  std::string role = "home";
};

// Tokens that source `source` routes to `expert` in (iteration, layer) (the
// trace's expert_load table). For PPMoE the source is a token block.
struct ExpertLoadEntry {
  int iteration = 0, layer = 0, source = 0, expert = 0;
  std::int64_t tokens = 0;
};

// Model dimensions every executor needs (variant-specific settings are in
// config_json).
struct ModelDims {
  int num_layers = 0;
  int num_experts = 0;
  int top_k = 1;
  std::int64_t model_dim = 0;      // M
  std::int64_t expert_hidden = 0;  // H
  std::int64_t dense_hidden = 0;   // F, 0: no dense FFN in a block
  int elem_bytes = 2;
};

struct Plan {
  std::string variant;  // "dpmoe", "ppmoe", "pipemoe", "mpipemoe", "pro_prophet", "fastermoe"
  int world_size = 0;
  int iterations = 0;
  int blocks = 0;       // token blocks per iteration (see BufferBinding)
  ModelDims dims;
  std::string config_json;  // the variant's configuration, as given
  std::vector<Stream> streams;
  std::vector<Buffer> buffers;
  std::vector<Op> ops;
  std::vector<Placement> placements;
  std::vector<ExpertLoadEntry> loads;

  const Op& op(OpId id) const { return ops[static_cast<std::size_t>(id.value)]; }
  const Buffer& buffer(BufferId id) const { return buffers[static_cast<std::size_t>(id.value)]; }
  const Stream& stream(StreamId id) const { return streams[static_cast<std::size_t>(id.value)]; }
};

// Where a copy op moves bytes: the memory of its source and destination views'
// buffers (device where it names none; an offload writes pinned host memory,
// a prefetch reads it) and the copy kind that makes.
struct CopyDirection {
  schema::CopyKind kind = schema::CopyKind::kDeviceToDevice;
  schema::MemoryKind src = schema::MemoryKind::kDevice, dst = schema::MemoryKind::kDevice;
};
CopyDirection copy_direction(const Plan& plan, const Op& op);

}  // namespace moetrace::plan
