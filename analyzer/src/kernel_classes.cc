#include "moetrace/analyzer/kernel_classes.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "moetrace/schema/error.h"

namespace moetrace::analyzer {
namespace detail {
extern const char* const kKernelClassesJson;  // kernel_classes_data.cc (generated)
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::vector<KernelRule> parse_kernel_rules(std::string_view json, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": invalid JSON (" + e.what() + ")");
  }
  if (!doc.is_object() || !doc.contains("rules") || !doc["rules"].is_array())
    throw Error(source + ": no \"rules\" array");
  std::vector<KernelRule> rules;
  for (std::size_t i = 0; i < doc["rules"].size(); ++i) {
    const auto& r = doc["rules"][i];
    const std::string where = source + ": rule " + std::to_string(i + 1);
    if (!r.is_object() || !r.contains("all_of") || !r["all_of"].is_array() || r["all_of"].empty())
      throw Error(where + ": needs a non-empty \"all_of\" list of substrings");
    KernelRule rule;
    for (const auto& s : r["all_of"]) {
      if (!s.is_string() || s.get<std::string>().empty())
        throw Error(where + ": \"all_of\" holds a non-string or empty entry");
      rule.all_of.push_back(lower(s.get<std::string>()));
    }
    const auto category = r.value("category", std::string());
    const auto c = parse_category(category);
    if (!c || *c == Category::kMemcpy)
      throw Error(where + ": unknown kernel category \"" + category + "\"");
    rule.category = *c;
    rule.label = r.value("label", std::string());
    rule.source = r.value("source", std::string());
    if (r.contains("kind")) {
      const auto name = r["kind"].is_string() ? r["kind"].get<std::string>() : std::string();
      rule.kind = parse_moe_kind(name);
      if (!rule.kind) throw Error(where + ": unknown op kind \"" + name + "\"");
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

const std::vector<KernelRule>& kernel_rules() {
  static const std::vector<KernelRule> rules =
      parse_kernel_rules(detail::kKernelClassesJson, "analyzer/data/kernel_classes.json");
  return rules;
}

std::optional<OpKind> parse_moe_kind(std::string_view name) {
  static constexpr std::pair<std::string_view, OpKind> kKinds[] = {
      {"dispatch", OpKind::kDispatchAllToAll}, {"combine", OpKind::kCombineAllToAll},
      {"expert", OpKind::kExpertFfn},          {"gate", OpKind::kGate},
      {"permute", OpKind::kPermute},           {"unpermute", OpKind::kUnpermute},
      {"all_reduce", OpKind::kMoeAllReduce},   {"offload", OpKind::kOffload},
      {"prefetch", OpKind::kPrefetch},         {"recompute", OpKind::kRecompute},
      {"plan", OpKind::kPlan},                 {"trans", OpKind::kTrans},
      {"agg", OpKind::kAgg},                   {"attention", OpKind::kAttention},
      {"other", OpKind::kOtherOp}};
  for (const auto& [n, k] : kKinds)
    if (n == name) return k;
  return std::nullopt;
}

namespace {

int first_match(const std::vector<KernelRule>& rules, std::string_view kernel_name) {
  const std::string name = lower(kernel_name);
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto& all = rules[i].all_of;
    if (std::all_of(all.begin(), all.end(),
                    [&](const std::string& s) { return name.find(s) != std::string::npos; }))
      return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

int match_kernel_rule(std::string_view kernel_name) { return first_match(kernel_rules(), kernel_name); }

const KernelRule* match_kernel_rule(const std::vector<KernelRule>& rules, std::string_view kernel_name) {
  const int i = first_match(rules, kernel_name);
  return i < 0 ? nullptr : &rules[static_cast<std::size_t>(i)];
}

Category classify_kernel_name(std::string_view kernel_name) {
  const int i = match_kernel_rule(kernel_name);
  return i < 0 ? Category::kOtherCompute : kernel_rules()[static_cast<std::size_t>(i)].category;
}

}  // namespace moetrace::analyzer
