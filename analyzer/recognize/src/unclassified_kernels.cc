// The largest kernels no rule classifies (moe_recognition.h): what a rule of
// the user's would have to name, shown by the report's recognition section.
#include <algorithm>
#include <map>

#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/moe_recognition.h"

namespace moetrace::analyzer {

std::vector<UnclassifiedKernel> largest_unclassified_kernels(const Trace& trace, std::size_t n) {
  std::map<std::int64_t, UnclassifiedKernel> by_name;
  std::map<std::int64_t, bool> has_rule;  // by name id: some kernel rule matches
  for (const auto& a : trace.activities) {
    if (a.type != ActivityType::kKernel || !a.name.valid()) continue;
    if (a.op >= 0) {
      const auto kind = trace.ops[static_cast<std::size_t>(a.op)].kind;
      if (kind != OpKind::kOtherOp && kind != OpKind::kMoeOther) continue;
    }
    const auto id = static_cast<std::size_t>(a.name.value);
    const bool classified = id < trace.kernel_category.size() && trace.kernel_category[id] >= 0 &&
                            static_cast<Category>(trace.kernel_category[id]) != Category::kOtherCompute;
    if (classified) continue;
    auto [rule, fresh] = has_rule.try_emplace(a.name.value, false);
    if (fresh) rule->second = match_kernel_rule(trace.str(a.name)) >= 0;
    if (rule->second) continue;
    auto& k = by_name[a.name.value];
    k.name = std::string(trace.str(a.name));
    ++k.count;
    k.gpu_ns += a.duration();
  }
  std::vector<UnclassifiedKernel> out;
  for (auto& [id, k] : by_name) out.push_back(std::move(k));
  return largest_first(std::move(out), n);
}

std::vector<UnclassifiedKernel> largest_first(std::vector<UnclassifiedKernel> kernels, std::size_t n) {
  std::sort(kernels.begin(), kernels.end(), [](const auto& a, const auto& b) {
    return a.gpu_ns != b.gpu_ns ? a.gpu_ns > b.gpu_ns : a.name < b.name;
  });
  if (kernels.size() > n) kernels.resize(n);
  return kernels;
}

}  // namespace moetrace::analyzer
