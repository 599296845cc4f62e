#include "moetrace/analyzer/kernel_classes.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "moetrace/schema/ascii.h"
#include "moetrace/schema/error.h"

namespace moetrace::analyzer {
namespace detail {
extern const char* const kKernelClassesJson;  // kernel_classes_data.cc (generated)
}

std::string comparable_word(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (ascii_alnum(c)) out += ascii_lower(c);
  return out;
}

namespace {

// A text searched for many short words (a kernel name against every rule's
// words, 40-80 searches of a name of some hundred bytes): the pairs of
// adjacent bytes it holds, hashed into a bit set, rule out most words before
// any scan of the text (a word can occur only where each of its pairs does).
class SearchedText {
 public:
  explicit SearchedText(std::string text) : text_(std::move(text)) {
    for (std::size_t i = 1; i < text_.size(); ++i) set(pair_hash(text_[i - 1], text_[i]));
  }
  bool contains(std::string_view word) const {
    for (std::size_t i = 1; i < word.size(); ++i)
      if (!has(pair_hash(word[i - 1], word[i]))) return false;
    return std::string_view(text_).find(word) != std::string_view::npos;
  }

 private:
  static constexpr std::size_t kBits = 4096;
  static std::size_t pair_hash(char a, char b) {
    return ((static_cast<unsigned char>(a) * 67u) ^ static_cast<unsigned char>(b) * 131u) % kBits;
  }
  void set(std::size_t h) { bits_[h / 64] |= std::uint64_t{1} << (h % 64); }
  bool has(std::size_t h) const { return (bits_[h / 64] >> (h % 64)) & 1u; }

  std::string text_;
  std::array<std::uint64_t, kBits / 64> bits_{};
};

// ASCII letter case, whatever the locale (ascii.h): A-Z is what ascii_lower changes.
bool upper(char c) { return ascii_lower(c) != c; }
bool lower_case(char c) { return c >= 'a' && c <= 'z'; }

// Words of one part of a qualified name: split at non-alphanumerics, before
// an upper-case letter that follows a lower-case one (sendRecv), and before
// the last capital of a run followed by a lower-case letter (A2ADispatch:
// A2A, Dispatch).
std::vector<std::string> split_words(std::string_view part) {
  std::vector<std::string> words;
  std::string w;
  for (std::size_t i = 0; i < part.size(); ++i) {
    const char c = part[i];
    if (!ascii_alnum(c)) {
      if (!w.empty()) words.push_back(std::move(w));
      w.clear();
      continue;
    }
    if (!w.empty() && upper(c)) {
      const char prev = part[i - 1];
      const bool next_lower = i + 1 < part.size() && lower_case(part[i + 1]);
      if (lower_case(prev) || (upper(prev) && next_lower)) {
        words.push_back(std::move(w));
        w.clear();
      }
    }
    w += ascii_lower(c);
  }
  if (!w.empty()) words.push_back(std::move(w));
  return words;
}

// The parts of an Itanium-mangled name (_ZN7deep_ep8internode8dispatchILb1EEEvPv):
// the identifiers of its nested name, up to its template arguments.
std::vector<std::string_view> mangled_parts(std::string_view name) {
  std::vector<std::string_view> parts;
  std::size_t pos = 2;
  const bool nested = pos < name.size() && name[pos] == 'N';
  if (nested) ++pos;
  while (pos < name.size() && (name[pos] == 'K' || name[pos] == 'V' || name[pos] == 'r')) ++pos;
  while (pos < name.size() && std::isdigit(static_cast<unsigned char>(name[pos]))) {
    std::size_t len = 0;
    while (pos < name.size() && std::isdigit(static_cast<unsigned char>(name[pos])) && len < 100000)
      len = len * 10 + static_cast<std::size_t>(name[pos++] - '0');
    if (len == 0 || len > name.size() - pos) break;
    const auto id = name.substr(pos, len);
    if (!id.starts_with("_GLOBAL__N")) parts.push_back(id);
    pos += len;
    if (!nested) break;
  }
  return parts;
}

// The parts of a demangled name: what stands at bracket depth 0 before its
// parameter list, the last blank-separated token of it (no return type),
// split at "::".
std::vector<std::string_view> demangled_parts(std::string_view name, std::string& buffer) {
  constexpr std::string_view kAnonymous = "(anonymous namespace)";
  buffer.clear();
  int depth = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name.substr(i, kAnonymous.size()) == kAnonymous) {
      i += kAnonymous.size() - 1;
      continue;
    }
    const char c = name[i];
    if (c == '(' && depth == 0) break;  // the parameter list
    if (c == '<' || c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == '>' || c == ')' || c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    } else if (depth == 0) {
      buffer += c;
    }
  }
  std::string_view head = buffer;
  while (!head.empty() && head.back() == ' ') head.remove_suffix(1);
  if (const auto sp = head.rfind(' '); sp != std::string_view::npos) head.remove_prefix(sp + 1);
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const auto sep = head.find("::", start);
    const auto part = head.substr(start, sep == std::string_view::npos ? std::string_view::npos : sep - start);
    if (!part.empty()) parts.push_back(part);
    if (sep == std::string_view::npos) break;
    start = sep + 2;
  }
  return parts;
}

