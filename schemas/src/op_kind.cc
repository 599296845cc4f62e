#include "moetrace/schema/op_kind.h"

#include <array>

namespace moetrace {
namespace {

constexpr std::array kOpKinds = {
#define MOETRACE_X(e, name, cat, moe) OpKindInfo{OpKind::e, name, Category::cat, moe},
    MOETRACE_OP_KINDS(MOETRACE_X)
#undef MOETRACE_X
};

constexpr std::array<std::string_view, kNumCategories> kCategoryNames = {
    "all_to_all", "all_reduce", "other_comm", "expert_compute", "gating", "other_compute", "memcpy"};

}  // namespace

std::string_view category_name(Category c) { return kCategoryNames.at(static_cast<int>(c)); }

std::optional<Category> parse_category(std::string_view name) {
  for (int i = 0; i < kNumCategories; ++i)
    if (kCategoryNames[i] == name) return static_cast<Category>(i);
  return std::nullopt;
}

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::kForward: return "fwd";
    case Phase::kBackward: return "bwd";
    case Phase::kOther: return "other";
    case Phase::kWeightGradient: return "wgrad";
  }
  return "other";
}

std::optional<Phase> parse_phase(std::string_view name) {
  if (name == "fwd") return Phase::kForward;
  if (name == "bwd") return Phase::kBackward;
  if (name == "other") return Phase::kOther;
  if (name == "wgrad") return Phase::kWeightGradient;
  return std::nullopt;
}

std::span<const OpKindInfo> all_op_kinds() { return kOpKinds; }

const OpKindInfo& op_kind_info(OpKind k) { return kOpKinds.at(static_cast<std::size_t>(k)); }

std::optional<OpKind> parse_op_kind(std::string_view name) {
  for (const auto& info : kOpKinds)
    if (info.name == name) return info.kind;
  return std::nullopt;
}

}  // namespace moetrace
