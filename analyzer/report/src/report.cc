#include "moetrace/analyzer/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <ostream>

#include "moetrace/analyzer/run_loader.h"
#include "report_sections.h"

namespace moetrace::analyzer {

nlohmann::json run_json(const RunInfo& run) {
  nlohmann::json config = nlohmann::json::object();
  for (const auto& [k, v] : run.config) config[k] = v;
  return {
      {"path", run.path},
      {"name", run.name},
      {"backend", run.backend},
      {"variant", run.variant},
      {"simulated", run.simulated},
      {"world_size", run.world_size},
      {"host", run.host},
      {"moetrace_version", run.moetrace_version},
      {"schema_version", run.schema_version},
      {"finalized", run.finalized},
      {"start_ns", run.start_ns},
      {"end_ns", run.end_ns},
      {"dropped_records", run.dropped_records},
      {"integrity", run.integrity},
      {"damage", run_damage(run)},
      {"warnings", run_warnings(run)},
      {"config", config},
  };
}

nlohmann::json time_split_json(const TimeSplit& t) {
  nlohmann::json categories = nlohmann::json::object();
  nlohmann::json exclusive = nlohmann::json::object();
  for (int c = 0; c < kNumCategories; ++c) {
    const auto name = std::string(category_name(static_cast<Category>(c)));
    categories[name] = t.category_ns[static_cast<std::size_t>(c)];
    exclusive[name] = t.exclusive_ns[static_cast<std::size_t>(c)];
  }
  nlohmann::json j = {{"category_ns", categories}, {"exclusive_ns", exclusive}};
  put_split_totals(t, report_detail::json_put(j));
  return j;
}

namespace {

// One object per row of `rows`: the row's time split (its member `t`) with
// the keys that say which row it is, `keys(row)`.
template <class Rows, class Keys>
nlohmann::json split_rows_json(const Rows& rows, Keys keys) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : rows) {
    auto row = time_split_json(r.t);
    row.update(keys(r));
    a.push_back(std::move(row));
  }
  return a;
}

}  // namespace

nlohmann::json breakdown_json(const Trace& trace, const Breakdown& b, const ReportOptions& options) {
  nlohmann::json j;
  j["has_op_ranges"] = b.has_op_ranges;
  j["summary"] = {
      {"iteration", time_split_json(b.iteration_total)},
      {"moe_layer", time_split_json(b.moe_total)},
      {"moe_share_of_iteration", b.moe_share_of_iteration()},
      {"all_to_all_share_of_moe", b.all_to_all_share_of_moe()},
      {"all_reduce_share_of_moe", b.all_reduce_share_of_moe()},
      {"all_to_all_share_of_iteration", b.all_to_all_share_of_iteration()},
      {"all_reduce_share_of_iteration", b.all_reduce_share_of_iteration()},
      {"iterations", b.iterations.size()},
  };
  // A forward-only run (inference, evaluation) has no backward split.
  j["forward_only"] = b.forward_only();
  if (b.has_op_ranges && b.layers.empty()) j["no_layers_reason"] = report_detail::no_moe_layer_reason(trace);
  auto& layers = j["layers"] = nlohmann::json::array();
  for (const auto& l : b.layers) {
    nlohmann::json row = {
        {"layer", l.layer},
        {"ranks", l.ranks},
        {"iterations", l.iterations},
        {"mean_window_ns", l.mean_window_ns},
        {"max_window_ns", l.max_window_ns},
        {"slowest_rank", l.slowest_rank},
        {"total", time_split_json(l.total)},
        {"forward", time_split_json(l.forward)},
    };
    if (!b.forward_only()) row["backward"] = time_split_json(l.backward);
    layers.push_back(std::move(row));
  }
  j["rank_window"] = {{"name", rank_window_name(b.rank_window)},
                      {"description", rank_window_description(b.rank_window)}};
  j["ranks"] = split_rows_json(b.ranks, [](const auto& r) -> nlohmann::json {
    return {{"rank", r.rank}, {"unattributed_ns", r.unattributed_ns}};
  });
  if (options.per_iteration)
    j["iterations"] = split_rows_json(b.iterations, [](const auto& it) -> nlohmann::json {
      return {{"rank", it.rank}, {"iteration", it.iteration}, {"moe_layer_ns", it.moe_layer_ns}};
    });
  if (options.per_rank)
    j["rows"] = split_rows_json(b.rows, [](const auto& r) -> nlohmann::json {
      return {{"rank", r.rank},
              {"layer", r.layer},
              {"iteration", r.iteration},
              {"phase", std::string(phase_name(r.phase))}};
    });
  return j;
}

