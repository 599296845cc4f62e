// The report's kernel-sequences section (kernel_sequences.h): HTA's frequent
// CUDA kernel sequences of one operator on one rank, the patterns as a table
// and each pattern written out as HTA writes it ("op|kernel|kernel|...").
#include <fmt/format.h>

#include "report_sections.h"

namespace moetrace::analyzer {

nlohmann::json kernel_sequences_json(const KernelSequenceAnalysis& k) {
  nlohmann::json seqs = nlohmann::json::array();
  for (const auto& s : k.sequences)
    seqs.push_back({{"pattern", s.pattern()},
                    {"op", s.op},
                    {"kernels", s.kernels},
                    {"count", s.count},
                    {"gpu_kernel_duration_ns", s.gpu_kernel_duration_ns},
                    {"cpu_op_duration_ns", s.cpu_op_duration_ns}});
  const auto& o = k.options;
  nlohmann::json j = {{"operator", o.operator_name},
                      {"min_pattern_len", o.min_pattern_len},
                      {"top_k", o.top_k},
                      {"window", rank_window_name(o.window)},
                      {"rank", k.rank >= 0 ? nlohmann::json(k.rank) : nlohmann::json(nullptr)},
                      {"candidates", k.candidates},
                      {"depth", k.depth >= 0 ? nlohmann::json(k.depth) : nlohmann::json(nullptr)},
                      {"roots", k.roots},
                      {"short_roots", k.short_roots},
                      {"patterns", k.patterns},
                      {"backward_linked", k.backward_linked},
                      {"sequences", std::move(seqs)}};
  return j;
}

ReportSection kernel_sequences_section(const KernelSequenceAnalysis& k) {
  ReportSection s{"kernel_sequences", "Frequent CUDA kernel sequences", {}};
  const auto& o = k.options;
  if (k.rank < 0) {
    s.para("No ranks in the trace: no kernel sequences.");
    return s;
  }
  s.para(fmt::format(
      "HTA's get_frequent_cuda_kernel_sequences (kernel_sequences.h) on rank {}: the CPU ops whose names contain "
      "\"{}\", at the shallowest depth of the call stacks where any does, and the GPU events (kernels, memcpy, "
      "memset) launched from inside each, by start; a sequence of at least {} events is a pattern{} "
      "(--kernel-sequences-op, --kernel-sequences-min-len, --kernel-sequences-top-k, --kernel-sequences-rank).",
      k.rank, o.operator_name, o.min_pattern_len,
      o.window == RankWindow::kSpan ? "" : "; GPU events in the window: " + rank_window_description(o.window)));
  if (k.candidates == 0) {
    s.para(fmt::format("No CPU op of rank {} has \"{}\" in its name (a case-sensitive match; "
                       "--kernel-sequences-op names another).",
                       k.rank, o.operator_name));
    return s;
  }
  s.para(fmt::format(
      "{} CPU op{} named like \"{}\"; {} at the shallowest depth, {}{}; {} of them launched fewer than {} GPU "
      "events and are left out; {} pattern{}{}.",
      k.candidates, k.candidates == 1 ? "" : "s", o.operator_name, k.roots, k.depth,
      k.backward_linked ? " (the backward thread's ops hung under the main thread's step, as HTA links them)" : "",
      k.short_roots, o.min_pattern_len, k.patterns, k.patterns == 1 ? "" : "s",
      static_cast<std::size_t>(k.patterns) > k.sequences.size()
          ? fmt::format(", the {} most frequent listed", k.sequences.size())
          : std::string()));
  ReportTable t{{"#", "count", "GPU events", "GPU kernel time", "CPU op time", "GPU time per instance", "operator"},
                {}};
  for (std::size_t i = 0; i < k.sequences.size(); ++i) {
    const auto& q = k.sequences[i];
    t.rows.push_back({std::to_string(i + 1), std::to_string(q.count), std::to_string(q.kernels.size()),
                      format_duration(q.gpu_kernel_duration_ns), format_duration(q.cpu_op_duration_ns),
                      format_duration(q.count > 0 ? q.gpu_kernel_duration_ns / q.count : 0), q.op});
  }
  s.table("Patterns, most frequent first (GPU kernel time and CPU op time summed over the instances):", std::move(t),
          "no op launched enough GPU events");
  for (std::size_t i = 0; i < k.sequences.size(); ++i)
    s.para(fmt::format("#{}: {}", i + 1, k.sequences[i].pattern()));
  return s;
}

}  // namespace moetrace::analyzer
