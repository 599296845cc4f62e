#include "moetrace/analyzer/diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <ostream>
#include <set>
#include <span>

#include "moetrace/analyzer/format.h"
#include "moetrace/plan/routing.h"
#include "moetrace/schema/error.h"
#include "op_intervals.h"

namespace moetrace::analyzer {
namespace {

struct Known {
  const char* name;
  const char* unit;
};

constexpr Known kGlobal[] = {
    {"iteration_time", "ns"},         {"moe_time", "ns"},
    {"moe_share", "fraction"},        {"a2a_share", "fraction"},
    {"allreduce_share", "fraction"},  {"a2a_share_of_iteration", "fraction"},
    {"allreduce_share_of_iteration", "fraction"},
    {"expert_share", "fraction"},     {"gating_share", "fraction"},
    {"idle_share", "fraction"},       {"hidden_fraction", "fraction"},
    {"exposed_comm_time", "ns"},      {"peak_memory", "bytes"},
    {"bubble", "byte_ns"},            {"bubble_fraction", "fraction"},
    {"balance_degree", "tokens"},     {"balance_degree_home", "tokens"},
    {"rb", "ratio"},                  {"expert_max_over_mean", "ratio"},
    {"device_max_over_mean", "ratio"}, {"expert_cv", "ratio"},
    {"imbalance_time", "ns"},         {"locality_cosine", "ratio"},
    {"prediction_error", "fraction"},
    {"run_time", "ns"},               {"run_a2a_share", "fraction"},
    {"run_allreduce_share", "fraction"}, {"run_comm_share", "fraction"},
    {"run_expert_share", "fraction"}, {"run_idle_share", "fraction"},
    {"run_hidden_fraction", "fraction"},
};

constexpr Known kLayer[] = {
    {"time", "ns"},
    {"a2a_share", "fraction"},
    {"allreduce_share", "fraction"},
    {"expert_share", "fraction"},
    {"gating_share", "fraction"},
    {"idle_share", "fraction"},
    {"hidden_fraction", "fraction"},
    {"balance_degree", "tokens"},
    {"expert_max_over_mean", "ratio"},
    {"device_max_over_mean", "ratio"},
    {"imbalance_time", "ns"},
    {"locality_cosine", "ratio"},
    {"bubble", "byte_ns"},
    {"activation_memory", "bytes"},
};

constexpr Known kOp[] = {{"time", "ns"}, {"total", "ns"}, {"count", "count"}};

const char* lookup(std::span<const Known> list, std::string_view name) {
  for (const auto& k : list)
    if (name == k.name) return k.unit;
  return nullptr;
}

}  // namespace

std::string metric_unit(std::string_view name) {
  if (const char* u = lookup(kGlobal, name)) return u;
  if (name.starts_with("layer")) {
    const auto dot = name.find('.');
    if (dot == std::string_view::npos || dot == 5) return {};
    for (auto c : name.substr(5, dot - 5))
      if (!std::isdigit(static_cast<unsigned char>(c))) return {};
    if (const char* u = lookup(kLayer, name.substr(dot + 1))) return u;
    return {};
  }
  if (name.starts_with("op.")) {
    const auto dot = name.rfind('.');
    if (dot <= 3) return {};
    if (!parse_op_kind(name.substr(3, dot - 3))) return {};
    if (const char* u = lookup(kOp, name.substr(dot + 1))) return u;
  }
  return {};
}

std::vector<Metric> diff_metrics(const Trace& trace, const Analyses& a) {
  std::vector<Metric> m;
  auto add = [&](std::string name, double v) {
    auto unit = metric_unit(name);
    m.push_back({std::move(name), std::move(unit), v});
  };
  const auto& b = a.breakdown;
  // Whole run, every rank's span summed: these exist for every trace, also
  // imported ones without op ranges (kernels classified by name).
  if (!b.ranks.empty()) {
    TimeSplit run;
    for (const auto& r : b.ranks) run += r.t;
    add("run_time", static_cast<double>(run.window_ns) / static_cast<double>(b.ranks.size()));
    add("run_a2a_share", run.all_to_all_share());
    add("run_allreduce_share", run.share(Category::kAllReduce));
    add("run_comm_share", ratio(run.comm_ns, run.window_ns));
    add("run_expert_share", run.share(Category::kExpertCompute));
    add("run_idle_share", ratio(run.idle_ns, run.window_ns));
    add("run_hidden_fraction", run.hidden_fraction());
  }
  const double rank_iterations = std::max<double>(1.0, static_cast<double>(b.iterations.size()));
  if (!b.iterations.empty()) {
    const auto& it = b.iteration_total;
    const auto& moe = b.moe_total;
    add("iteration_time", static_cast<double>(it.window_ns) / rank_iterations);
    add("moe_time", static_cast<double>(moe.window_ns) / rank_iterations);
    add("moe_share", b.moe_share_of_iteration());
    add("a2a_share", b.all_to_all_share_of_moe());
    add("allreduce_share", b.all_reduce_share_of_moe());
    add("a2a_share_of_iteration", b.all_to_all_share_of_iteration());
    add("allreduce_share_of_iteration", b.all_reduce_share_of_iteration());
    add("expert_share", moe.share(Category::kExpertCompute));
    add("gating_share", moe.share(Category::kGating));
    add("idle_share", ratio(moe.idle_ns, moe.window_ns));
    add("hidden_fraction", it.hidden_fraction());
    add("exposed_comm_time", static_cast<double>(it.comm_exposed_ns) / rank_iterations);
  }
  if (a.memory.has_allocations) {
    add("peak_memory", static_cast<double>(a.memory.peak_bytes));
    if (a.memory.has_buffer_usage) {
      add("bubble", a.memory.memory_bubble_bytes_ns);
      add("bubble_fraction", a.memory.bubble_fraction());
    }
  }
  const auto& load = a.expert_load;
  if (load.has_load && !load.layers.empty()) {
    double bd = 0, bdh = 0, emm = 0, dmm = 0, cv = 0, imb = 0;
    int imb_n = 0;
    for (const auto& l : load.layers) {
      bd += l.balance_degree;
      bdh += l.balance_degree_home;
      emm += l.expert_max_over_mean;
      dmm += l.device_max_over_mean;
      cv += l.expert_cv;
      if (l.imbalance_ns >= 0) {
        imb += static_cast<double>(l.imbalance_ns);
        ++imb_n;
      }
    }
    const double n = static_cast<double>(load.layers.size());
    add("balance_degree", bd / n);
    add("balance_degree_home", bdh / n);
    // RB of the means (pro-prophet Sec. VI-C); absent when infinite.
    if (const double rb = plan::rb(bdh, bd); std::isfinite(rb)) add("rb", rb);
    add("expert_max_over_mean", emm / n);
    add("device_max_over_mean", dmm / n);
    add("expert_cv", cv / n);
    if (imb_n > 0) add("imbalance_time", imb / imb_n);
  }
  {
    double cos = 0, err = 0;
    int n = 0;
    for (const auto& l : a.locality.layers)
      if (l.consecutive.pairs > 0) {
        cos += l.consecutive.cosine_similarity;
        err += l.consecutive.relative_l1_error;
        ++n;
      }
    if (n > 0) {
      add("locality_cosine", cos / n);
      add("prediction_error", err / n);
    }
  }

  // Per layer.
  std::set<std::int32_t> layers;
  for (const auto& l : b.layers) layers.insert(l.layer);
  for (const auto& l : load.layers) layers.insert(l.layer);
  for (const auto layer : layers) {
    const auto p = fmt::format("layer{}.", layer);
    for (const auto& l : b.layers)
      if (l.layer == layer) {
        add(p + "time", static_cast<double>(l.mean_window_ns));
        add(p + "a2a_share", l.total.all_to_all_share());
        add(p + "allreduce_share", l.total.all_reduce_share());
        add(p + "expert_share", l.total.share(Category::kExpertCompute));
        add(p + "gating_share", l.total.share(Category::kGating));
        add(p + "idle_share", ratio(l.total.idle_ns, l.total.window_ns));
        add(p + "hidden_fraction", l.total.hidden_fraction());
      }
    for (const auto& l : load.layers)
      if (l.layer == layer) {
        add(p + "balance_degree", l.balance_degree);
        add(p + "expert_max_over_mean", l.expert_max_over_mean);
        add(p + "device_max_over_mean", l.device_max_over_mean);
        if (l.imbalance_ns >= 0) add(p + "imbalance_time", static_cast<double>(l.imbalance_ns));
      }
    for (const auto& l : a.locality.layers)
      if (l.layer == layer && l.consecutive.pairs > 0) add(p + "locality_cosine", l.consecutive.cosine_similarity);
    for (const auto& l : a.memory.layers)
      if (l.layer == layer && l.measured_peak_bytes[1] >= 0)
        add(p + "activation_memory", static_cast<double>(l.measured_peak_bytes[1]));
    if (a.memory.has_buffer_usage) {
      double bubble = 0;
      for (const auto& u : a.memory.buffers)
        if (u.layer == layer) bubble += u.memory_bubble_bytes_ns();
      add(p + "bubble", bubble);
    }
  }

  // Per op kind: GPU time of its ops.
  if (!trace.ops.empty()) {
    const OpIntervals oi(trace);
    std::map<OpKind, std::pair<double, std::int64_t>> by_kind;  // total ns, count
    for (std::size_t o = 0; o < trace.ops.size(); ++o) {
      auto& k = by_kind[trace.ops[o].kind];
      k.first += static_cast<double>(oi.busy(o));
      ++k.second;
    }
    for (const auto& [kind, v] : by_kind) {
      const auto p = fmt::format("op.{}.", op_kind_name(kind));
      add(p + "time", v.first / static_cast<double>(v.second));
      add(p + "total", v.first / rank_iterations);
      add(p + "count", static_cast<double>(v.second) / rank_iterations);
    }
  }
  return m;
}

namespace {

[[noreturn]] void bad(std::string_view expr, const std::string& why) {
  throw ConfigError(fmt::format("--fail-if \"{}\": {}", expr, why));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Threshold parse_threshold(std::string_view expression) {
  Threshold t;
  t.expression = std::string(trim(expression));
  std::string_view s = t.expression;
  std::size_t i = 0;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_' || s[i] == '.')) ++i;
  t.metric = std::string(s.substr(0, i));
  if (t.metric.empty()) bad(expression, "expected METRIC OP VALUE, e.g. \"a2a_share > +5%\"");
  const auto unit = metric_unit(t.metric);
  if (unit.empty()) bad(expression, "unknown metric \"" + t.metric + "\" (see `moetrace diff --help`)");
  s = trim(s.substr(i));
  if (s.starts_with(">=")) t.op = Threshold::Op::kGreaterEqual, s.remove_prefix(2);
  else if (s.starts_with("<=")) t.op = Threshold::Op::kLessEqual, s.remove_prefix(2);
  else if (s.starts_with(">")) t.op = Threshold::Op::kGreater, s.remove_prefix(1);
  else if (s.starts_with("<")) t.op = Threshold::Op::kLess, s.remove_prefix(1);
  else bad(expression, "expected one of > >= < <= after the metric");
  s = trim(s);
  const bool signed_value = !s.empty() && (s.front() == '+' || s.front() == '-');
  const double sign = !s.empty() && s.front() == '-' ? -1.0 : 1.0;
  if (signed_value) s.remove_prefix(1);
  std::size_t n = 0;
  while (n < s.size() && (std::isdigit(static_cast<unsigned char>(s[n])) || s[n] == '.' || s[n] == 'e' ||
                          s[n] == 'E' || ((s[n] == '+' || s[n] == '-') && n > 0 && (s[n - 1] == 'e' || s[n - 1] == 'E'))))
    ++n;
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + n, v);
  if (n == 0 || ec != std::errc() || end != s.data() + n) bad(expression, "expected a number after the operator");
  const auto suffix = trim(s.substr(n));
  struct Scale {
    const char* suffix;
    const char* unit;
    double factor;
  };
  static constexpr Scale kScales[] = {
      {"ns", "ns", 1},         {"us", "ns", 1e3},          {"ms", "ns", 1e6},
      {"s", "ns", 1e9},        {"B", "bytes", 1},          {"KiB", "bytes", 1024.0},
      {"MiB", "bytes", 1048576.0}, {"GiB", "bytes", 1073741824.0}, {"KB", "bytes", 1e3},
      {"MB", "bytes", 1e6},    {"GB", "bytes", 1e9},
  };
  if (suffix == "%") {
    if (signed_value) {
      t.mode = Threshold::Mode::kRelativeChange;
      t.value = sign * v / 100.0;
    } else {
      t.mode = Threshold::Mode::kNewValue;
      t.value = v / 100.0;
    }
    return t;
  }
  if (suffix == "pp") {
    if (!signed_value) bad(expression, "pp (percentage points) needs a signed change, e.g. +2pp");
    if (unit != "fraction") bad(expression, "pp applies to shares and fractions, not to " + t.metric);
    t.mode = Threshold::Mode::kAbsoluteChange;
    t.value = sign * v / 100.0;
    return t;
  }
  double factor = 1;
  if (!suffix.empty()) {
    const Scale* found = nullptr;
    for (const auto& sc : kScales)
      if (suffix == sc.suffix) found = &sc;
    if (!found) bad(expression, "unknown unit \"" + std::string(suffix) + "\"");
    if (unit != found->unit)
      bad(expression, fmt::format("{} is measured in {}, not in {}", t.metric, unit, found->suffix));
    factor = found->factor;
  }
  t.mode = signed_value ? Threshold::Mode::kAbsoluteChange : Threshold::Mode::kNewValue;
  t.value = (signed_value ? sign : 1.0) * v * factor;
  return t;
}

std::optional<double> DiffEntry::relative_change() const {
  if (!base || !next) return std::nullopt;
  if (*base == 0) return *next == 0 ? std::optional<double>(0.0) : std::nullopt;
  return (*next - *base) / std::fabs(*base);
}

int TraceDiff::violations() const {
  int n = 0;
  for (const auto& t : thresholds) n += t.violated ? 1 : 0;
  return n;
}

std::string format_metric(double value, std::string_view unit) {
  if (unit == "ns") return format_duration(static_cast<std::int64_t>(std::llround(value)));
  if (unit == "bytes") return format_bytes(static_cast<std::int64_t>(std::llround(value)));
  if (unit == "byte_ns") return format_bytes_ms(value);
  if (unit == "fraction") return format_percent(value);
  if (unit == "count") return fmt::format("{:.4g}", value);
  return fmt::format("{:.4g}", value);
}

namespace {

// With a relative tolerance, so that a change of exactly the bound counts
// as equal despite rounding (0.5 - 0.4 is not 0.1 in binary).
bool compare(double lhs, Threshold::Op op, double rhs) {
  const double eps = std::isfinite(lhs) && std::isfinite(rhs)
                         ? 1e-9 * std::max({std::fabs(lhs), std::fabs(rhs), 1e-300})
                         : 0.0;
  switch (op) {
    case Threshold::Op::kGreater: return lhs > rhs + eps;
    case Threshold::Op::kGreaterEqual: return lhs >= rhs - eps;
    case Threshold::Op::kLess: return lhs < rhs - eps;
    case Threshold::Op::kLessEqual: return lhs <= rhs + eps;
  }
  return false;
}

std::string change_text(const DiffEntry& e) {
  const auto c = e.change();
  if (!c) return "-";
  if (e.unit == "fraction") return fmt::format("{:+.1f}pp", *c * 100.0);
  const auto magnitude = format_metric(std::fabs(*c), e.unit);
  const bool zero = magnitude.starts_with("0 ") || magnitude == "0";
  return (*c < 0 && !zero ? "-" : "+") + magnitude;
}

std::string relative_text(const DiffEntry& e) {
  const auto r = e.relative_change();
  if (!r) return e.base && e.next ? "new" : "-";
  return fmt::format("{:+.1f}%", std::fabs(*r) < 0.0005 ? 0.0 : *r * 100.0);
}

}  // namespace

TraceDiff diff_traces(const Trace& base, const Analyses& base_analyses, const Trace& next,
                      const Analyses& next_analyses, const std::vector<Threshold>& thresholds) {
  TraceDiff d;
  d.base_path = base.run.path;
  d.new_path = next.run.path;
  const auto bm = diff_metrics(base, base_analyses), nm = diff_metrics(next, next_analyses);
  std::map<std::string, std::size_t> index;
  for (const auto& m : bm) {
    index[m.name] = d.entries.size();
    d.entries.push_back({m.name, m.unit, m.value, std::nullopt});
  }
  for (const auto& m : nm) {
    auto it = index.find(m.name);
    if (it != index.end()) {
      d.entries[it->second].next = m.value;
    } else {
      index[m.name] = d.entries.size();
      d.entries.push_back({m.name, m.unit, std::nullopt, m.value});
    }
  }
  for (const auto& t : thresholds) {
    ThresholdResult r;
    r.threshold = t;
    auto it = index.find(t.metric);
    const DiffEntry* e = it == index.end() ? nullptr : &d.entries[it->second];
    if (!e || !e->base || !e->next) {
      r.violated = true;
      const char* where = !e ? "either trace" : (!e->base ? "BASE" : "NEW");
      r.message = fmt::format("{}: cannot evaluate, {} has no {}", t.expression, where, t.metric);
      d.thresholds.push_back(std::move(r));
      continue;
    }
    r.evaluated = true;
    double lhs = 0;
    switch (t.mode) {
      case Threshold::Mode::kNewValue: lhs = *e->next; break;
      case Threshold::Mode::kAbsoluteChange: lhs = *e->change(); break;
      case Threshold::Mode::kRelativeChange:
        if (auto rel = e->relative_change()) lhs = *rel;
        else if (*e->next == *e->base) lhs = 0;
        else {
          // From zero: an infinite relative change in the direction of the move.
          lhs = *e->next > *e->base ? INFINITY : -INFINITY;
        }
        break;
    }
    r.violated = compare(lhs, t.op, t.value);
    r.message = fmt::format("{}: {} -> {} ({}, {})", t.expression, format_metric(*e->base, e->unit),
                            format_metric(*e->next, e->unit), change_text(*e), relative_text(*e));
    d.thresholds.push_back(std::move(r));
  }
  return d;
}

nlohmann::json diff_json(const TraceDiff& d) {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"diff_version", kDiffVersion}, {"base", d.base_path}, {"new", d.new_path}};
  auto& metrics = j["metrics"] = nlohmann::json::array();
  for (const auto& e : d.entries)
    metrics.push_back({{"name", e.name},
                       {"unit", e.unit},
                       {"base", opt(e.base)},
                       {"new", opt(e.next)},
                       {"change", opt(e.change())},
                       {"relative_change", opt(e.relative_change())}});
  auto& th = j["thresholds"] = nlohmann::json::array();
  for (const auto& t : d.thresholds)
    th.push_back({{"expression", t.threshold.expression},
                  {"metric", t.threshold.metric},
                  {"evaluated", t.evaluated},
                  {"violated", t.violated},
                  {"message", t.message}});
  j["violations"] = d.violations();
  return j;
}

