// The report's efficiency section (efficiency.h): the GPUs matched in the
// datasheet table (gpu_peaks.h), the expert GEMMs' TFLOP/s and the
// collectives' bandwidths per rank and per (rank, MoE layer), and the
// collectives' wait apart from transfer per kind and size. The JSON report
// holds every row; the text, Markdown and HTML reports list the ranks as
// ranks_to_list picks them.
#include <fmt/format.h>

#include <map>
#include <set>

#include "report_sections.h"

namespace moetrace::analyzer {

namespace {

nlohmann::json known(double v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); }
nlohmann::json known(std::int64_t v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); }
nlohmann::json known(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

nlohmann::json comm_json(const CommFigures& c) {
  return {{"ops", c.ops},
          {"ops_with_bytes", c.ops_with_bytes},
          {"bytes", known(c.bytes)},
          {"time_ns", c.time_ns},
          {"group_size", c.group_size > 0 ? nlohmann::json(c.group_size) : nlohmann::json(nullptr)},
          {"algbw_gbps", known(c.algbw_gbps)},
          {"busbw_gbps", known(c.busbw_gbps)},
          {"link_gbps", known(c.link_gbps)},
          {"percent_of_link", known(c.percent_of_link)}};
}

nlohmann::json row_json(const EfficiencyRow& r, bool layer) {
  const auto& g = r.expert;
  nlohmann::json j = {{"rank", r.rank}};
  if (layer) j["layer"] = r.layer;
  j["expert"] = {{"ops", g.ops},
                 {"ops_with_flops", g.ops_with_flops},
                 {"flops", known(g.flops)},
                 {"time_ns", g.time_ns},
                 {"achieved_tflops", known(g.achieved_tflops)},
                 {"peak_tflops", known(g.peak_tflops)},
                 {"percent_of_peak", known(g.percent_of_peak)}};
  j["all_to_all"] = comm_json(r.all_to_all);
  j["all_reduce"] = comm_json(r.all_reduce);
  return j;
}

std::string tflops_cell(const GemmFigures& g) {
  if (g.ops == 0) return "-";
  if (g.flops < 0) return "no FLOPs";
  return g.achieved_tflops >= 0 ? fmt::format("{:.1f}", g.achieved_tflops) : "-";
}
std::string percent_cell(double p) { return p >= 0 ? fmt::format("{:.1f}%", p) : "-"; }
std::string gbps_cell(const CommFigures& c, double v) {
  if (c.ops == 0) return "-";
  if (c.bytes < 0) return "no bytes";
  return v >= 0 ? fmt::format("{:.1f}", v) : "-";
}

std::string bucket_label(std::int64_t min_bytes) {
  if (min_bytes < 0) return "size unknown";
  if (min_bytes == 0) return "0 B";
  return format_bytes(min_bytes) + " - " + format_bytes(2 * min_bytes);
}

std::string peaks_line(const GpuPeaks& p, PeakDtype d) {
  const auto t = p.tflops(d);
  return fmt::format("{}: dense {} {}, HBM {}, {} {}", p.name, peak_dtype_name(d),
                     t ? fmt::format("{:g} TFLOP/s", *t) : std::string("not in the table"),
                     p.hbm_gbps ? fmt::format("{:g} GB/s", *p.hbm_gbps) : std::string("not in the table"), p.link,
                     p.link_gbps ? fmt::format("{:g} GB/s per direction", *p.link_gbps) : std::string("not in the table"));
}

}  // namespace