nlohmann::json projection_json(const ProjectionStats& p) {
  return {{"ran", p.ran},
          {"activities", p.activities},
          {"attributed_in_trace", p.attributed_in_trace},
          {"projected", p.projected},
          {"unattributed", p.unattributed()},
          {"no_correlation", p.no_correlation},
          {"no_api_call", p.no_api_call},
          {"outside_ranges", p.outside_ranges},
          {"ops_retimed", p.ops_retimed}};
}

namespace {

// JSON has no infinity: an unbounded ratio is written as null.
nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json class_bytes_json(const MemoryClassBytes& c, bool missing_as_null) {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < kNumMemoryClasses; ++i) {
    const auto v = c[static_cast<std::size_t>(i)];
    j[std::string(memory_class_name(static_cast<MemoryClass>(i)))] =
        missing_as_null && v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v);
  }
  return j;
}

nlohmann::json points_json(const std::vector<MemoryPoint>& p) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& x : p) a.push_back({x.ts_ns, x.bytes});
  return a;
}

}  // namespace

// Rows whose JSON is their fields under their own names.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LocalityPoint, distance, pairs, cosine_similarity, l1_distance,
                                   relative_l1_error, heaviest_predicted)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LocalityPair, layer, from_iteration, to_iteration, cosine_similarity,
                                   l1_distance, relative_l1_error, heaviest_from, heaviest_to)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(NvtxNameSummary, domain, name, ranges, host_ns, activities, gpu_busy_ns)

nlohmann::json memory_json(const MemoryAnalysis& m, const ReportOptions& options) {
  nlohmann::json j = {{"has_allocations", m.has_allocations},
                      {"has_buffer_usage", m.has_buffer_usage},
                      {"peak_bytes", m.peak_bytes},
                      {"peak_rank", m.peak_rank},
                      {"memory_bubble_bytes_ns", m.memory_bubble_bytes_ns},
                      {"allocated_bytes_ns", m.allocated_bytes_ns},
                      {"buffer_bytes_ns", m.buffer_bytes_ns},
                      {"bubble_fraction", m.bubble_fraction()}};
  auto& ranks = j["ranks"] = nlohmann::json::array();
  for (const auto& r : m.ranks) {
    const auto alloc = downsample_max(r.allocated, options.timeline_points);
    const auto idle = downsample_max(r.idle, options.timeline_points);
    ranks.push_back({{"rank", r.rank},
                     {"from_events", r.from_events},
                     {"peak_bytes", r.peak_bytes},
                     {"peak_ns", r.peak_ns},
                     {"peak_by_class", class_bytes_json(r.peak_by_class, false)},
                     {"allocated_bytes_ns", r.allocated_bytes_ns},
                     {"buffer_bytes_ns", r.buffer_bytes_ns},
                     {"memory_bubble_bytes_ns", r.memory_bubble_bytes_ns},
                     {"unmatched_frees", r.unmatched_frees},
                     {"timeline",
                      {{"downsampled", alloc.size() < r.allocated.size() || idle.size() < r.idle.size()},
                       {"allocated", points_json(alloc)},
                       {"idle", points_json(idle)}}}});
  }
  auto& tags = j["tags"] = nlohmann::json::array();
  for (const auto& t : m.tags)
    tags.push_back({{"tag", t.tag},
                    {"memory_class", memory_class_name(t.memory_class)},
                    {"buffers", t.buffers},
                    {"max_bytes", t.max_bytes},
                    {"allocated_bytes_ns", t.allocated_bytes_ns},
                    {"memory_bubble_bytes_ns", t.memory_bubble_bytes_ns},
                    {"bubble_fraction", t.bubble_fraction()}});
  const auto top = largest_bubbles(m, static_cast<std::size_t>(std::max(0, options.top_buffers)));
  auto& buffers = j["top_buffers"] = nlohmann::json::array();
  for (const auto* b : top)
    buffers.push_back({{"buffer", b->buffer.value},
                       {"rank", b->rank.value},
                       {"tag", b->tag},
                       {"memory_class", memory_class_name(b->memory_class)},
                       {"layer", b->layer},
                       {"chunk", b->chunk},
                       {"bytes", b->bytes},
                       {"alloc_ns", b->alloc_ns},
                       {"free_ns", b->free_ns},
                       {"ops", b->ops},
                       {"used_ns", b->used_ns},
                       {"bubble_ns", b->bubble_ns},
                       {"memory_bubble_bytes_ns", b->memory_bubble_bytes_ns()}});
  auto& layers = j["layers"] = nlohmann::json::array();
  for (const auto& l : m.layers)
    layers.push_back({{"layer", l.layer},
                      {"experts", l.experts},
                      {"experts_per_rank", l.experts_per_rank},
                      {"model_dim", l.model_dim},
                      {"hidden_dim", l.hidden_dim},
                      {"tokens", l.tokens},
                      {"partitions", l.partitions},
                      {"elem_bytes", l.elem_bytes},
                      {"model_states_bytes", l.model_states_bytes},
                      {"activations_bytes", l.activations_bytes},
                      {"temporary_buffers_bytes", l.temporary_buffers_bytes},
                      {"pipelined_buffers_bytes", l.pipelined_buffers_bytes},
                      {"reuse_saving_bytes", l.reuse_saving_bytes},
                      {"saving_ratio", l.saving_ratio},
                      {"measured_peak_bytes", class_bytes_json(l.measured_peak_bytes, true)},
                      {"memory_bubble_bytes_ns", l.memory_bubble_bytes_ns}});
  return j;
}

