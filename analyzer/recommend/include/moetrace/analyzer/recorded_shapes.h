// An MoE layer's sizes read from the input shapes of its GEMMs, as the
// PyTorch profiler records them with record_shapes=True (table input_shapes):
// the router's GEMM maps the hidden size M to the routed experts E (where
// that GEMM is not in the gate, the top-k picks from [T, E] scores), the
// experts' GEMMs map M to the FFN size H (or 2H where gate and up projection
// are one GEMM) and back. Each GEMM is the framework op (aten::mm,
// aten::addmm, aten::linear, aten::matmul, aten::bmm, aten::_grouped_mm, ...)
// whose host range holds the launch of a kernel that recognition placed in
// the layer's router or experts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moetrace/analyzer/gemm_shape.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

struct RecordedLayerShape {
  std::optional<std::int64_t> model_dim;  // M
  std::optional<std::int64_t> hidden;     // H of one expert
  std::optional<bool> gated;              // the up side writes 2H a row (gate and up projections), not H
  std::optional<int> experts;             // E, from the router's output width (or its top-k's scores)
  std::optional<int> top_k;               // rows of the down projections / rows of the router
  std::optional<std::int64_t> tokens;     // rows of one router GEMM (or top-k): the tokens a rank holds
  std::optional<int> elem_bytes;          // the GEMM inputs' element type
  int gemms = 0;                          // GEMMs whose shapes were read
  std::string source;                     // "Input Dims of 12 GEMMs (aten::mm, aten::linear)"
};

// The sizes of MoE layer `layer` (every iteration, forward GEMMs only) from
// the recorded shapes; nothing where the trace recorded none.
RecordedLayerShape recorded_layer_shape(const Trace& trace, int layer);

}  // namespace moetrace::analyzer
