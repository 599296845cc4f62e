// MoE recognition, pass 1: host ranges recognised as contexts (annotations,
// range rules), indexed per thread and per rank.
#include "moe_recognition_internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "moetrace/schema/ascii.h"

namespace moetrace::analyzer::recognition_detail {

// 1. Contexts from the host ranges.
std::optional<Annotation> Recognizer::recognise(const NvtxRange& r) {
  const auto key = std::pair{r.domain.value, r.name.value};
  if (auto it = cache_.find(key); it != cache_.end()) {
    if (it->second.second >= 0) ++s_.rules_used[rule_name(it->second.second)];
    else if (it->second.first) ++s_.annotations;
    return it->second.first;
  }
  const auto domain = t_.str(r.domain), name = t_.str(r.name);
  Annotation a;
  std::string why;
  switch (parse_annotation(domain, name, a, &why)) {
    case AnnotationParse::kOk:
      ++s_.annotations;
      cache_[key] = {a, -1};
      return a;
    case AnnotationParse::kMalformed:
      ++s_.annotations_malformed;
      if (s_.first_malformed.empty()) s_.first_malformed = fmt::format("\"{}\": {}", name, why);
      return std::nullopt;  // not cached: each malformed range counts
    case AnnotationParse::kNotAnnotation: break;
  }
  const std::string text(name);
  std::string lower_text;  // made once, for the rules with keywords
  for (std::size_t i = 0; i < rules_.ranges.size(); ++i) {
    const auto& rule = rules_.ranges[i];
    if (!rule.domain.empty() && rule.domain != domain) continue;
    if (!rule.required_prefix.empty() && !name.starts_with(rule.required_prefix)) continue;
    if (!rule.keywords.empty()) {
      if (lower_text.empty()) lower_text = to_ascii_lower(text);
      if (std::none_of(rule.keywords.begin(), rule.keywords.end(),
                       [&](const std::string& k) { return lower_text.find(k) != std::string::npos; }))
        continue;
    }
    std::smatch m;
    if (!std::regex_search(text, m, rule.regex(),
                           rule.anchored ? std::regex_constants::match_continuous
                                         : std::regex_constants::match_default))
      continue;
    Annotation out;
    out.role = rule.role;
    out.kind = rule.kind;
    out.phase = rule.phase;
    auto coord = [&](const RuleCoordinate& c) -> std::int32_t {
      if (c.value >= 0) return c.value;
      if (c.group <= 0 || static_cast<std::size_t>(c.group) >= m.size() || !m[static_cast<std::size_t>(c.group)].matched)
        return -1;
      const auto digits = m[static_cast<std::size_t>(c.group)].str();
      std::int32_t v = -1;
      if (!digits.empty() && digits.size() <= 9 && std::all_of(digits.begin(), digits.end(), [](unsigned char ch) { return std::isdigit(ch) != 0; }))
        v = std::stoi(digits);
      return v;
    };
    if (rule.phase_group > 0 && static_cast<std::size_t>(rule.phase_group) < m.size() &&
        m[static_cast<std::size_t>(rule.phase_group)].matched)
      out.phase = parse_phase_marker(m[static_cast<std::size_t>(rule.phase_group)].str());
    out.layer = coord(rule.layer);
    out.iteration = coord(rule.iteration);
    out.micro_batch = coord(rule.micro_batch);
    out.chunk = coord(rule.chunk);
    cache_[key] = {out, static_cast<std::int32_t>(i)};
    process_rule_[key] = rule.process_scope;
    ++s_.rules_used[rule_name(static_cast<std::int32_t>(i))];
    return out;
  }
  cache_[key] = {std::nullopt, -1};
  return std::nullopt;
}

std::string Recognizer::rule_name(std::int32_t i) const {
  const auto& r = rules_.ranges[static_cast<std::size_t>(i)];
  return r.preset + ": " + r.label;
}

void Recognizer::collect_contexts() {
  for (std::size_t ri = 0; ri < t_.nvtx.size(); ++ri) {
    const auto& r = t_.nvtx[ri];
    auto a = recognise(r);
    if (!a) continue;
    ++s_.ranges_matched;
    if (a->role == RangeRole::kIterationEnd) {  // not a context: counted by step_iterations()
      step_ends_[r.rank.value].push_back(end_of(r));
      continue;
    }
    Context c = context_of(ri);
    c.a = *a;
    if (r.autograd_backward) c.backward_seq = r.autograd_seq;
    const auto key = std::pair{r.domain.value, r.name.value};
    c.process = a->role == RangeRole::kIteration ||
                (process_rule_.count(key) && process_rule_[key]);
    if (a->role == RangeRole::kIteration || a->iteration >= 0) s_.iterations_marked = true;
    if (a->phase && is_backward(*a->phase)) s_.phases_marked = true;
    if (a->role == RangeRole::kLayer || a->layer >= 0) s_.layers_marked = true;
    if ((a->kind && op_kind_info(*a->kind).moe_layer) || a->role == RangeRole::kLayer) s_.moe = true;
    add_context(c);
  }
  number_iterations();
}

// Iteration ranges that name no number (an engine's step ranges) are
// numbered per rank in start order; one nested in another (a step function
// inside the step's range) is the same iteration.
void Recognizer::number_iterations() {
  std::map<std::int32_t, std::vector<std::size_t>> unnumbered;
  for (const auto& c : contexts_)
    if (c.a.role == RangeRole::kIteration && c.a.iteration < 0) unnumbered[c.rank].push_back(c.index);
  for (auto& [rank, list] : unnumbered) {
    std::sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) {
      return contexts_[x].start != contexts_[y].start ? contexts_[x].start < contexts_[y].start
                                                      : contexts_[x].end > contexts_[y].end;
    });
    std::int32_t next = 0;
    std::int64_t outer_end = INT64_MIN;
    for (auto i : list) {
      auto& c = contexts_[i];
      if (c.start >= outer_end) {
        outer_end = c.end;
        ++next;
      }
      c.a.iteration = next - 1;
    }
  }
}