nlohmann::json expert_load_json(const ExpertLoadAnalysis& a, const ReportOptions& options) {
  nlohmann::json j = {{"has_load", a.has_load}, {"experts", a.experts}, {"devices", a.devices}};
  auto& layers = j["layers"] = nlohmann::json::array();
  for (const auto& l : a.layers)
    layers.push_back({{"layer", l.layer},
                      {"iterations", l.iterations},
                      {"experts", l.experts},
                      {"devices", l.devices},
                      {"tokens_per_expert", l.tokens_per_expert},
                      {"expert_max_over_mean", l.expert_max_over_mean},
                      {"expert_cv", l.expert_cv},
                      {"device_max_over_mean_home", l.device_max_over_mean_home},
                      {"device_max_over_mean", l.device_max_over_mean},
                      {"balance_degree_home", l.balance_degree_home},
                      {"balance_degree", l.balance_degree},
                      {"rb", finite_or_null(l.rb)},
                      {"has_placement", l.has_placement},
                      {"imbalance_ns", l.imbalance_ns},
                      {"busiest_expert_compute_ns", l.busiest_expert_compute_ns},
                      {"mean_expert_compute_ns", l.mean_expert_compute_ns}});
  if (options.per_iteration) {
    auto& rows = j["rows"] = nlohmann::json::array();
    for (const auto& r : a.rows)
      rows.push_back({{"layer", r.layer},
                      {"iteration", r.iteration},
                      {"tokens_per_expert", r.tokens_per_expert},
                      {"tokens_per_device_home", r.tokens_per_device_home},
                      {"tokens_per_device", r.tokens_per_device},
                      {"received_per_device", r.received_per_device},
                      {"has_placement", r.has_placement},
                      {"copies", r.copies},
                      {"total_tokens", r.total_tokens},
                      {"heaviest_expert", r.heaviest_expert},
                      {"expert_max_over_mean", r.expert_max_over_mean},
                      {"expert_cv", r.expert_cv},
                      {"busiest_rank", r.busiest_rank},
                      {"device_max_over_mean_home", r.device_max_over_mean_home},
                      {"device_max_over_mean", r.device_max_over_mean},
                      {"balance_degree_home", r.balance_degree_home},
                      {"balance_degree", r.balance_degree},
                      {"rb", finite_or_null(r.rb)},
                      {"slowest_rank", r.slowest_rank},
                      {"slowest_window_ns", r.slowest_window_ns},
                      {"mean_window_ns", r.mean_window_ns},
                      {"imbalance_ns", r.imbalance_ns()},
                      {"busiest_expert_compute_ns", r.busiest_expert_compute_ns},
                      {"mean_expert_compute_ns", r.mean_expert_compute_ns}});
  }
  return j;
}

nlohmann::json locality_json(const LocalityAnalysis& a, const ReportOptions& options) {
  nlohmann::json j = {{"has_load", a.has_load}, {"max_distance", a.max_distance}};
  auto& layers = j["layers"] = nlohmann::json::array();
  for (const auto& l : a.layers) {
    nlohmann::json curve = nlohmann::json::array();
    for (const auto& p : l.curve) curve.push_back(nlohmann::json(p));
    layers.push_back({{"layer", l.layer},
                      {"iterations", l.iterations},
                      {"consecutive", nlohmann::json(l.consecutive)},
                      {"min_cosine_similarity", l.min_cosine_similarity},
                      {"curve", curve}});
  }
  auto& curve = j["curve"] = nlohmann::json::array();
  for (const auto& p : a.curve) curve.push_back(nlohmann::json(p));
  if (options.per_iteration) j["pairs"] = a.pairs;
  return j;
}

