// The hardware model of the recommenders and the trace what-ifs (hardware.h).
#include "hardware.h"

#include <fmt/format.h>

#include "moetrace/analyzer/gpu_peaks.h"
#include "moetrace/schema/error.h"

namespace moetrace::analyzer::detail {

// `h` with its expert GEMMs and its all-to-all slower by the given factors
// (1 + f): a corner of the fits' uncertainty.
Hardware scaled(const Hardware& h, double expert, double a2a) {
  Hardware out = h;
  auto scale_compute = [&](sim::ComputeCost& c) {
    c.alpha_s *= 1 + expert;
    c.seconds_per_flop *= 1 + expert;
    c.gemm_seconds_per_byte *= 1 + expert;
  };
  if (auto it = out.model.compute_by_kind.find(OpKind::kExpertFfn); it != out.model.compute_by_kind.end())
    scale_compute(it->second);
  else
    scale_compute(out.model.compute);
  for (auto& pt : out.model.collective(plan::CollectiveKind::kAllToAllV).points) {
    pt.alpha_s *= 1 + a2a;
    pt.beta_s *= 1 + a2a;
  }
  return out;
}

// The terms of `m` the recommenders read, as the report prints them
// (schemas/recommendations.schema.json, hardware_model).
nlohmann::json hardware_terms(const sim::CostModel& m, int ranks) {
  const auto& ex = m.compute_cost(OpKind::kExpertFfn);
  const auto a2a = m.collective(plan::CollectiveKind::kAllToAllV).at(std::max(2, ranks));
  return {{"name", m.name},
          {"expert_alpha_per_gemm_s", ex.alpha_s},
          {"expert_seconds_per_flop", ex.seconds_per_flop},
          {"expert_gemm_seconds_per_byte", ex.gemm_seconds_per_byte},
          {"all_to_all", {{"ranks", ranks}, {"alpha_s", a2a.alpha_s}, {"beta_s_per_byte", a2a.beta_s}}},
          {"link_sharing", std::string(sim::link_sharing_name(m.link_sharing))},
          {"all_to_all_volume", std::string(sim::all_to_all_volume_name(m.all_to_all_volume))},
          {"interference",
           {{"sigma_comm", m.interference.sigma_comm},
            {"sigma_all", m.interference.sigma_all},
            {"mu_comp", m.interference.mu_comp},
            {"mu_all", m.interference.mu_all},
            {"eta_all", m.interference.eta_all}}}};
}

// The fitted model as the simulator's CostModel, term by term: each term the
// trace measures well enough is fitted (R^2 and x range reported), every
// other one comes from the preset, and the notes say which and why. The
// expert GEMMs need startup separated from throughput (Theorem 1 trades the
// two: a fit of one size only, "mean_rate", or of GEMM counts proportional
// to FLOPs, as forward and backward of one layer are, would make every split
// look free); the all-to-all likewise at the layer's P. nullopt where the
// trace measures none of the two.
std::optional<Hardware> fitted_hardware(const Trace& t, const CostModel& fits, int P, std::vector<std::string>& notes) {
  constexpr const char* kBase = "h100-nvlink-ib";
  std::vector<HardwareFitTerm> terms;
  auto add = [&](std::string term, const LinearFit& f, const std::string& x, std::string why) {
    HardwareFitTerm h{std::move(term), why.empty() ? "fitted" : "preset", x, f.points, f.r2, f.x_min, f.x_max,
                      std::move(why)};
    terms.push_back(std::move(h));
  };
  nlohmann::json j = sim_cost_model_json(t, fits, kBase);
  // Expert GEMMs.
  const CostModelFit* ffn = fits.find_compute("expert_ffn");
  std::string ffn_why;
  if (!ffn || !ffn->launch_fit.usable)
    ffn_why = "no expert GEMM measured";
  else if (ffn->fit.method != "least_squares" || !(ffn->fit.x_max > 2.0 * ffn->fit.x_min))
    ffn_why = fmt::format("{} point{} from {:.3g} to {:.3g} FLOPs cannot separate startup from throughput (sizes "
                          "less than 2x apart)",
                          ffn->fit.points, ffn->fit.points == 1 ? "" : "s", ffn->fit.x_min, ffn->fit.x_max);
  add("expert GEMMs", ffn ? ffn->fit : LinearFit{}, "flops", ffn_why);
  if (!ffn_why.empty() && j.contains("compute_by_kind")) j["compute_by_kind"].erase("expert_ffn");
  // The all-to-all at the layer's P.
  const CostModelFit* a2a = fits.find_collective("all_to_all", P);
  std::string a2a_why;
  if (!a2a || !a2a->fit.usable())
    a2a_why = fmt::format("no all-to-all measured at P = {}", P);
  else if (a2a->fit.method != "least_squares")
    a2a_why = fmt::format("{} point{} of one size: startup and bandwidth inseparable", a2a->fit.points,
                          a2a->fit.points == 1 ? "" : "s");
  add(fmt::format("all-to-all at P = {}", P), a2a ? a2a->fit : LinearFit{}, "bytes", a2a_why);
  if (!a2a_why.empty() && j.contains("collectives") && j["collectives"].contains("all_to_all_v")) {
    auto& points = j["collectives"]["all_to_all_v"];
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& pt : points)
      if (pt.value("ranks", 0) != P) kept.push_back(pt);
    if (kept.empty()) j["collectives"].erase("all_to_all_v");
    else points = kept;
  }
  // The rest as the fit took them (sim_cost_model_json keeps usable fits only).
  for (const auto& f : fits.collectives)
    if (f.kind != "all_to_all")
      add(fmt::format("{} at P = {}", f.kind, f.group_size), f.fit, "bytes",
          f.fit.usable() ? "" : "no usable measurement");
  for (const auto& f : fits.copies) add("copies (" + f.kind + ")", f.fit, "bytes", f.fit.usable() ? "" : "no usable measurement");
  if (!ffn_why.empty() && !a2a_why.empty()) {
    notes.push_back(fmt::format("the trace's own ops fit neither the expert GEMMs ({}) nor the all-to-all ({}): "
                                "its fit is not used; calibrate the hardware with `moetrace run --calibrate`, fit "
                                "that trace with `moetrace fit`, and pass the result with --cost-model",
                                ffn_why, a2a_why));
    return std::nullopt;
  }
  Hardware h;
  try {
    h.model = sim::cost_model_from_json(j.dump());
  } catch (const Error& e) {
    notes.push_back(fmt::format("the fitted cost model is unusable ({}); not used", e.what()));
    return std::nullopt;
  }
  h.info.source = "fitted";
  std::string fitted_list, preset_list;
  for (const auto& term : terms) {
    auto& list = term.source == "fitted" ? fitted_list : preset_list;
    list += (list.empty() ? "" : "; ") +
            (term.source == "fitted"
                 ? fmt::format("{} ({} points, R^2 {:.3f}, {} {:.3g}-{:.3g})", term.term, term.points, term.r2, term.x,
                               term.x_min, term.x_max)
                 : fmt::format("{} ({})", term.term, term.why));
  }
  // The host's issue time per op kind (the ops' launch intervals), where
  // the trace has them: the simulated what-ifs charge it.
  std::string host_list;
  if (j.contains("host_issue"))
    for (const auto& [kind, c] : j["host_issue"].items())
      host_list += fmt::format("{}{} {:.3g} us + {:.3g} us a GEMM launch", host_list.empty() ? "" : ", ", kind,
                               c.value("alpha_s", 0.0) * 1e6, c.value("per_launch_s", 0.0) * 1e6);
  if (!host_list.empty()) fitted_list += "; host issue time per op: " + host_list;
  h.info.description = fmt::format("fitted from the trace: {}; from the {} preset: {}", fitted_list, kBase,
                                   preset_list.empty() ? "everything not measured" : preset_list + "; everything else");
  for (const auto& term : terms)
    if (term.source == "preset" && (term.term == "expert GEMMs" || term.term.starts_with("all-to-all")))
      notes.push_back(fmt::format("{}: the {} preset's term is used ({})", term.term, kBase, term.why));
  h.info.fits = std::move(terms);
  auto rel = [](const LinearFit& f) { return f.mean_time > 0 ? f.residual_rms / f.mean_time : 0.0; };
  if (ffn_why.empty()) h.expert_rel_sd = rel(ffn->fit);
  if (a2a_why.empty()) h.a2a_rel_sd = rel(a2a->fit);
  return h;
}

