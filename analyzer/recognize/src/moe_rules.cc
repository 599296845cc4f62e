// The annotation convention's parser and the MoE recognition rule files
// (moe_recognition.h): the built-in presets, a user's file, their validation.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/schema/ascii.h"
#include "moetrace/schema/error.h"

namespace moetrace::analyzer {
namespace detail {
extern const char* const kMoeRulesJson;        // moe_rules_data.cc (generated)
extern const char* const kMoeRulesSchemaJson;  // moe_rules_data.cc (generated)
}  // namespace detail

namespace {

constexpr std::string_view kPrefix = "moetrace:";

// A non-negative decimal int32 without leading zeros ("0", "17"; not "017").
bool parse_count(std::string_view text, std::int32_t& out) {
  if (text.empty() || text.size() > 10 || (text.size() > 1 && text[0] == '0')) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  std::int64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  if (v > INT32_MAX) return false;
  out = static_cast<std::int32_t>(v);
  return true;
}

bool fail(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

// "key=value" fields after the kind; false (with `why`) on a malformed one.
bool parse_fields(std::string_view rest, Annotation& a, std::string* why) {
  bool seen[5] = {false, false, false, false, false};
  while (!rest.empty()) {
    if (rest.front() != ' ') return fail(why, "fields are separated by single spaces");
    rest.remove_prefix(1);
    const auto end = rest.find(' ');
    const auto field = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
    const auto eq = field.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return fail(why, fmt::format("field \"{}\" is not key=value", field));
    const auto key = field.substr(0, eq), value = field.substr(eq + 1);
    static constexpr std::string_view kKeys[] = {"layer", "iter", "mb", "chunk", "phase"};
    int k = -1;
    for (int i = 0; i < 5; ++i)
      if (kKeys[i] == key) k = i;
    if (k < 0) return fail(why, fmt::format("unknown key \"{}\" (layer, iter, mb, chunk, phase)", key));
    if (seen[k]) return fail(why, fmt::format("key \"{}\" given twice", key));
    seen[k] = true;
    if (k == 4) {
      if (value == "fwd") a.phase = Phase::kForward;
      else if (value == "bwd") a.phase = Phase::kBackward;
      else if (value == "wgrad") a.phase = Phase::kWeightGradient;
      else return fail(why, fmt::format("phase \"{}\" is not fwd, bwd or wgrad", value));
      continue;
    }
    std::int32_t* slots[] = {&a.layer, &a.iteration, &a.micro_batch, &a.chunk};
    if (!parse_count(value, *slots[k]))
      return fail(why, fmt::format("{}=\"{}\" is not a non-negative integer", key, value));
  }
  return true;
}

}  // namespace

AnnotationParse parse_annotation(std::string_view domain, std::string_view name, Annotation& out,
                                 std::string* why) {
  std::string_view body;
  if (name.starts_with(kPrefix)) body = name.substr(kPrefix.size());
  else if (domain == "moetrace") body = name;
  else return AnnotationParse::kNotAnnotation;
  const auto sp = body.find(' ');
  const auto kind = body.substr(0, sp);
  Annotation a;
  if (kind == "layer") a.role = RangeRole::kLayer;
  else if (kind == "iteration") a.role = RangeRole::kIteration;
  else if (kind == "microbatch") a.role = RangeRole::kMicroBatch;
  else if (auto k = parse_moe_kind(kind)) a.kind = k;
  else if (domain == "moetrace" && !name.starts_with(kPrefix))
    return AnnotationParse::kNotAnnotation;  // moetrace's own op ranges: names like "L0.it0.gate"
  else {
    fail(why, fmt::format("unknown kind \"{}\"", kind));
    return AnnotationParse::kMalformed;
  }
  if (sp != std::string_view::npos && !parse_fields(body.substr(sp), a, why))
    return AnnotationParse::kMalformed;
  out = a;
  return AnnotationParse::kOk;
}

namespace {

// `key` of a rule (the schema has checked its form: a non-negative integer or
// "$N"); a number past int32 is an error naming the rule, not a wrapped value.
RuleCoordinate coordinate(const nlohmann::json& r, const char* key, const std::string& named) {
  RuleCoordinate c;
  if (!r.contains(key)) return c;
  const auto& v = r[key];
  if (v.is_number_integer()) {
    const auto n = v.get<std::int64_t>();
    if (n < 0 || n > INT32_MAX) throw Error(fmt::format("{}: \"{}\" {} is out of range", named, key, v.dump()));
    c.value = static_cast<std::int32_t>(n);
    return c;
  }
  const auto text = v.get<std::string>();
  const auto digits = std::string_view(text).substr(1);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), c.group);
  if (ec != std::errc() || end != digits.data() + digits.size())
    throw Error(fmt::format("{}: \"{}\": capture group {} does not exist", named, key, text));
  return c;
}

// Whether every match of an ECMAScript pattern starts at the name's start:
// it begins with ^ and has no alternation outside groups (whose other
// branch could match anywhere). Escapes and bracket expressions are stepped
// over: "[(|]" holds no group and no alternation.
bool anchored_at_start(std::string_view pattern) {
  if (pattern.empty() || pattern[0] != '^') return false;
  int depth = 0;
  for (std::size_t i = 1; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[') {  // up to its closing ] (ECMAScript: "[]" is an empty class)
      for (++i; i < pattern.size() && pattern[i] != ']'; ++i)
        if (pattern[i] == '\\') ++i;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      return false;
    }
  }
  return true;
}

// The literal a pattern anchored at its start begins with, up to its first
// metacharacter; empty where the pattern is not anchored, starts with a
// group or class, or has an alternation outside groups (which could match
// without the prefix). A literal followed by a quantifier is dropped.
std::string required_prefix(std::string_view pattern) {
  if (!anchored_at_start(pattern)) return {};
  std::string out;
  for (std::size_t i = 1; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\') {
      if (i + 1 >= pattern.size()) break;
      const char e = pattern[i + 1];
      if (std::isalnum(static_cast<unsigned char>(e))) break;  // \d, \w, \b, ...: a class or assertion
      c = e;
      ++i;
    } else if (std::string_view(".[](){}*+?|$^").find(c) != std::string_view::npos) {
      if ((c == '*' || c == '?' || c == '{') && !out.empty()) out.pop_back();
      break;
    }
    if (i + 1 < pattern.size() && std::string_view("*?{").find(pattern[i + 1]) != std::string_view::npos) break;
    out += c;
  }
  return out;
}