// 1a. Where no range marks iterations and the trace holds no backward pass
// (inference, a forward-only benchmark), the layer ranges repeat once a
// step: a new iteration starts at the layer range whose name already came
// in the current one (nn.Module: MoELayer_3 a second time, vLLM's
// vllm::moe_forward after the last layer...). Its work from there on is
// the next iteration's, as after an optimizer's step (step_iterations()).
void Recognizer::iterations_by_period() {
  if (s_.iterations_marked || s_.phases_marked || !step_ends_.empty()) return;
  std::map<std::int32_t, std::vector<std::size_t>> layers;  // rank -> layer contexts
  for (const auto& c : contexts_)
    if (c.a.role == RangeRole::kLayer && c.a.layer < 0) layers[c.rank].push_back(c.index);
  std::int64_t boundaries = 0;
  for (auto& [rank, list] : layers) {
    std::sort(list.begin(), list.end(), [&](std::size_t x, std::size_t y) {
      return contexts_[x].start != contexts_[y].start ? contexts_[x].start < contexts_[y].start
                                                      : contexts_[x].end > contexts_[y].end;
    });
    std::set<std::int64_t> seen;  // names of the current pass
    std::int64_t outer_end = INT64_MIN;
    for (auto i : list) {
      const auto& c = contexts_[i];
      if (c.start < outer_end) continue;  // nested in a layer range of its own
      outer_end = c.end;
      if (!seen.insert(context_names_[i].value).second) {
        step_ends_[rank].push_back(c.start);
        ++boundaries;
        seen = {context_names_[i].value};
      }
    }
  }
  if (boundaries > 0) s_.rules_used[kIterationsByPeriod] = boundaries;
}

// The context of host range `ri`, its annotation still to be set.
Context Recognizer::context_of(std::size_t ri) const {
  const auto& r = t_.nvtx[ri];
  Context c;
  c.start = r.start_ns;
  c.end = end_of(r);
  c.thread = r.thread_id;
  c.rank = r.rank.value;
  c.nvtx = r.id;
  c.range = ri;
  c.index = contexts_.size();
  return c;
}

void Recognizer::add_context(const Context& c) {
  context_names_.push_back(t_.nvtx[c.range].name);
  contexts_.push_back(c);
}

// Per thread (and per rank for process-wide ones), the contexts in start order.
void Recognizer::index_contexts() {
  for (const auto& c : contexts_)
    (c.process ? by_rank_[c.rank] : by_thread_[{c.rank, c.thread}]).push_back(c.index);
  auto by_start = [&](std::size_t x, std::size_t y) {
    return contexts_[x].start != contexts_[y].start ? contexts_[x].start < contexts_[y].start
                                                    : contexts_[x].end > contexts_[y].end;
  };
  for (auto& [k, v] : by_thread_) std::sort(v.begin(), v.end(), by_start);
  for (auto& [k, v] : by_rank_) std::sort(v.begin(), v.end(), by_start);
}

}  // namespace moetrace::analyzer::recognition_detail