// The one GPU of the datasheet table (gpu_peaks.h) every recorded device of
// the trace is; nullptr where devices are simulated, unknown or differ.
const GpuPeaks* trace_gpu(const Trace& t) {
  const GpuPeaks* gpu = nullptr;
  for (const auto& d : t.devices) {
    const GpuPeaks* p =
        d.simulated ? nullptr : find_gpu_peaks(d.name, d.compute_major, d.compute_minor, d.sm_count, d.memory_bytes);
    if (!p || (gpu && gpu != p)) return nullptr;
    gpu = p;
  }
  return gpu;
}

// The h100-nvlink-ib preset for another GPU of the table: each rate scaled
// by the datasheets' ratio to the H100 SXM's (gpu_peaks.cc, with their
// sources): GEMMs by the dense BF16 peak, memory-bound kernels and copies on
// the device by HBM, collectives inside a node (P <= 8) by the scale-up
// link. The achieved fractions and the startups stay the preset's (assumed
// alike), the NIC and PCIe too (no datasheet of the table gives them), and a
// rate the table lacks for the GPU stays the H100's. Returns what was scaled
// ("" where nothing was).
std::string scale_to_gpu(sim::CostModel& m, const GpuPeaks& gpu) {
  const GpuPeaks* h100 = find_gpu_peaks("H100 SXM");
  if (!h100 || &gpu == h100) return "";
  std::string said;
  auto ratio = [&](std::optional<double> theirs, std::optional<double> ours, std::string_view what,
                   std::string_view unit) {
    if (!theirs || !ours || !(*theirs > 0) || !(*ours > 0) || *theirs == *ours) return 1.0;
    said += fmt::format("{}{} {:g} / {:g} {}", said.empty() ? "" : ", ", what, *theirs, *ours, unit);
    return *theirs / *ours;
  };
  const double flops = ratio(gpu.bf16_tflops, h100->bf16_tflops, "dense BF16", "TFLOP/s");
  const double hbm = ratio(gpu.hbm_gbps, h100->hbm_gbps, "HBM", "GB/s");
  const double link = ratio(gpu.link_gbps, h100->link_gbps, gpu.link, "GB/s");
  if (said.empty()) return "";
  auto scale = [&](sim::ComputeCost& c) {
    c.seconds_per_flop /= flops;
    c.seconds_per_byte /= hbm;
    c.gemm_seconds_per_byte /= hbm;
  };
  scale(m.compute);
  for (auto& [kind, c] : m.compute_by_kind) scale(c);
  m.copy_d2d.beta_s /= hbm;
  for (auto& coll : m.collectives)
    for (auto& pt : coll.points)
      if (pt.ranks <= 8) pt.beta_s /= link;
  m.name += "@" + std::string(gpu.name);
  return said;
}

