// CPU-side decisions of the CUDA executor about data: the element type of
// every buffer, the device tables of routed layouts, the routing used when a
// plan was built from a synthetic load, and the per-op workspace. No CUDA
// here: unit-tested on any machine; the kernels read the same tables through
// the inline functions below.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "moetrace/cuda/device_math.h"
#include "moetrace/cuda/row_major_gemm.h"
#include "moetrace/plan/plan.h"

namespace moetrace::cuda {

// bf16: activations, expert and gate parameters in bfloat16, every GEMM
// accumulating in fp32 (cuBLAS compute type 32F), gradients and routing in
// fp32. fp32: everything in fp32, no TF32.
enum class Precision : std::uint8_t { kBf16 = 0, kFp32 = 1 };

const char* precision_name(Precision p);  // "bf16", "fp32"
Precision parse_precision(std::string_view s);  // throws ConfigError

// How an FFN op's row spans (experts) go to cuBLAS: one grouped call
// (cublasGemmGroupedBatchedEx), or one cublasGemmEx per span.
enum class ExpertGemm : std::uint8_t { kGrouped = 0, kPerExpert = 1 };
const char* expert_gemm_name(ExpertGemm g);         // "grouped", "per_expert"
ExpertGemm parse_expert_gemm(std::string_view s);   // throws ConfigError

// Routing (probabilities, expert ids, weights), gradients and optimizer
// states are fp32 whatever the precision: ids must be exact, and gradients
// accumulate over blocks and chunks.
DType buffer_dtype(const plan::Buffer& b, Precision p);
inline std::int64_t buffer_bytes(const plan::Buffer& b, Precision p) {
  return b.rows * b.cols * dtype_bytes(buffer_dtype(b, p));
}

// The device table of a routed layout (device_math.h: layout_stride, layout_row).
std::vector<std::int64_t> layout_table(const plan::RoutedLayout& layout);

// When the plan was built from a synthetic load the gate cannot choose the
// experts (its choice would not match the plan's layout): the executor's
// "planned" routing gives token t the experts ids[t * top_k + slot] so that
// expert e receives exactly counts[e] tokens, every token top_k distinct
// experts. Experts are dealt in order, each over counts[e] consecutive
// (token, slot) cells of a token-major walk of slot columns, so no token gets
// an expert twice (each count is at most `tokens`). Throws moetrace::Error
// where the counts are not a valid top-k routing.
std::vector<std::int32_t> planned_assignment(const std::vector<std::int64_t>& counts,
                                             std::int64_t tokens, int top_k);

// The token block a GateForward op routes (the trace's expert_load.src_rank
// and the key of planned routing): the rank for the expert-parallel variants
// (one block per rank), the block dp_group * micro_batches + micro_batch for
// PPMoE, whose gate runs on every tensor-parallel rank of a stage on the same
// tokens: only the first one counts them. block = -1 for other ops.
struct GateSource {
  int block = -1;
  bool counted = false;
};
GateSource gate_source(const plan::Plan& plan, const plan::Op& op);

// Per-op scratch, carved from its stream's workspace (a stream runs one op at
// a time, so one workspace per stream suffices). Offsets in bytes, 256-aligned.

struct OpWorkspace {
  std::int64_t logits = -1;     // gate: tokens x E fp32 logits / d_logits
  std::int64_t positions = -1;  // permute family: tokens x top_k int32 layout rows
  std::int64_t inverse = -1;    // permute family: total_rows int32 (token * top_k + slot)
  std::int64_t activation = -1; // FFN: rows x hidden gelu(middle)
  std::int64_t gradient = -1;   // FFN backward: rows x hidden d(middle)
  std::int64_t pointers = -1;   // FFN: 3 x kMaxGemmGroups device pointers
  std::int64_t busy = -1;       // timing-only ops of FLOPs alone: 256 x 256 fp32 output
  std::int64_t attention = -1;  // attention: the regions of its AttentionPlan
  std::int64_t plan_search = -1;  // Plan search: the expert counts (E int32)
  std::int64_t bytes = 0;
};

OpWorkspace op_workspace(const plan::Plan& plan, const plan::Op& op, Precision p);
std::int64_t span_rows(const std::vector<plan::RowSpan>& spans);

// The work of a timing-only attention op (plan.h AttentionWork) as the
// executor runs it: unfused attention, as PyTorch's math path computes it
// (a fused FlashAttention kernel would move less memory), in GEMMs (cuBLAS,
// plain or strided-batched over (sequence, head)) and row softmax kernels on
// regions of the op's workspace and its input view, in the input's type.
// Q, K and V are consecutive [sequences x heads, S, head_dim] blocks of the
// QKV region. The scores are made for a slice of the (sequence, head) batch
// at a time, so that their scratch stays under kAttentionScoresBytes.
enum class AttentionRegion : std::uint8_t {
  kInput,      // the op's view: activation (forward) or its gradient (backward), tokens x M
  kX,          // backward: the activation the weight gradient needs, tokens x M
  kWqkv,       // M x 3 h d
  kQkv,        // Q, K, V: 3 x S_total x h d
  kScores,     // slice x S x S
  kProbs,      // backward: the saved probabilities of the slice, slice x S x S
  kContext,    // S_total x h d
  kWo,         // h d x M
  kOut,        // forward: tokens x M
  kDContext,   // backward: S_total x h d
  kDQkv,       // backward: 3 x S_total x h d
  kDWo,        // backward: h d x M
  kDWqkv,      // backward: M x 3 h d
  kDX,         // backward: tokens x M
  kCount
};
struct AttentionOperand {
  AttentionRegion region = AttentionRegion::kInput;
  std::int64_t offset = 0;  // elements
  std::int64_t stride = 0;  // elements between batch items
};
struct AttentionStep {
  enum class Kind : std::uint8_t { kGemm, kSoftmax, kSoftmaxBackward };
  Kind kind = Kind::kGemm;
  RowMajorGemm gemm;         // kGemm: C = alpha op(A) op(B)
  std::int64_t batch = 1;    // kGemm: strided-batched count
  float alpha = 1.0f;
  AttentionOperand a, b, c;  // kSoftmax: rows of c in place; kSoftmaxBackward: c = p (dP - <dP, p>), p = b
  std::int64_t rows = 0, cols = 0;  // softmax
};
struct AttentionPlan {
  std::vector<AttentionStep> steps;
  std::int64_t region_offset[static_cast<int>(AttentionRegion::kCount)] = {};  // bytes in the op's area
  std::int64_t region_elems[static_cast<int>(AttentionRegion::kCount)] = {};   // 0: unused (kInput: the view)
  std::int64_t bytes = 0;  // the workspace area
  double flops() const;    // 2 per multiply-add of the GEMMs
};
// Scratch for one slice of attention scores: 256 MiB, so that 16 emulated
// ranks' attention scores take at most 4 GiB of an 80 GB H100 (the
// unsliced scores of 8 sequences of 2048 tokens x 32 heads are 2 GiB each).
inline constexpr std::int64_t kAttentionScoresBytes = std::int64_t{256} << 20;
AttentionPlan plan_attention(const plan::AttentionWork& w, int elem_bytes);

// A timing-only op known only by its FLOPs keeps its stream busy for about
// them: `reps` GEMMs of 256 x 256 x k on scratch inputs.
struct BusyGemm {
  std::int64_t k = 0;
  std::int64_t reps = 0;
};
inline constexpr std::int64_t kBusyTile = 256;
inline constexpr std::int64_t kBusyMaxK = 4096;
BusyGemm busy_gemm(double flops);

}  // namespace moetrace::cuda