void write_diff_text(std::ostream& out, const TraceDiff& d, bool all) {
  out << "moetrace diff\n  base: " << d.base_path << "\n  new:  " << d.new_path << "\n\n";
  std::vector<std::array<std::string, 5>> rows;
  rows.push_back({"metric", "base", "new", "change", "relative"});
  int unchanged = 0;
  for (const auto& e : d.entries) {
    const auto c = e.change();
    if (!all && c && *c == 0) {
      ++unchanged;
      continue;
    }
    rows.push_back({e.name, e.base ? format_metric(*e.base, e.unit) : "-", e.next ? format_metric(*e.next, e.unit) : "-",
                    change_text(e), relative_text(e)});
  }
  std::array<std::size_t, 5> w{};
  for (const auto& r : rows)
    for (std::size_t i = 0; i < 5; ++i) w[i] = std::max(w[i], r[i].size());
  for (const auto& r : rows)
    out << fmt::format("  {:<{}}  {:>{}}  {:>{}}  {:>{}}  {:>{}}\n", r[0], w[0], r[1], w[1], r[2], w[2], r[3], w[3],
                       r[4], w[4]);
  if (unchanged > 0) out << fmt::format("  ({} unchanged metric{} not shown; --all shows them)\n", unchanged, unchanged == 1 ? "" : "s");
  if (!d.thresholds.empty()) {
    out << "\nthresholds:\n";
    for (const auto& t : d.thresholds) out << "  " << (t.violated ? "VIOLATED  " : "ok        ") << t.message << "\n";
  }
}

}  // namespace moetrace::analyzer
