#include "moetrace/gui/palette.h"

#include <array>

#include "moetrace/analyzer/breakdown.h"

namespace moetrace::gui {
namespace {

struct ClassInfo {
  Rgb rgb;
  std::string_view name;
};

// Hues far apart for the classes that matter most (all-to-all orange against
// expert blue, all-reduce red); spans stay pale so events on top stand out.
constexpr std::array<ClassInfo, kNumColourClasses> kClasses{{
    {{0xF2, 0x8E, 0x2B}, "all-to-all"},
    {{0xD6, 0x27, 0x28}, "all-reduce"},
    {{0x94, 0x67, 0xBD}, "Trans / Agg"},
    {{0xE3, 0x77, 0xC2}, "other communication"},
    {{0x1F, 0x77, 0xB4}, "expert compute"},
    {{0x2C, 0xA0, 0x2C}, "gating"},
    {{0x7F, 0x8C, 0x99}, "other compute"},
    {{0xBC, 0xBD, 0x22}, "copies"},
    {{0x17, 0xBE, 0xCF}, "offload / prefetch"},
    {{0xAE, 0xC7, 0xE8}, "forward span"},
    {{0xE7, 0xC9, 0xA9}, "backward span"},
    {{0xD0, 0xD0, 0xD0}, "iteration span"},
    {{0x4C, 0xAF, 0x50}, "memory in use"},
    {{0xB3, 0x9D, 0xDB}, "API call"},
    {{0xC5, 0xCA, 0x8C}, "NVTX range"},
}};

constexpr std::array<LegendEntry, kNumColourClasses> kLegend{{
    {ColourClass::kAllToAll, "all-to-all"},
    {ColourClass::kAllReduce, "all-reduce"},
    {ColourClass::kTransAgg, "Trans / Agg"},
    {ColourClass::kOtherComm, "other comm."},
    {ColourClass::kExpertCompute, "expert"},
    {ColourClass::kGating, "gating"},
    {ColourClass::kOtherCompute, "other compute"},
    {ColourClass::kCopy, "copies"},
    {ColourClass::kOffloadPrefetch, "offload / prefetch"},
    {ColourClass::kForwardSpan, "fwd span"},
    {ColourClass::kBackwardSpan, "bwd span"},
    {ColourClass::kOtherSpan, "iteration"},
    {ColourClass::kMemory, "memory in use"},
    {ColourClass::kApiCall, "API call"},
    {ColourClass::kNvtx, "NVTX"},
}};

}  // namespace

ColourClass colour_class(Category c) {
  switch (c) {
    case Category::kAllToAll: return ColourClass::kAllToAll;
    case Category::kAllReduce: return ColourClass::kAllReduce;
    case Category::kOtherComm: return ColourClass::kOtherComm;
    case Category::kExpertCompute: return ColourClass::kExpertCompute;
    case Category::kGating: return ColourClass::kGating;
    case Category::kOtherCompute: return ColourClass::kOtherCompute;
    case Category::kMemcpy: return ColourClass::kCopy;
  }
  return ColourClass::kOtherCompute;
}

Rgb colour_of(ColourClass c) {
  const auto i = static_cast<std::size_t>(c);
  return i < kClasses.size() ? kClasses[i].rgb : Rgb{0x80, 0x80, 0x80};
}

std::string_view colour_class_name(ColourClass c) {
  const auto i = static_cast<std::size_t>(c);
  return i < kClasses.size() ? kClasses[i].name : std::string_view("?");
}

ColourClass colour_class(OpKind kind) {
  switch (kind) {
    case OpKind::kTrans:
    case OpKind::kAgg: return ColourClass::kTransAgg;
    case OpKind::kOffload:
    case OpKind::kPrefetch: return ColourClass::kOffloadPrefetch;
    default: return colour_class(op_category(kind));
  }
}

ColourClass colour_class(const analyzer::Trace& trace, const analyzer::Activity& a) {
  if (a.op >= 0 && static_cast<std::size_t>(a.op) < trace.ops.size()) {
    const auto c = colour_class(trace.ops[static_cast<std::size_t>(a.op)].kind);
    // A kernel launched inside an op (e.g. a GEMM inside Trans) keeps the
    // op's colour; copies inside compute ops stay copies.
    if (a.type != analyzer::ActivityType::kKernel && c != ColourClass::kOffloadPrefetch &&
        c != ColourClass::kTransAgg && c != ColourClass::kAllToAll && c != ColourClass::kAllReduce &&
        c != ColourClass::kOtherComm)
      return ColourClass::kCopy;
    return c;
  }
  return colour_class(analyzer::classify_activity(trace, a));
}

ColourClass span_colour_class(Phase phase, bool has_phase) {
  if (!has_phase) return ColourClass::kOtherSpan;
  switch (phase) {
    case Phase::kForward: return ColourClass::kForwardSpan;
    case Phase::kBackward:
    case Phase::kWeightGradient: return ColourClass::kBackwardSpan;
    case Phase::kOther: return ColourClass::kOtherSpan;
  }
  return ColourClass::kOtherSpan;
}

std::span<const LegendEntry> legend() { return kLegend; }

}  // namespace moetrace::gui
