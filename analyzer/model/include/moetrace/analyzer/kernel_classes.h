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

// A rule matches a kernel name when every condition it has holds:
// - all_of: lower-case substrings that must all occur in the whole name;
// - function: words that must all occur in the function's own name (the last
//   part of its qualified name, without template arguments and parameters);
//   with function_exact, the function's name is exactly those words;
// - scope_any: one of these words occurs in the qualified name (namespaces or
//   function), so that a library's kernels are known under any namespace a
//   fork or a vendored copy gives them.
// Words are compared without case and separators: a rule word matches a run
// of consecutive words of one part of the name, so "all_to_all" matches
// allToAll, AllToAll, all_to_all and alltoall, and "internode_ll" matches
// internode_ll (kernel_name_words).
struct KernelRule {
  std::vector<std::string> all_of;     // lower-case
  std::vector<std::string> function;   // words, lower-case, separators removed
  bool function_exact = false;
  std::vector<std::string> scope_any;  // words, lower-case, separators removed
  Category category = Category::kOtherCompute;
  std::string label;                // what the rule recognises
  std::string source;               // where the name comes from (framework, file, version)
  // The MoE op the kernel is, where its name says (a DeepEP dispatch kernel,
  // a grouped expert GEMM); MoE recognition (moe_recognition.h) uses it.
  std::optional<OpKind> kind;

  // The label, else the rule's first condition: how reports name the rule.
  const std::string& display_name() const {
    return !label.empty() ? label : !all_of.empty() ? all_of.front() : !function.empty() ? function.front()
                                                                                         : scope_any.front();
  }
};

// An op kind of the annotation convention and the rule files ("dispatch",
// "combine", "expert", "gate", "permute", "unpermute", "all_reduce",
// "offload", "prefetch", "recompute", "plan", "trans", "agg", "attention",
// "other"); nullopt for any other name.
std::optional<OpKind> parse_moe_kind(std::string_view name);

// The words of a kernel name, per part of its qualified name (namespaces,
// then the function; the last part is the function): "void
// acme::internode_ll::dispatch<true, 7>(int4*, ...)" gives {{"acme"},
// {"internode", "ll"}, {"dispatch"}}. Return type, template arguments,
// parameters and "(anonymous namespace)" are dropped; words split at
// non-alphanumerics and at case changes (moeA2ADispatchKernel: moe, a2a,
// dispatch, kernel), lower-case. Itanium-mangled names (_ZN...) are read
// too.
std::vector<std::vector<std::string>> kernel_name_words(std::string_view kernel_name);

// A name as rules compare names: lower-case, alphanumerics only
// ("all_to_allv" and "AllToAllV" are both "alltoallv").
std::string comparable_word(std::string_view s);

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

// For a kernel whose name looks like MoE work (moe, expert, topk, routing,
// dispatch, combine, permute in it) and that no rule classifies: a kernel
// rule, as one line of JSON for the "kernels" list of a --moe-rules file,
// that would classify it under any namespace (the words of its function's
// name), with the category and MoE kind its words suggest. Empty for any
// other name.
std::string suggested_kernel_rule(std::string_view kernel_name);

// Parses a rules document (the format of kernel_classes.json); throws
// moetrace::Error naming `source` on a malformed one.
std::vector<KernelRule> parse_kernel_rules(std::string_view json, const std::string& source);

}  // namespace moetrace::analyzer