// `check`: compile the pattern now and check the capture groups the rule
// names against it (a user's file); the built-in presets skip both, their
// patterns compiling on first use (tests/analyzer/moe_recognition_test.cc
// parses them with the checks).
RangeRule parse_range_rule(const nlohmann::json& r, const std::string& preset, const std::string& where,
                           bool check) {
  RangeRule rule;
  rule.preset = preset;
  rule.label = r.at("label").get<std::string>();
  rule.source = r.value("source", std::string());
  rule.domain = r.value("domain", std::string());
  rule.pattern = r.at("name").get<std::string>();
  const auto named = fmt::format("{} (\"{}\")", where, rule.label);
  rule.ignore_case = r.value("ignore_case", false);
  if (check) try {
      (void)rule.regex();
    } catch (const std::regex_error& e) {
      throw Error(fmt::format("{}: invalid regular expression \"{}\" ({})", named, rule.pattern, e.what()));
    }
  // The prefix test compares case: without it where the rule ignores case.
  if (!rule.ignore_case) rule.required_prefix = required_prefix(rule.pattern);
  rule.anchored = anchored_at_start(rule.pattern);
  if (r.contains("keywords"))
    for (const auto& k : r["keywords"]) {
      rule.keywords.push_back(to_ascii_lower(k.get<std::string>()));
    }
  const auto role = r.at("role").get<std::string>();
  if (role == "op") rule.role = RangeRole::kOp;
  else if (role == "layer") rule.role = RangeRole::kLayer;
  else if (role == "iteration") rule.role = RangeRole::kIteration;
  else if (role == "microbatch") rule.role = RangeRole::kMicroBatch;
  else if (role == "phase") rule.role = RangeRole::kPhase;
  else if (role == "iteration_end") rule.role = RangeRole::kIterationEnd;
  else
    throw Error(named + ": unknown role \"" + role + "\" (op, layer, iteration, iteration_end, microbatch, phase)");
  if (r.contains("kind")) rule.kind = parse_moe_kind(r["kind"].get<std::string>());
  if (rule.role == RangeRole::kOp && !rule.kind)
    throw Error(named + ": a rule of role \"op\" needs a \"kind\"");
  if (rule.role != RangeRole::kOp && rule.kind)
    throw Error(named + ": \"kind\" is for rules of role \"op\"");
  rule.layer = coordinate(r, "layer", named);
  rule.iteration = coordinate(r, "iteration", named);
  rule.micro_batch = coordinate(r, "micro_batch", named);
  rule.chunk = coordinate(r, "chunk", named);
  if (r.contains("phase")) {
    const auto phase = r["phase"].get<std::string>();
    if (phase.starts_with('$')) rule.phase_group = coordinate(r, "phase", named).group;
    else rule.phase = parse_phase(phase);
  }
  if (rule.role == RangeRole::kPhase && !rule.phase)
    throw Error(named + ": a rule of role \"phase\" needs a \"phase\"");
  rule.process_scope = r.value("scope", std::string("thread")) == "process";
  if (check)
    for (const int group : {rule.layer.group, rule.iteration.group, rule.micro_batch.group, rule.chunk.group, rule.phase_group})
      if (group > static_cast<int>(rule.regex().mark_count()))
        throw Error(fmt::format("{}: capture group ${} does not exist in \"{}\"", named, group, rule.pattern));
  return rule;
}

}  // namespace