// Whether `word` is the concatenation of a run of consecutive `words`.
bool has_run(const std::vector<std::string>& words, std::string_view word) {
  for (std::size_t i = 0; i < words.size(); ++i) {
    std::string run;
    for (std::size_t j = i; j < words.size() && run.size() < word.size(); ++j) {
      run += words[j];
      if (run == word) return true;
    }
  }
  return false;
}

std::vector<std::string> word_list(const nlohmann::json& r, const char* key, const std::string& where) {
  std::vector<std::string> out;
  if (!r.contains(key)) return out;
  if (!r[key].is_array() || r[key].empty())
    throw Error(where + ": \"" + std::string(key) + "\" must be a non-empty list of words");
  for (const auto& w : r[key]) {
    const auto word = w.is_string() ? comparable_word(w.get<std::string>()) : std::string();
    if (word.empty()) throw Error(where + ": \"" + std::string(key) + "\" holds an entry with no letter or digit");
    out.push_back(word);
  }
  return out;
}

}  // namespace

std::vector<std::vector<std::string>> kernel_name_words(std::string_view kernel_name) {
  std::string buffer;
  const auto parts = kernel_name.starts_with("_Z") ? mangled_parts(kernel_name) : demangled_parts(kernel_name, buffer);
  std::vector<std::vector<std::string>> out;
  for (const auto p : parts)
    if (auto w = split_words(p); !w.empty()) out.push_back(std::move(w));
  return out;
}

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
    if (!r.is_object() || !(r.contains("all_of") || r.contains("function") || r.contains("scope_any")))
      throw Error(where + ": needs \"all_of\" (substrings), \"function\" or \"scope_any\" (words)");
    KernelRule rule;
    if (r.contains("all_of")) {
      if (!r["all_of"].is_array() || r["all_of"].empty())
        throw Error(where + ": needs a non-empty \"all_of\" list of substrings");
      for (const auto& s : r["all_of"]) {
        if (!s.is_string() || s.get<std::string>().empty())
          throw Error(where + ": \"all_of\" holds a non-string or empty entry");
        rule.all_of.push_back(to_ascii_lower(s.get<std::string>()));
      }
    }
    rule.function = word_list(r, "function", where);
    rule.scope_any = word_list(r, "scope_any", where);
    if (r.contains("function_exact")) {
      if (!r["function_exact"].is_boolean() || rule.function.empty())
        throw Error(where + ": \"function_exact\" is true or false, beside \"function\"");
      rule.function_exact = r["function_exact"].get<bool>();
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

bool matches(const KernelRule& r, const SearchedText& name, const std::vector<std::vector<std::string>>& words) {
  if (!std::all_of(r.all_of.begin(), r.all_of.end(), [&](const std::string& s) { return name.contains(s); }))
    return false;
  if (!r.function.empty()) {
    if (words.empty()) return false;
    const auto& fn = words.back();
    if (r.function_exact) {
      std::string joined, want;
      for (const auto& w : fn) joined += w;
      for (const auto& w : r.function) want += w;
      if (joined != want) return false;
    } else if (!std::all_of(r.function.begin(), r.function.end(),
                            [&](const std::string& w) { return has_run(fn, w); })) {
      return false;
    }
  }
  if (!r.scope_any.empty() &&
      std::none_of(r.scope_any.begin(), r.scope_any.end(), [&](const std::string& w) {
        return std::any_of(words.begin(), words.end(), [&](const auto& part) { return has_run(part, w); });
      }))
    return false;
  return true;
}

int first_match(const std::vector<KernelRule>& rules, std::string_view kernel_name) {
  if (rules.empty()) return -1;
  const SearchedText name(to_ascii_lower(kernel_name));
  // Every word a rule names occurs in the name without its separators: a
  // rule none of whose words does cannot match, and the name is parsed into
  // words only for the rules that pass this test.
  const SearchedText squashed(comparable_word(kernel_name));
  auto in_squashed = [&](const std::string& w) { return squashed.contains(w); };
  std::vector<std::vector<std::string>> words;
  bool parsed = false;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto& r = rules[i];
    if (!r.function.empty() || !r.scope_any.empty()) {
      if (!std::all_of(r.function.begin(), r.function.end(), in_squashed)) continue;
      if (!r.scope_any.empty() && std::none_of(r.scope_any.begin(), r.scope_any.end(), in_squashed)) continue;
      if (!parsed) {
        words = kernel_name_words(kernel_name);
        parsed = true;
      }
    }
    if (matches(r, name, words)) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

namespace {

// Names already matched against the built-in rules: the loader classifies
// each kernel name, MoE recognition places kernels by their rule and the
// report lists the unclassified ones, each by the same name (a few hundred
// distinct names, up to kilobytes each, tens of microseconds each to match).
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct BuiltinMatches {
  std::mutex mutex;
  std::unordered_map<std::string, int, NameHash, std::equal_to<>> index;
};
constexpr std::size_t kMaxRemembered = 1 << 16;  // a bound for long-lived processes (Python, GUI)

}  // namespace

int match_kernel_rule(std::string_view kernel_name) {
  static BuiltinMatches memo;
  {
    std::lock_guard lock(memo.mutex);
    if (const auto it = memo.index.find(kernel_name); it != memo.index.end()) return it->second;
  }
  const int i = first_match(kernel_rules(), kernel_name);
  std::lock_guard lock(memo.mutex);
  if (memo.index.size() < kMaxRemembered) memo.index.emplace(std::string(kernel_name), i);
  return i;
}

const KernelRule* match_kernel_rule(const std::vector<KernelRule>& rules, std::string_view kernel_name) {
  const int i = first_match(rules, kernel_name);
  return i < 0 ? nullptr : &rules[static_cast<std::size_t>(i)];
}

std::string suggested_kernel_rule(std::string_view kernel_name) {
  const auto name = to_ascii_lower(kernel_name);
  auto has = [&](std::string_view w) { return name.find(w) != std::string::npos; };
  if (!(has("moe") || has("expert") || has("topk") || has("routing") || has("dispatch") || has("combine") ||
        has("permute")))
    return {};
  const auto words = kernel_name_words(kernel_name);
  if (words.empty()) return {};
  // Category and kind by the words, the most specific first.
  std::string category = "other_compute", kind;
  if (has("unpermute") || has("finalize")) kind = "unpermute";
  else if (has("permute") || has("sort") || has("align")) kind = "permute";
  else if (has("dispatch")) category = "all_to_all", kind = "dispatch";
  else if (has("combine")) category = "all_to_all", kind = "combine";
  else if (has("topk") || has("routing") || has("router") || has("gating") ||
           std::any_of(words.back().begin(), words.back().end(), [](const std::string& w) { return w == "gate"; }))
    category = "gating", kind = "gate";
  else if (has("gemm") || has("matmul") || has("bmm") || has("expert") || has("ffn") || has("mlp"))
    category = "expert_compute", kind = "expert";
  nlohmann::json rule = nlohmann::json::object();
  rule["function"] = words.back();
  rule["category"] = category;
  if (!kind.empty()) rule["kind"] = kind;
  return rule.dump();
}

Category classify_kernel_name(std::string_view kernel_name) {
  const int i = match_kernel_rule(kernel_name);
  return i < 0 ? Category::kOtherCompute : kernel_rules()[static_cast<std::size_t>(i)].category;
}

}  // namespace moetrace::analyzer
