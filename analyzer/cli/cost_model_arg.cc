#include "cost_model_arg.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
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

}  // namespace moetrace::cli
