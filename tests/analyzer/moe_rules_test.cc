// MoE recognition's vocabulary: the annotation convention (shared vectors
// with the Python helper) and rule files (the built-in presets and users'
// own, their checks and errors).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "import_test_util.h"
#include "kineto_fixture.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/trace.h"
#include "test_paths.h"

namespace moetrace::testing {
namespace {

using analyzer::Annotation;
using analyzer::AnnotationParse;
using analyzer::parse_annotation;

nlohmann::json vectors() {
  std::ifstream in(std::string(MOETRACE_SOURCE_DIR) + "/tests/data/annotation_names.json");
  return nlohmann::json::parse(in);
}

TEST(Annotation, SharedVectorsParseAsThePythonHelperFormatsThem) {
  const auto v = vectors();
  ASSERT_GE(v["valid"].size(), 12u);
  for (const auto& e : v["valid"]) {
    const auto name = e["name"].get<std::string>();
    Annotation a;
    std::string why;
    ASSERT_EQ(parse_annotation("pytorch", name, a, &why), AnnotationParse::kOk) << name << ": " << why;
    const auto kind = e["kind"].get<std::string>();
    if (kind == "layer") EXPECT_EQ(a.role, analyzer::RangeRole::kLayer) << name;
    else if (kind == "iteration") EXPECT_EQ(a.role, analyzer::RangeRole::kIteration) << name;
    else if (kind == "microbatch") EXPECT_EQ(a.role, analyzer::RangeRole::kMicroBatch) << name;
    else {
      ASSERT_TRUE(a.kind) << name;
      EXPECT_EQ(a.kind, analyzer::parse_moe_kind(kind)) << name;
    }
    EXPECT_EQ(a.layer, e.value("layer", -1)) << name;
    EXPECT_EQ(a.iteration, e.value("iteration", -1)) << name;
    EXPECT_EQ(a.micro_batch, e.value("micro_batch", -1)) << name;
    EXPECT_EQ(a.chunk, e.value("chunk", -1)) << name;
    if (e.contains("phase")) EXPECT_EQ(a.phase, parse_phase(e["phase"].get<std::string>())) << name;
    else EXPECT_FALSE(a.phase) << name;
  }
  for (const auto& e : v["malformed"]) {
    Annotation a;
    std::string why;
    EXPECT_EQ(parse_annotation("", e.get<std::string>(), a, &why), AnnotationParse::kMalformed) << e;
    EXPECT_FALSE(why.empty()) << e;
  }
  for (const auto& e : v["not_annotations"]) {
    Annotation a;
    EXPECT_EQ(parse_annotation("pytorch", e.get<std::string>(), a), AnnotationParse::kNotAnnotation) << e;
  }
}

TEST(Annotation, NvtxDomainMoetraceNeedsNoPrefix) {
  Annotation a;
  EXPECT_EQ(parse_annotation("moetrace", "dispatch layer=2 phase=bwd", a), AnnotationParse::kOk);
  EXPECT_EQ(a.kind, OpKind::kDispatchAllToAll);
  EXPECT_EQ(a.layer, 2);
  EXPECT_EQ(a.phase, Phase::kBackward);
  // moetrace's own op ranges (domain moetrace, names like L0.it0.gate) are not annotations.
  EXPECT_EQ(parse_annotation("moetrace", "L0.it0.gate", a), AnnotationParse::kNotAnnotation);
  // Without the domain, the prefix is needed.
  EXPECT_EQ(parse_annotation("NCCL", "dispatch layer=2", a), AnnotationParse::kNotAnnotation);
}

TEST(MoeRules, BuiltInPresetsParseAndCiteTheirSources) {
  const auto& r = analyzer::builtin_moe_rules();
  ASSERT_FALSE(r.ranges.empty());
  std::set<std::string> presets;
  for (const auto& rule : r.ranges) {
    presets.insert(rule.preset);
    EXPECT_FALSE(rule.source.empty()) << rule.preset << ": " << rule.label;
  }
  for (const char* p : {"pytorch", "megatron-core", "deepspeed", "tutel", "fastmoe", "torchtitan"})
    EXPECT_TRUE(presets.count(p)) << p;
}

// builtin_moe_rules() skips the schema and compiles each pattern on first
// use; the same document must pass the checks of a user's file (schema,
// every pattern compiles, every capture group a rule names exists) and give
// the same rules.
TEST(MoeRules, BuiltInPresetsPassTheChecksOfAUserFile) {
  const auto checked = analyzer::parse_moe_rules(analyzer::builtin_moe_rules_json(), analyzer::kBuiltinMoeRulesSource);
  const auto& lazy = analyzer::builtin_moe_rules();
  ASSERT_EQ(checked.ranges.size(), lazy.ranges.size());
  EXPECT_EQ(checked.origins, lazy.origins);
  EXPECT_EQ(checked.kernels.size(), lazy.kernels.size());
  for (std::size_t i = 0; i < lazy.ranges.size(); ++i) {
    const auto &a = checked.ranges[i], &b = lazy.ranges[i];
    EXPECT_EQ(a.preset, b.preset);
    EXPECT_EQ(a.label, b.label);
    EXPECT_EQ(a.pattern, b.pattern);
    EXPECT_EQ(a.required_prefix, b.required_prefix);
    EXPECT_EQ(a.keywords, b.keywords);
    EXPECT_EQ(a.role, b.role);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.phase, b.phase);
    EXPECT_EQ(a.phase_group, b.phase_group);
    EXPECT_EQ(a.layer.group, b.layer.group);
    EXPECT_EQ(a.layer.value, b.layer.value);
    EXPECT_EQ(a.iteration.group, b.iteration.group);
    EXPECT_EQ(a.iteration.value, b.iteration.value);
    EXPECT_EQ(a.process_scope, b.process_scope);
    EXPECT_EQ(a.regex().mark_count(), b.regex().mark_count()) << b.label;
  }
}

// The literal prefix that lets names skip a rule's regex must never skip a
// name the regex would match.
TEST(MoeRules, RequiredPrefixIsSafe) {
  auto prefix = [](const std::string& pattern) {
    const auto r = analyzer::parse_moe_rules(
        nlohmann::json({{"version", 1}, {"ranges", {{{"label", "x"}, {"name", pattern}, {"role", "layer"}}}}}).dump(),
        "t");
    return r.ranges.at(0).required_prefix;
  };
  EXPECT_EQ(prefix("^nn\\.Module: MoELayer_[0-9]+$"), "nn.Module: MoELayer_");
  EXPECT_EQ(prefix("^autograd::engine::evaluate_function: "), "autograd::engine::evaluate_function: ");
  EXPECT_EQ(prefix("^a|b"), "");           // top-level alternation: "b" matches without "a"
  EXPECT_EQ(prefix("^(x|y)z"), "");        // starts with a group
  EXPECT_EQ(prefix("^abc*d"), "ab");       // c is optional
  EXPECT_EQ(prefix("^ab?"), "a");
  EXPECT_EQ(prefix("^x\\d+"), "x");       // \d is a class, not a literal
  EXPECT_EQ(prefix("MoELayer"), "");       // not anchored
  EXPECT_EQ(prefix("^moe_(dispatch|combine) forward$"), "moe_");
  // A bracket expression opens no group: the | after "[(]" is at the top
  // level, and "cd" matches without "ab". A | inside brackets is a literal.
  EXPECT_EQ(prefix("^ab[(]x|cd"), "");
  EXPECT_EQ(prefix("^ab[|]x"), "ab");
}

// A rule whose every match starts at the name's start is tried there only
// (match_continuous): it must find what a search at every position finds.
TEST(MoeRules, AnchoredRulesMatchAsASearchAtEveryPosition) {
  auto rule = [](const std::string& pattern) {
    return analyzer::parse_moe_rules(
               nlohmann::json({{"version", 1}, {"ranges", {{{"label", "x"}, {"name", pattern}, {"role", "layer"}}}}})
                   .dump(),
               "t")
        .ranges.at(0);
  };
  EXPECT_TRUE(rule("^ProfilerStep#([0-9]+)$").anchored);
  EXPECT_TRUE(rule("^(?:vllm|sglang)::fused_experts$").anchored);  // the | inside a group
  EXPECT_TRUE(rule("^a[|(]b").anchored);                            // | and ( inside brackets
  EXPECT_FALSE(rule("^a|b").anchored);                              // "b" anywhere
  EXPECT_FALSE(rule("^ab[(]x|cd").anchored);                        // the | after "[(]" is at the top level
  EXPECT_FALSE(rule("MoELayer").anchored);
  EXPECT_FALSE(rule("\\^x").anchored);                              // a literal ^
  const std::string names[] = {"ProfilerStep#12", "x ProfilerStep#12", "sglang::fused_experts",
                               "a|b", "ab", "xb", "zcd", "abx", "a(b", "MoELayer_3"};
  for (const char* pattern : {"^ProfilerStep#([0-9]+)$", "^(?:vllm|sglang)::fused_experts$", "^a[|(]b",
                              "^a|b", "^ab[(]x|cd"}) {
    const auto r = rule(pattern);
    for (const auto& n : names) {
      std::smatch all, at_start;
      const bool found = std::regex_search(n, all, r.regex());
      const bool tried = std::regex_search(n, at_start, r.regex(),
                                           r.anchored ? std::regex_constants::match_continuous
                                                      : std::regex_constants::match_default);
      EXPECT_EQ(found, tried) << pattern << " on " << n;
      if (found && tried) {
        EXPECT_EQ(all.position(0), at_start.position(0)) << pattern << " on " << n;
      }
    }
  }
}

// Schedule part names as pipeline schedules write them: the built-in
// "schedules" preset reads the part and the phase marker in any case and
// form; Megatron-Core's schedule nodes keep their own preset.
TEST(MoeRules, ScheduleWordsWithPhaseMarkers) {
  const auto& rules = analyzer::builtin_moe_rules();
  struct Case {
    const char* name;
    std::optional<OpKind> kind;
    std::optional<Phase> phase;
    const char* preset;
  };
  const auto F = Phase::kForward, B = Phase::kBackward, W = Phase::kWeightGradient;
  const Case cases[] = {
      {"dispatch(F)", OpKind::kDispatchAllToAll, F, "schedules"},
      {"combine(B)", OpKind::kCombineAllToAll, B, "schedules"},
      {"mlp(W)", OpKind::kExpertFfn, W, "schedules"},
      {"attn(F)", OpKind::kAttention, F, "schedules"},
      {"Dispatch [bwd]", OpKind::kDispatchAllToAll, B, "schedules"},
      {"MOE_COMBINE_FWD", OpKind::kCombineAllToAll, F, "schedules"},
      {"experts.wgrad", OpKind::kExpertFfn, W, "schedules"},
      {"FFN-backward", OpKind::kExpertFfn, B, "schedules"},
      {"shared_expert(I)", OpKind::kExpertFfn, B, "schedules"},
      {"SharedExperts", OpKind::kExpertFfn, std::nullopt, "schedules"},
      {"Attention/Forward", OpKind::kAttention, F, "schedules"},
      {"self_attn:dgrad", OpKind::kAttention, B, "schedules"},
      {"router (fwd)", OpKind::kGate, F, "schedules"},
      {"Gate_B", OpKind::kGate, B, "schedules"},
      {"moe_dispatch backward", OpKind::kDispatchAllToAll, B, "megatron-core"},
      {"mlp wgrad", OpKind::kExpertFfn, W, "megatron-core"},
      {"attn forward", OpKind::kAttention, F, "megatron-core"},
  };
  for (const auto& c : cases) {
    const auto* hit = [&]() -> const analyzer::RangeRule* {
      for (const auto& r : rules.ranges)
        if (std::regex_search(std::string(c.name), r.regex())) return &r;
      return nullptr;
    }();
    ASSERT_NE(hit, nullptr) << c.name;
    EXPECT_EQ(hit->preset, c.preset) << c.name << " -> " << hit->label;
    EXPECT_EQ(hit->kind, c.kind) << c.name;
    std::smatch m;
    const std::string text(c.name);
    std::regex_search(text, m, hit->regex());
    const auto phase = hit->phase_group > 0 && m[static_cast<std::size_t>(hit->phase_group)].matched
                           ? analyzer::parse_phase_marker(m[static_cast<std::size_t>(hit->phase_group)].str())
                           : hit->phase;
    EXPECT_EQ(phase, c.phase) << c.name;
  }
  // Words that are no schedule part, or a part without its marker where the
  // word alone says nothing of MoE (a dense model's "mlp", "attention").
  for (const char* other : {"mlp", "attention", "gate", "dispatcher(F)", "mlp(X)", "combine_kernel", "redispatch(F)"}) {
    for (const auto& r : rules.ranges) {
      if (r.preset == "schedules") {
        EXPECT_FALSE(std::regex_search(std::string(other), r.regex())) << other << " matched " << r.label;
      }
    }
  }
  EXPECT_EQ(analyzer::parse_phase_marker("Forward"), Phase::kForward);
  EXPECT_EQ(analyzer::parse_phase_marker("WGRAD"), Phase::kWeightGradient);
  EXPECT_EQ(analyzer::parse_phase_marker("x"), std::nullopt);
}

std::string rules_error(const std::string& json) {
  return error_of([&] { analyzer::parse_moe_rules(json, "my_rules.json"); });
}

TEST(MoeRules, BadRulesAreNamed) {
  EXPECT_EQ(rules_error("{not json").rfind("my_rules.json: invalid JSON", 0), 0u);
  // A schema violation names the rule by index and label.
  const auto role = rules_error(R"({"version": 1, "ranges": [
      {"label": "fine", "name": "x", "role": "layer"},
      {"label": "my dispatch", "name": "^disp", "role": "dispatcher"}]})");
  EXPECT_NE(role.find("my_rules.json: "), std::string::npos) << role;
  EXPECT_NE(role.find("[1]"), std::string::npos) << role;
  EXPECT_NE(role.find("\"my dispatch\""), std::string::npos) << role;
  // A pattern that is no regular expression.
  const auto regex = rules_error(R"({"version": 1, "ranges": [{"label": "broken", "name": "([a-", "role": "layer"}]})");
  EXPECT_EQ(regex.rfind("my_rules.json: ranges[0] (\"broken\"): invalid regular expression", 0), 0u) << regex;
  // Numbers libstdc++'s regex compiler would overflow on (a back-reference
  // or a quantifier of more than 9 digits; found by the moe_rules fuzzer):
  // invalid, not undefined behaviour. Small ones are fine.
  for (const char* pattern : {R"(^moe\\44444444444444444444s$)", R"(^a{12345678901}$)", R"(^a{1,99999999999999999999}$)"}) {
    const auto big = rules_error(std::string(R"({"version": 1, "ranges": [{"label": "big", "name": ")") + pattern +
                                 R"(", "role": "layer"}]})");
    EXPECT_EQ(big.rfind("my_rules.json: ranges[0] (\"big\"): invalid regular expression", 0), 0u) << big;
  }
  EXPECT_EQ(rules_error(R"({"version": 1, "ranges": [{"label": "ok", "name": "^(a{1,3})b{2}\\1$", "role": "layer"}]})"),
            "(no error)");
  // A capture group the pattern lacks.
  const auto group = rules_error(
      R"({"version": 1, "ranges": [{"label": "step", "name": "^Step", "role": "iteration", "iteration": "$1"}]})");
  EXPECT_NE(group.find("capture group $1 does not exist"), std::string::npos) << group;
  // An op rule without its kind.
  const auto kind = rules_error(R"({"version": 1, "ranges": [{"label": "k", "name": "x", "role": "op"}]})");
  EXPECT_NE(kind.find("needs a \"kind\""), std::string::npos) << kind;
  // A newer rules version.
  EXPECT_NE(rules_error(R"({"version": 2})"), "(no error)");
}

}  // namespace
}  // namespace moetrace::testing