namespace report_detail {

nlohmann::json efficiency_json(const Analyses& a) {
  const auto& e = a.efficiency;
  nlohmann::json devices = nlohmann::json::array(), gpus = nlohmann::json::array();
  std::set<std::string_view> seen;
  for (const auto& d : e.devices) {
    devices.push_back({{"rank", d.rank}, {"device", d.device},
                       {"gpu", d.peaks ? nlohmann::json(d.peaks->name) : nlohmann::json(nullptr)},
                       {"shared", d.shared}});
    if (d.peaks && seen.insert(d.peaks->name).second)
      gpus.push_back({{"name", d.peaks->name},
                      {"bf16_tflops", known(d.peaks->bf16_tflops)},
                      {"fp8_tflops", known(d.peaks->fp8_tflops)},
                      {"tf32_tflops", known(d.peaks->tf32_tflops)},
                      {"fp32_tflops", known(d.peaks->fp32_tflops)},
                      {"hbm_gbps", known(d.peaks->hbm_gbps)},
                      {"link_gbps", known(d.peaks->link_gbps)},
                      {"link", d.peaks->link},
                      {"source", d.peaks->source},
                      {"checked", d.peaks->checked}});
  }
  nlohmann::json layers = nlohmann::json::array(), ranks = nlohmann::json::array(), buckets = nlohmann::json::array();
  for (const auto& r : e.layers) layers.push_back(row_json(r, true));
  for (const auto& r : e.ranks) ranks.push_back(row_json(r, false));
  for (const auto& b : e.collectives)
    buckets.push_back({{"kind", b.kind},
                       {"min_bytes", known(b.min_bytes)},
                       {"instances", b.instances},
                       {"calls", b.calls},
                       {"unpaired_calls", b.unpaired_calls},
                       {"bytes", b.bytes},
                       {"wait_total_ns", b.wait_total_ns},
                       {"wait_median_ns", b.wait_median_ns},
                       {"transfer_total_ns", b.transfer_total_ns},
                       {"transfer_median_ns", b.transfer_median_ns},
                       {"skew_total_ns", b.skew_total_ns},
                       {"group_size", b.group_size > 0 ? nlohmann::json(b.group_size) : nlohmann::json(nullptr)},
                       {"busbw_gbps", known(b.busbw_gbps)},
                       {"percent_of_link", known(b.percent_of_link)}});
  nlohmann::json j = {{"dtype", peak_dtype_name(e.dtype)},
                      {"dtype_assumed", e.dtype_assumed},
                      {"dtype_source", e.dtype_source},
                      {"devices", devices},
                      {"unmatched_devices", e.unmatched_devices},
                      {"gpus", gpus},
                      {"layers", layers},
                      {"ranks", ranks},
                      {"collectives", {{"wait_separated", e.wait_separated}, {"buckets", buckets}}}};
  if (e.devices.empty() && !a.not_computed_reason.empty()) j["not_computed"] = a.not_computed_reason;
  return j;
}

Section efficiency_section(const Analyses& a, const ReportOptions& o) {
  const auto& e = a.efficiency;
  Section s{"efficiency", "Efficiency against datasheet peaks", {}};
  if (e.devices.empty()) {
    s.para(a.not_computed_reason.empty() ? std::string("No ranks in the trace: no efficiency figures.")
                                         : "Not computed: " + a.not_computed_reason + ".");
    return s;
  }
  s.para("Expert GEMMs: their FLOPs over the union of their GPU time; all-to-all and all-reduce: bytes over the union "
         "of their GPU time (algbw) and NCCL's bus bandwidth, algbw x 2(n-1)/n for an all-reduce and x (n-1)/n for "
         "an all-to-all (nccl-tests, doc/PERFORMANCE.md), n the group size; % of the GPU's dense datasheet peak and "
         "of its link's bandwidth per direction (efficiency.h, gpu_peaks.h).");
  s.para(fmt::format("Peak for {}: {}.", peak_dtype_name(e.dtype), e.dtype_source));
  std::map<std::string, std::vector<std::int32_t>> by_device;
  std::vector<std::int32_t> shared;
  for (const auto& d : e.devices) {
    by_device[d.device].push_back(d.rank);
    if (d.shared) shared.push_back(d.rank);
  }
  for (const auto& [name, ranks] : by_device) {
    const GpuPeaks* p = nullptr;
    for (const auto& d : e.devices)
      if (d.device == name) p = d.peaks;
    const auto label = name.empty() ? std::string("no device recorded") : "\"" + name + "\"";
    const auto who = ranks.size() == 1 ? fmt::format("rank {}", ranks.front())
                                       : fmt::format("{} ranks ({}..{})", ranks.size(), ranks.front(), ranks.back());
    // A name the table does not know, identified by the device's properties.
    const std::string by_properties =
        p && !find_gpu_peaks(name) ? " (identified by its compute capability, units and memory)" : "";
    s.para(p ? fmt::format("{} ({}): {}{}.", label, who, peaks_line(*p, e.dtype), by_properties)
             : fmt::format("{} ({}): not found in the datasheet table; the figures are given without % of peak.",
                           label, who));
  }
  if (!shared.empty())
    s.para(fmt::format("{} rank{} share{} a GPU with another rank (an emulated communicator): {} collectives are copies "
                       "within one GPU, which the link does not bound; no % of link for {}.",
                       shared.size(), shared.size() == 1 ? "" : "s", shared.size() == 1 ? "s" : "",
                       shared.size() == 1 ? "its" : "their", shared.size() == 1 ? "it" : "them"));

  const auto [picked, note] = ranks_to_list(
      e.ranks, o.per_rank, "expert TFLOP/s", [](const auto& r) { return r.expert.achieved_tflops; },
      [](const auto& r) { return tflops_cell(r.expert); });
  std::set<std::int32_t> listed;
  Table t{{"rank", "expert TFLOP/s", "% of peak", "a2a algbw GB/s", "a2a busbw GB/s", "a2a % of link",
           "all-reduce algbw GB/s", "all-reduce busbw GB/s", "all-reduce % of link"}, {}};
  for (auto i : picked) {
    const auto& r = e.ranks[i];
    listed.insert(r.rank);
    t.rows.push_back({std::to_string(r.rank), tflops_cell(r.expert), percent_cell(r.expert.percent_of_peak),
                      gbps_cell(r.all_to_all, r.all_to_all.algbw_gbps), gbps_cell(r.all_to_all, r.all_to_all.busbw_gbps),
                      percent_cell(r.all_to_all.percent_of_link), gbps_cell(r.all_reduce, r.all_reduce.algbw_gbps),
                      gbps_cell(r.all_reduce, r.all_reduce.busbw_gbps), percent_cell(r.all_reduce.percent_of_link)});
  }
  s.table("Per rank (every op of the rank, in MoE layers or not; -: none of that kind, or unknown):", std::move(t),
          "the trace has no ops");
  if (!note.empty()) s.para(note);

  Table l{{"rank", "layer", "expert FLOPs", "expert time", "TFLOP/s", "% of peak", "a2a bytes", "a2a time",
           "a2a busbw GB/s", "a2a % of link", "all-reduce busbw GB/s"}, {}};
  std::int64_t without_flops = 0;
  for (const auto& r : e.layers) {
    if (r.expert.ops > 0 && r.expert.flops < 0) ++without_flops;
    if (!listed.contains(r.rank)) continue;
    const auto& g = r.expert;
    l.rows.push_back({std::to_string(r.rank), std::to_string(r.layer),
                      g.ops == 0 ? "-" : g.flops < 0 ? "no FLOPs" : fmt::format("{:.3g}", g.flops),
                      g.ops == 0 ? "-" : format_duration(g.time_ns), tflops_cell(g), percent_cell(g.percent_of_peak),
                      r.all_to_all.bytes < 0 ? "-" : format_bytes(r.all_to_all.bytes),
                      r.all_to_all.ops == 0 ? "-" : format_duration(r.all_to_all.time_ns),
                      gbps_cell(r.all_to_all, r.all_to_all.busbw_gbps), percent_cell(r.all_to_all.percent_of_link),
                      gbps_cell(r.all_reduce, r.all_reduce.busbw_gbps)});
  }
  s.table("Per rank and MoE layer:", std::move(l), "no op carries an MoE layer");
  if (without_flops > 0)
    s.para(fmt::format("{} (rank, layer) pair{} record{} no FLOPs for {} expert ops: no TFLOP/s for {}.", without_flops,
                       without_flops == 1 ? "" : "s", without_flops == 1 ? "s" : "", without_flops == 1 ? "its" : "their",
                       without_flops == 1 ? "it" : "them"));

  if (!e.wait_separated && !e.collectives.empty())
    s.para("No collective was paired across ranks (one rank recorded, or no call matched): waiting for the slowest "
           "participant cannot be separated, and each call's whole duration counts as transfer.");
  Table c{{"collective", "size", "instances", "calls", "wait median", "wait total", "transfer median",
           "transfer total", "busbw GB/s (transfer)", "% of link", "skew total"}, {}};
  for (const auto& b : e.collectives)
    c.rows.push_back({b.kind, bucket_label(b.min_bytes), std::to_string(b.instances), std::to_string(b.calls),
                      format_duration(b.wait_median_ns), format_duration(b.wait_total_ns),
                      format_duration(b.transfer_median_ns), format_duration(b.transfer_total_ns),
                      b.busbw_gbps >= 0 ? fmt::format("{:.1f}", b.busbw_gbps) : "-", percent_cell(b.percent_of_link),
                      format_duration(b.skew_total_ns)});
  s.table("Collectives by kind and size (powers of 2 of the instance's largest call): on each participant, the time "
          "before the last participant was ready is waiting, the rest transfer (medians over calls); busbw of the "
          "transfer part; skew: the collective waits' sum of (last ready - ready), which also counts waiting before "
          "a late call started:",
          std::move(c), "no all-to-all or all-reduce in the trace");
  return s;
}

}  // namespace report_detail
}  // namespace moetrace::analyzer