nlohmann::json nvtx_json(const NvtxAnalysis& n) {
  return {{"ranges", n.ranges}, {"ranges_with_gpu", n.ranges_with_gpu}, {"names", n.names}};
}

nlohmann::json recommendations_json(const Analyses& a) {
  if (a.recommendations) return recommendations_to_json(*a.recommendations);
  return {{"status", "not_computed"}, {"items", nlohmann::json::array()}};
}

nlohmann::json report_json(const Trace& trace, const Analyses& a, const ReportOptions& options) {
  nlohmann::json j = {
      {"report_version", kReportVersion},
      {"run", run_json(trace.run)},
      {"projection", projection_json(trace.projection)},
      {"recognition", report_detail::recognition_json(trace, a)},
      {"nvtx", nvtx_json(a.nvtx)},
      {"breakdown", breakdown_json(trace, a.breakdown, options)},
      {"launch_queue", launch_queue_json(a.launch_queue, options)},
      {"critical_path", critical_path_json(a.critical_path, a.critical_path_across_ranks, a.critical_path_window)},
      {"efficiency", report_detail::efficiency_json(a)},
      {"kernel_sequences", kernel_sequences_json(a.kernel_sequences)},
      {"memory", memory_json(a.memory, options)},
      {"expert_load", expert_load_json(a.expert_load, options)},
      {"locality", locality_json(a.locality, options)},
      {"fitted_models", fitted_models_json(trace, a.cost_model)},
      {"recommendations", recommendations_json(a)},
  };
  if (report_detail::has_ranks_section(trace)) {
    j["ranks"] = {{"waits", rank_waits_json(a.rank_waits)}};
    if (trace.files) j["ranks"]["run"] = rank_files_json(*trace.files);
  }
  return j;
}

namespace report_detail {

std::string ranks_recorded(const Trace& trace) {
  const auto world = trace.run.world_size;
  const auto recorded = static_cast<int>(trace.ranks.size());
  if (recorded > 0 && recorded < world) return fmt::format("{} of {} ranks", recorded, world);
  return fmt::format("{} rank{}", world, world == 1 ? "" : "s");
}

}  // namespace report_detail

void write_text_report(std::ostream& out, const Trace& trace, const Analyses& a,
                       const ReportOptions& options) {
  const auto& b = a.breakdown;
  const auto& run = trace.run;
  out << "moetrace report: " << run.path << "\n";
  out << fmt::format("run: {}  backend {}{}  variant {}  {}{}\n",
                     run.name.empty() ? "(unnamed)" : run.name, run.backend,
                     run.simulated ? " (simulated)" : "", run.variant.empty() ? "-" : run.variant,
                     report_detail::ranks_recorded(trace), run.finalized ? "" : "  [not finalized: the writer did not close]");
  for (const auto& w : run_warnings(run)) out << "warning: " << w << "\n";
  report_detail::render_text(out, report_detail::breakdown_section(trace, b, options));
  for (const auto& s : report_detail::analysis_sections(trace, a, options)) report_detail::render_text(out, s);
}

void write_markdown_report(std::ostream& out, const Trace& trace, const Analyses& a,
                           const ReportOptions& options) {
  const auto& run = trace.run;
  out << "# moetrace report: " << run.path << "\n\n";
  out << fmt::format("Run **{}**, backend `{}`{}, variant `{}`, {}.{}\n",
                     run.name.empty() ? "(unnamed)" : run.name, run.backend, run.simulated ? " (simulated)" : "",
                     run.variant.empty() ? "-" : run.variant, report_detail::ranks_recorded(trace),
                     run.finalized ? "" : " Not finalized: the writer did not close.");
  for (const auto& w : run_warnings(run)) out << "\n**Warning:** " << w << "\n";
  report_detail::render_markdown(out, report_detail::breakdown_section(trace, a.breakdown, options));
  for (const auto& s : report_detail::analysis_sections(trace, a, options)) report_detail::render_markdown(out, s);
}

