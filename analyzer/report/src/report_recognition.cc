// The report's "MoE semantics" section: what MoE recognition derived, from
// what, what was missing and what would unlock it; and the largest kernels no
// rule classifies (unclassified_kernels.cc finds them).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/report.h"
#include "report_sections.h"

namespace moetrace::analyzer {

namespace {

// A PyTorch-profiler trace records every backward node autograd runs
// (autograd::engine::evaluate_function): an MoE trace of it without one ran
// no backward pass (inference, evaluation, a forward benchmark).
bool forward_only_run(const Trace& trace) {
  const auto& r = trace.recognition;
  return r.moe && !r.phases_marked && trace.run.backend == "kineto";
}

}  // namespace

std::vector<std::string> recognition_unlocks(const Trace& trace) {
  const auto& r = trace.recognition;
  std::vector<std::string> u;
  if (!r.ran) return u;
  if (!r.moe)
    u.push_back(
        "MoE layers (per-layer breakdown, all-to-all share and hidden communication per layer, recommendations): "
        "annotate dispatch, combine, experts and layers with moetrace:<kind> ranges (docs/annotations.md; "
        "python/moetrace_annotate.py), or record module ranges of a supported framework (torch.profiler with "
        "with_modules=True: Megatron-Core, DeepSpeed, Tutel, FastMoE, torchtitan), or describe your own names "
        "with --moe-rules FILE (schemas/moe_rules.schema.json)");
  if (!r.iterations_marked)
    u.push_back(
        "iterations (per-iteration rows, locality across iterations): call prof.step() each step so the trace has "
        "ProfilerStep#N, step a torch.optim optimizer (its Optimizer.step#<Class>.step range ends an iteration), or "
        "wrap each step in a moetrace:iteration iter=N range");
  if (r.moe && !r.phases_marked && !forward_only_run(trace))
    u.push_back(
        "backward rows: a trace of the PyTorch profiler marks backward work (autograd::engine::evaluate_function "
        "ranges); elsewhere add phase=bwd to the annotations");
  if (trace.expert_load.empty())
    u.push_back(
        "expert load and locality: all-to-all(v) split sizes (the PyTorch profiler records them as 'In split "
        "size' of NCCL all-to-all kernels when the dispatch passes split sizes to all_to_all_single)");
  return u;
}

namespace report_detail {

Section recognition_section(const Trace& trace, const Analyses& a) {
  Section s{"recognition", "MoE semantics of a trace from another tool", {}};
  const auto& r = trace.recognition;
  if (!r.moe && !r.iterations_marked) {
    s.para(
        "This trace carries no MoE semantics that moetrace recognises, so it is split per rank by kernel names "
        "only. What would unlock each part of the report:");
  } else {
    std::vector<std::string> from;
    if (r.annotations > 0) from.push_back(fmt::format("{} moetrace annotation ranges", r.annotations));
    if (r.ranges_matched > r.annotations)
      from.push_back(fmt::format("{} framework ranges matched by rules", r.ranges_matched - r.annotations));
    if (r.kernels_by_name > 0) from.push_back(fmt::format("{} kernels named by kernel rules", r.kernels_by_name));
    s.para(fmt::format(
        "{} of {} GPU activities became op ranges (kind, iteration, phase; layer, micro-batch and chunk inside MoE layers), derived from {}. Each activity is one op: "
        "its kind from its kernel's name where that is specific (NCCL, DeepEP, grouped GEMMs), else from the "
        "innermost recognised range that launched it; communication kernels keep their kind inside compute "
        "ranges, and compute inside a dispatch range counts as its permutation.",
        r.activities_placed, r.activities_total, from.empty() ? std::string("iteration ranges only") : fmt::format("{}", fmt::join(from, ", "))));
    std::vector<std::string> derived;
    derived.push_back(r.iterations_from_steps && r.rules_used.count(kIterationsByPeriod)
                          ? "iterations from the periodicity of the MoE layers (no step ranges, no backward pass: an "
                            "iteration starts where a layer range's name comes again)"
                      : r.iterations_from_steps
                          ? "iterations from the ranges that end them (no ProfilerStep#N: the work after a rank's "
                            "k-th optimizer step is iteration k)"
                      : r.iterations_marked ? "iterations from ranges (ProfilerStep#N or annotations)"
                                            : "no iteration ranges: the whole trace is iteration 0");
    if (r.moe) {
      derived.push_back(r.layers_by_order > 0
                            ? fmt::format("layers of {} ops inferred by order (the k-th MoE layer instance of an "
                                          "iteration in the forward pass is layer k; backward counts down)",
                                          r.layers_by_order)
                            : std::string("layers named by ranges"));
      // What was inferred, where anything was: the count, and how.
      const std::pair<std::int64_t, const char*> inferred[] = {
          {r.layers_by_nesting,
           "{} schedule parts placed in layer instances by their order and the function ranges enclosing them "
           "(an instance: one pass through the MoE block, within the outermost range holding one part of each "
           "kind and phase; its chunk: the range around it; a weight-gradient part: the backward instance it "
           "follows), so overlapped chunks of several micro-batches are counted apart"},
          {r.backward_by_sequence,
           "{} backward GPU activities placed in the module of their forward op (autograd's sequence numbers: "
           "a backward node and the forward op of its gradient share one)"},
          {r.directions_by_order,
           "dispatch or combine of {} all-to-all kernels inferred by order within their layer (first half "
           "dispatch, second half combine; the reverse in the backward)"},
          {r.a2a_assumed_moe,
           "{} all-to-all kernels outside every MoE range taken as MoE dispatch or combine (the trace has MoE "
           "kernels or ranges)"},
      };
      for (const auto& [count, how] : inferred)
        if (count > 0) derived.push_back(fmt::format(fmt::runtime(how), count));
      derived.push_back(r.phases_marked          ? "backward phase from ranges"
                        : forward_only_run(trace) ? "forward only: the PyTorch profiler recorded no backward node, "
                                                    "so no backward pass ran (inference or evaluation)"
                                                  : "no backward ranges: all work is forward");
    }
    if (!trace.expert_load_origin.empty()) derived.push_back("load from " + trace.expert_load_origin);
    s.para(fmt::format("Derived: {}.", fmt::join(derived, "; ")));
    for (const auto& what : r.ambiguities) s.para("Ambiguous: " + what + ".");
    if (!r.rules_used.empty()) {
      Table t{{"rule", "matches"}, {}};
      for (const auto& [rule, count] : r.rules_used) t.rows.push_back({rule, std::to_string(count)});
      s.table("Rules that matched (preset: label; ranges or kernels matched):",
              std::move(t));
    }
    if (!recognition_unlocks(trace).empty()) s.para("Missing, and what would unlock it:");
  }
  for (const auto& u : recognition_unlocks(trace)) s.para("- " + u + ".");
  if (r.annotations_malformed > 0)
    s.para(fmt::format("{} malformed moetrace annotations were ignored; the first: {}.", r.annotations_malformed,
                       r.first_malformed));
  const auto& unclassified = a.unclassified_kernels;
  if (!unclassified.empty()) {
    Table t{{"kernel", "count", "GPU time"}, {}};
    for (const auto& k : unclassified)
      t.rows.push_back({k.name.size() > 90 ? k.name.substr(0, 87) + "..." : k.name, std::to_string(k.count),
                        format_duration(k.gpu_ns)});
    s.table("Largest kernels no rule classifies (counted as other compute; a kernel rule in a --moe-rules file "
            "can name them):",
            std::move(t));
    std::vector<std::string> suggested;
    for (const auto& k : unclassified)
      if (auto rule = suggested_kernel_rule(k.name); !rule.empty())
        suggested.push_back(fmt::format("- {} for {}", rule, k.name.size() > 60 ? k.name.substr(0, 57) + "..." : k.name));
    if (!suggested.empty()) {
      s.para("Of these, the names that look like MoE work; the kernel rule that would classify each (its category "
             "and MoE kind guessed from its words: check them), for the \"kernels\" list of a --moe-rules file "
             "({\"version\": 1, \"kernels\": [...]}):");
      for (auto& line : suggested) s.para(std::move(line));
    }
  }
  return s;
}

nlohmann::json recognition_json(const Trace& trace, const Analyses& a) {
  const auto& r = trace.recognition;
  nlohmann::json rules = nlohmann::json::object();
  for (const auto& [rule, count] : r.rules_used) rules[rule] = count;
  nlohmann::json unclassified = nlohmann::json::array();
  if (r.ran)
    for (const auto& k : a.unclassified_kernels) {
      nlohmann::json e = {{"name", k.name}, {"count", k.count}, {"gpu_ns", k.gpu_ns}};
      if (const auto rule = suggested_kernel_rule(k.name); !rule.empty()) e["suggested_rule"] = nlohmann::json::parse(rule);
      unclassified.push_back(std::move(e));
    }
  return {{"ran", r.ran},
          {"moe", r.moe},
          {"activities", r.activities_total},
          {"activities_placed", r.activities_placed},
          {"annotations", r.annotations},
          {"annotations_malformed", r.annotations_malformed},
          {"ranges_matched", r.ranges_matched},
          {"kernels_by_name", r.kernels_by_name},
          {"layers_by_order", r.layers_by_order},
          {"layers_by_nesting", r.layers_by_nesting},
          {"directions_by_order", r.directions_by_order},
          {"backward_by_sequence", r.backward_by_sequence},
          {"a2a_assumed_moe", r.a2a_assumed_moe},
          {"iterations_marked", r.iterations_marked},
          {"iterations_from_steps", r.iterations_from_steps},
          {"phases_marked", r.phases_marked},
          {"load_origin", trace.expert_load_origin},
          {"ambiguities", r.ambiguities},
          {"rules_used", rules},
          {"missing", recognition_unlocks(trace)},
          {"unclassified_kernels", unclassified}};
}

}  // namespace report_detail
}  // namespace moetrace::analyzer
