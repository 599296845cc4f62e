#include "cost_model_arg.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "moetrace/analyzer/recommend.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/cost_model.h"

namespace moetrace::cli {

namespace {

sim::CostModel load_cost_model_arg(const std::string& arg) {
  if (std::filesystem::exists(arg)) {
    std::ifstream in(arg, std::ios::binary);
    if (!in) throw Error(fmt::format("{}: cannot read the cost model", arg));
    std::stringstream s;
    s << in.rdbuf();
    try {
      return sim::cost_model_from_json(s.str());
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: {}", arg, e.what()));
    }
  }
  return sim::cost_model_preset(arg);  // an unknown name fails, listing the presets
}

}  // namespace

void apply_cost_model_arg(const std::string& arg, analyzer::RecommendOptions& ro, std::string_view flag) {
  if (arg.empty()) return;
  if (arg == "fitted") {
    ro.prefer_fitted = true;
    return;
  }
  ro.cost_model = load_cost_model_arg(arg);
  ro.cost_model_source = fmt::format("cost model {} ({} {})", ro.cost_model->name, flag, arg);
}

std::shared_ptr<const analyzer::ModelSpec> apply_model_shape_arg(const std::string& model_file, std::int64_t tokens,
                                                                 analyzer::RecommendOptions& options,
                                                                 std::string_view tokens_flag) {
  if (tokens != -1 && tokens <= 0)
    throw ConfigError(fmt::format("{}{}: a positive whole number of tokens a rank holds", tokens_flag, tokens));
  std::shared_ptr<const analyzer::ModelSpec> spec;
  if (!model_file.empty()) spec = std::make_shared<const analyzer::ModelSpec>(analyzer::read_model_spec(model_file));
  options.model = spec.get();
  options.tokens_per_rank = tokens;
  return spec;
}

}  // namespace moetrace::cli