namespace {

std::map<std::string, std::int64_t> skipped_counts(const std::vector<std::pair<std::string, std::string>>& config) {
  std::map<std::string, std::int64_t> skipped;
  constexpr std::string_view kSkipped = "import.skipped.";
  for (const auto& [k, v] : config)
    if (k.starts_with(kSkipped)) {
      std::int64_t n = 0;
      const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
      if (r.ec == std::errc()) skipped[k.substr(kSkipped.size())] = n;
    }
  return skipped;
}

std::string integrity_warning(std::string_view integrity) {
  if (integrity != "not recorded") return "";
  return "the trace has no integrity record (an older writer, or the run was killed before it closed): checked "
         "by references and value ranges only, rows lost from a table would go unnoticed";
}

// One file's warnings (a run of one file, or one FileState of several).
std::vector<std::string> file_warnings(std::int64_t dropped_records, const std::vector<std::string>& damage,
                                       std::string_view integrity,
                                       const std::vector<std::pair<std::string, std::string>>& config) {
  std::vector<std::string> w;
  if (dropped_records > 0)
    w.push_back(fmt::format("{} activity records were dropped while tracing; times may be incomplete",
                            dropped_records));
  for (const auto& d : damage) w.push_back("damaged trace: " + d);
  if (auto i = integrity_warning(integrity); !i.empty()) w.push_back(std::move(i));
  for (auto& line : unread_device_warnings(skipped_counts(config))) w.push_back(std::move(line));
  return w;
}

}  // namespace

std::vector<std::string> run_warnings(const RunInfo& run) {
  if (run.file_states.empty()) return file_warnings(run.dropped_records, run.damage, run.integrity, run.config);
  std::vector<std::string> w;
  for (const auto& f : run.file_states)
    for (const auto& line : file_warnings(f.dropped_records, f.damage, f.integrity, f.skipped))
      w.push_back(f.path + ": " + line);
  return w;
}

std::vector<std::string> run_damage(const RunInfo& run) {
  std::vector<std::string> out = run.damage;
  for (const auto& f : run.file_states)
    for (const auto& d : f.damage) out.push_back(f.path + ": " + d);
  return out;
}

std::vector<std::string> unread_device_warnings(const RunInfo& run) {
  if (run.file_states.empty()) return unread_device_warnings(skipped_counts(run.config));
  std::vector<std::string> w;
  for (const auto& f : run.file_states)
    for (const auto& line : unread_device_warnings(skipped_counts(f.skipped))) w.push_back(f.path + ": " + line);
  return w;
}

std::vector<std::string> unread_device_warnings(const std::map<std::string, std::int64_t>& skipped_by_reason) {
  // Kineto's activity-type names by device (libkineto's ActivityType
  // strings: "mtia_runtime", "mtia_ccp_events", "xpu_runtime", "hpu_op", ...).
  struct Family {
    std::string_view prefix, device;
  };
  static constexpr Family kFamilies[] = {{"mtia_", "MTIA"},          {"xpu_", "Intel XPU"},
                                         {"hpu_", "Intel Gaudi (HPU)"}, {"mlu_", "Cambricon MLU"},
                                         {"gcu_", "Enflame GCU"},       {"privateuse1_", "PrivateUse1"}};
  std::vector<std::string> out;
  for (const auto& f : kFamilies) {
    std::int64_t total = 0;
    std::vector<std::string> parts;
    for (const auto& [reason, n] : skipped_by_reason)
      if (reason.starts_with(f.prefix) && n > 0) {
        total += n;
        parts.push_back(fmt::format("{} {}", reason, n));
      }
    if (total > 0)
      out.push_back(fmt::format("{} events of {} devices were not imported ({}): moetrace reads the activity of "
                                "CUDA devices only, so their device timeline is missing from every number",
                                total, f.device, fmt::join(parts, ", ")));
  }
  return out;
}

std::string integrity_warning(const RunInfo& run) { return integrity_warning(std::string_view(run.integrity)); }

void write_fitted_models_text(std::ostream& out, const CostModel& model) {
  report_detail::render_text(out, report_detail::fitted_models_section(model));
}

std::vector<ReportSection> report_sections(const Trace& trace, const Analyses& a, const ReportOptions& options) {
  return report_detail::analysis_sections(trace, a, options);
}

void write_report(std::ostream& out, const Trace& trace, const Analyses& a, const ReportOptions& options) {
  switch (options.format) {
    case ReportFormat::kText: write_text_report(out, trace, a, options); break;
    case ReportFormat::kJson:
      // Names come from the trace as recorded and need not be UTF-8: invalid
      // bytes become U+FFFD rather than an exception.
      out << report_json(trace, a, options).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      break;
    case ReportFormat::kMarkdown: write_markdown_report(out, trace, a, options); break;
    case ReportFormat::kHtml: write_html_report(out, trace, a, options); break;
  }
}

}  // namespace moetrace::analyzer
