// Classification of GPU kernels by name, for kernels no MoE op range claims
// (imported Nsight Systems / PyTorch-profiler traces, kernels outside every
// op range). The rules live in one data file, analyzer/data/kernel_classes.json,
// compiled into the analyzer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/schema/op_kind.h"

namespace moetrace::analyzer {

struct KernelRule {
  std::vector<std::string> all_of;  // lower-case substrings that must all occur in the name
  Category category = Category::kOtherCompute;
  std::string label;                // what the rule recognises
  std::string source;               // where the name comes from (framework, file, version)
  // The MoE op the kernel is, where its name says (a DeepEP dispatch kernel,
  // a grouped expert GEMM); MoE recognition (moe_recognition.h) uses it.
  std::optional<OpKind> kind;
};

// An op kind of the annotation convention and the rule files ("dispatch",
// "combine", "expert", "gate", "permute", "unpermute", "all_reduce",
// "offload", "prefetch", "recompute", "plan", "trans", "agg", "attention",
// "other"); nullopt for any other name.
std::optional<OpKind> parse_moe_kind(std::string_view name);

// The rules of analyzer/data/kernel_classes.json, in order.
const std::vector<KernelRule>& kernel_rules();

// Index into kernel_rules() of the first rule that matches the name
// (case-insensitively), or -1 where none does.
int match_kernel_rule(std::string_view kernel_name);
// The first rule of `rules` that matches, or nullptr.
const KernelRule* match_kernel_rule(const std::vector<KernelRule>& rules, std::string_view kernel_name);

// The category of a kernel of this name: the first matching rule's, else
// other compute.
Category classify_kernel_name(std::string_view kernel_name);

// Parses a rules document (the format of kernel_classes.json); throws
// moetrace::Error naming `source` on a malformed one.
std::vector<KernelRule> parse_kernel_rules(std::string_view json, const std::string& source);

}  // namespace moetrace::analyzer