Hardware resolve_hardware(const Trace& t, const RecommendOptions& o, const CostModel* fits, int P,
                          std::vector<std::string>& notes) {
  Hardware h;
  if (o.cost_model) {
    h.info.source = "given";
    h.model = *o.cost_model;
    h.info.description = o.cost_model_source.empty() ? fmt::format("cost model {} (given)", h.model.name)
                                                : o.cost_model_source;
    return h;
  }
  CostModel fitted_here;
  auto fitted = [&]() -> std::optional<Hardware> {
    if (!fits) {
      fitted_here = fit_cost_model(t);
      fits = &fitted_here;
    }
    return fitted_hardware(t, *fits, P, notes);
  };
  if (o.prefer_fitted) {
    if (auto f = fitted()) return *f;
    notes.push_back("--cost-model fitted: the trace measures neither the expert GEMMs nor the all-to-all at its P "
                    "well enough to fit them");
  }
  if (const auto json = t.config_value("sim.cost_model_json"); !json.empty()) {
    try {
      h.model = sim::cost_model_from_json(json);
      h.info.source = "trace";
      h.info.description = fmt::format("the cost model this simulated trace ran with ({})", h.model.name);
      return h;
    } catch (const Error& e) {
      notes.push_back(fmt::format("the trace's sim.cost_model_json is unreadable ({}); using a preset", e.what()));
    }
  }
  if (!o.prefer_fitted)
    if (auto f = fitted()) return *f;
  h.model = sim::cost_model_preset("h100-nvlink-ib");
  h.info.source = "preset";
  const GpuPeaks* gpu = trace_gpu(t);
  const std::string scaled = gpu ? scale_to_gpu(h.model, *gpu) : "";
  const std::string preset =
      scaled.empty() ? std::string("the h100-nvlink-ib preset")
                     : fmt::format("the h100-nvlink-ib preset scaled to the trace's {} by the datasheets ({})",
                                   gpu->name, scaled);
  h.info.description = fmt::format("{} (nothing measured: give --cost-model, e.g. the output of `moetrace fit`)",
                                   scaled.empty() ? "preset h100-nvlink-ib" : preset);
  notes.push_back(fmt::format("no cost model measured for this trace: the recommendations use {}; pass "
                              "--cost-model with a fitted model for advice about this hardware",
                              preset));
  return h;
}

}  // namespace moetrace::analyzer::detail
