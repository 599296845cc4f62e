// What a user names for the recommenders and the what-ifs, read the same
// way by every front end: the hardware model (`--cost-model` of `recommend`,
// `report` and `replay`, cost_model= of the Python module, the GUI's
// --cost-model) and the model's sizes (`--model`, `--tokens`, and model=,
// tokens= in Python). Free of CLI11, so the module and the GUI compile it too.
#pragma once

#include <cstdint>
#include <memory>
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

// `model_file`: a Hugging Face config.json or Megatron-Core arguments
// (read_model_spec; empty: none); `tokens`: the tokens a rank holds, -1 where
// not given, else positive (a ConfigError naming `tokens_flag` otherwise).
// Sets options.model and options.tokens_per_rank; options.model points into
// the returned spec, which must outlive the options' use.
std::shared_ptr<const analyzer::ModelSpec> apply_model_shape_arg(const std::string& model_file, std::int64_t tokens,
                                                                 analyzer::RecommendOptions& options,
                                                                 std::string_view tokens_flag = "--tokens ");

}  // namespace moetrace::cli