std::optional<Phase> parse_phase_marker(std::string_view marker) {
  const std::string m = to_ascii_lower(marker);
  if (m == "f" || m == "fwd" || m == "forward") return Phase::kForward;
  if (m == "b" || m == "i" || m == "bwd" || m == "dgrad" || m == "backward") return Phase::kBackward;
  if (m == "w" || m == "wgrad" || m == "weight") return Phase::kWeightGradient;
  return std::nullopt;
}

namespace {

const valijson::Schema& rules_schema() {
  static const auto schema = [] {
    auto doc = std::make_unique<nlohmann::json>(nlohmann::json::parse(detail::kMoeRulesSchemaJson));
    auto s = std::make_unique<valijson::Schema>();
    valijson::SchemaParser parser;
    valijson::adapters::NlohmannJsonAdapter adapter(*doc);
    parser.populateSchema(adapter, *s);
    return std::pair{std::move(doc), std::move(s)};
  }();
  return *schema.second;
}

// "rules file: ranges[3]: ..." for the first schema violations.
void validate(const nlohmann::json& doc, const std::string& source) {
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter adapter(doc);
  if (validator.validate(rules_schema(), adapter, &results)) return;
  // The deepest context is the most specific; report it with the rule's label.
  valijson::ValidationResults::Error e, best;
  std::size_t depth = 0;
  while (results.popError(e))
    if (e.context.size() > depth) {
      depth = e.context.size();
      best = e;
    }
  std::string where, label;
  const nlohmann::json* node = &doc;
  for (const auto& c : best.context) {
    if (c == "<root>") continue;
    where += c;
    std::string key = c;
    if (key.size() > 2 && key.front() == '[') key = key.substr(1, key.size() - 2);
    if (!node) continue;
    if (node->is_array() && !key.empty() && std::isdigit(static_cast<unsigned char>(key[0])) &&
        std::stoul(key) < node->size()) {
      node = &(*node)[std::stoul(key)];
      if (node->is_object() && node->contains("label") && (*node)["label"].is_string())
        label = (*node)["label"].get<std::string>();
    } else if (node->is_object()) {
      const auto unquoted = key.size() > 2 && key.front() == '"' ? key.substr(1, key.size() - 2) : key;
      node = node->contains(unquoted) ? &(*node)[unquoted] : nullptr;
    } else {
      node = nullptr;
    }
  }
  throw Error(fmt::format("{}: {}{}: {}", source, where.empty() ? "document" : where,
                          label.empty() ? "" : " (\"" + label + "\")", best.description));
}

// `check`: validate the document against the schema and compile each
// pattern now (parse_moe_rules); the built-in presets skip both at run time
// (builtin_moe_rules), the tests parse them with both.
MoeRules parse_rules(std::string_view json, const std::string& source, bool check) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: invalid JSON ({})", source, e.what()));
  }
  if (check) validate(doc, source);
  MoeRules rules;
  rules.origins.push_back(source);
  auto add = [&](const nlohmann::json& list, const std::string& preset, const std::string& where) {
    for (std::size_t i = 0; i < list.size(); ++i)
      rules.ranges.push_back(
          parse_range_rule(list[i], preset, fmt::format("{}: {}[{}]", source, where, i), check));
  };
  const auto own = doc.value("name", std::filesystem::path(source).filename().string());
  if (doc.contains("ranges")) add(doc["ranges"], own, "ranges");
  if (doc.contains("presets"))
    for (std::size_t p = 0; p < doc["presets"].size(); ++p)
      add(doc["presets"][p]["ranges"], doc["presets"][p]["name"].get<std::string>(),
          fmt::format("presets[{}].ranges", p));
  if (doc.contains("kernels")) {
    nlohmann::json k{{"rules", doc["kernels"]}};
    rules.kernels = parse_kernel_rules(k.dump(), source + ": kernels");
  }
  return rules;
}

