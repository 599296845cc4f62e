// The hardware model a user names for the recommenders: `--cost-model` of
// `recommend` and `report`, and cost_model= of the Python module
// (python/moetrace_bindings.cc). Free of CLI11, so the module compiles it too.
#pragma once

#include <string>
#include <string_view>

namespace moetrace::analyzer {
struct RecommendOptions;  // moetrace/analyzer/recommend.h (moetrace::recommend, not in the CUDA plugin)
struct ModelSpec;         // moetrace/analyzer/model_spec.h (the same)
}

namespace moetrace::cli {

// `arg`: a simulator preset name, a cost-model JSON file (e.g. from `moetrace
// fit`), or "fitted" (fit it from the trace); empty: nothing changes. `flag`
// is how the user gave it, for the recommendations' evidence.
void apply_cost_model_arg(const std::string& arg, analyzer::RecommendOptions& options,
                          std::string_view flag = "--cost-model");

}  // namespace moetrace::cli
