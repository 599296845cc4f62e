// What colour an event gets. The timeline colours by what a performance
// engineer asks first of an MoE step: where the all-to-all is, where the
// all-reduce is, which copies are offload/prefetch (mpipemoe's memory reuse)
// and which communication moves expert parameters (Pro-Prophet's Trans/Agg).
// Colours are plain RGB here; the painter turns them into QColors.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "moetrace/analyzer/trace.h"

namespace moetrace::gui {

enum class ColourClass : std::uint8_t {
  kAllToAll,         // dispatch / combine / re-communicate
  kAllReduce,        // PPMoE MoE all-reduce, tensor-parallel, gradient
  kTransAgg,         // Pro-Prophet parameter Trans and gradient Agg
  kOtherComm,        // pipeline send/recv, unclassified NCCL
  kExpertCompute,    // expert FFN, recompute
  kGating,           // gate GEMM, softmax, top-k
  kOtherCompute,     // permute, attention, dense layers, optimizer, Plan
  kCopy,             // memcpy/memset that is not offload/prefetch
  kOffloadPrefetch,  // mpipemoe D2H offload and H2D prefetch
  kForwardSpan,      // iteration / layer / chunk spans of the forward pass
  kBackwardSpan,     // ... of the backward pass
  kOtherSpan,        // spans with no phase (a whole iteration)
  kMemory,           // the memory counter
  kApiCall,          // CUDA runtime / driver calls on a CPU thread
  kNvtx,             // NVTX ranges on a CPU thread
  kCount
};
inline constexpr int kNumColourClasses = static_cast<int>(ColourClass::kCount);

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

Rgb colour_of(ColourClass c);
std::string_view colour_class_name(ColourClass c);

ColourClass colour_class(OpKind kind);
// The colour of a breakdown category (bars, legends).
ColourClass colour_class(Category category);
// An activity takes the colour of the op that launched it; a kernel no op
// claims is classified by its name (analyzer::classify_activity).
ColourClass colour_class(const analyzer::Trace& trace, const analyzer::Activity& a);
ColourClass span_colour_class(Phase phase, bool has_phase);

struct LegendEntry {
  ColourClass colour;
  std::string_view label;
};
// The classes events can take, in legend order (spans and memory last).
std::span<const LegendEntry> legend();

}  // namespace moetrace::gui