// libstdc++'s regex compiler reads the number of a back-reference (\N) or a
// brace quantifier ({n,m}) into a long without a check: one of 19 digits
// overflows (undefined behaviour, found by the moe_rules fuzzer on
// "\\4444444444444444444"). No rule needs more than a few: a pattern with a
// number of more than 9 digits is refused as invalid before it reaches the
// compiler.
void check_regex_numbers(std::string_view pattern) {
  constexpr std::size_t kMaxDigits = 9;
  auto digits_at = [&](std::size_t i) {
    std::size_t n = 0;
    while (i + n < pattern.size() && pattern[i + n] >= '0' && pattern[i + n] <= '9') ++n;
    return n;
  };
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      if (digits_at(i + 1) > kMaxDigits) throw std::regex_error(std::regex_constants::error_backref);
      ++i;  // the escaped character
    } else if (pattern[i] == '{') {
      for (std::size_t j = i + 1; j < pattern.size() && pattern[j] != '}'; ++j) {
        const std::size_t n = digits_at(j);
        if (n > kMaxDigits) throw std::regex_error(std::regex_constants::error_badbrace);
        if (n == 0 && pattern[j] != ',') break;  // not a quantifier: a literal brace
        j += n == 0 ? 0 : n - 1;
      }
    }
  }
}

}  // namespace

const std::regex& RangeRule::regex() const {
  std::call_once(compiled_->once, [this] {
    check_regex_numbers(pattern);
    auto flags = std::regex::ECMAScript | std::regex::optimize;
    if (ignore_case) flags |= std::regex::icase;
    compiled_->regex = std::regex(pattern, flags);
  });
  return compiled_->regex;
}

MoeRules parse_moe_rules(std::string_view json, const std::string& source) {
  return parse_rules(json, source, true);
}

const MoeRules& builtin_moe_rules() {
  static const MoeRules rules = parse_rules(detail::kMoeRulesJson, kBuiltinMoeRulesSource, false);
  return rules;
}

std::string_view builtin_moe_rules_json() { return detail::kMoeRulesJson; }

MoeRules load_moe_rules(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the rules file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_moe_rules(text.str(), path);
}

MoeRules combine_moe_rules(const MoeRules* user) {
  if (!user) return builtin_moe_rules();
  MoeRules all = *user;
  const auto& builtin = builtin_moe_rules();
  all.ranges.insert(all.ranges.end(), builtin.ranges.begin(), builtin.ranges.end());
  all.origins.insert(all.origins.end(), builtin.origins.begin(), builtin.origins.end());
  return all;
}

}  // namespace moetrace::analyzer
