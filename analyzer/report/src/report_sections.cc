#include "report_sections.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>

namespace moetrace::analyzer::report_detail {

std::string fmt_double(double v, int digits) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "n/a";
  return fmt::format("{:.{}g}", v, digits);
}

namespace {

std::string pct(double fraction) { return fmt::format("{:.1f}%", fraction * 100.0); }

std::string ns_or_dash(std::int64_t ns) { return ns >= 0 ? format_duration(ns) : "-"; }

std::string bytes_or_dash(std::int64_t b) { return b >= 0 ? format_bytes(b) : "-"; }

std::string si(double v, const char* unit) {
  const double a = std::fabs(v);
  if (a >= 1e12) return fmt::format("{:.3g} T{}", v / 1e12, unit);
  if (a >= 1e9) return fmt::format("{:.3g} G{}", v / 1e9, unit);
  if (a >= 1e6) return fmt::format("{:.3g} M{}", v / 1e6, unit);
  if (a >= 1e3) return fmt::format("{:.3g} k{}", v / 1e3, unit);
  return fmt::format("{:.3g} {}", v, unit);
}

std::string seconds(double s) {
  const double a = std::fabs(s);
  if (a < 1e-12) return "0 ns";  // rounding noise of a fit
  if (a >= 1) return fmt::format("{:.3g} s", s);
  if (a >= 1e-3) return fmt::format("{:.3g} ms", s * 1e3);
  if (a >= 1e-6) return fmt::format("{:.3g} us", s * 1e6);
  return fmt::format("{:.3g} ns", s * 1e9);
}

std::vector<std::string> split_row(const TimeSplit& t, std::string first, std::int64_t time) {
  auto p = [&](std::int64_t ns) { return fmt::format("{:.1f}", 100.0 * ratio(ns, t.window_ns)); };
  return {std::move(first),
          format_duration(time),
          p(t.at(Category::kAllToAll)),
          p(t.at(Category::kAllReduce)),
          p(t.at(Category::kOtherComm)),
          p(t.at(Category::kExpertCompute)),
          p(t.at(Category::kGating)),
          p(t.at(Category::kOtherCompute)),
          p(t.at(Category::kMemcpy)),
          p(t.busy_ns),
          p(t.outside_ns()),
          p(t.idle_ns),
          fmt::format("{:.1f}", 100.0 * t.hidden_fraction())};
}

std::vector<std::string> split_header(std::string first) {
  return {std::move(first), "time", "a2a %", "allred %", "comm %", "expert %", "gate %", "other %", "copy %",
          "busy %", "outside %", "idle %", "hidden %"};
}

Section projection_section(const Trace& trace) {
  Section s{"projection", "GPU activity attributed to ops", {}};
  const auto& p = trace.projection;
  if (!p.ran) {
    s.para("The NVTX-to-GPU projection did not run (trace loaded without it).");
  } else if (p.activities == 0) {
    s.para("The trace holds no GPU activities (kernels, copies); op times are their ranges.");
  } else {
    s.para(fmt::format(
        "{} GPU activities: {} attributed to an op {}, {} through their correlation id to the "
        "op range that launched them; {} unattributed ({} without correlation id, {} without a launching "
        "API call on their rank, {} launched outside every op range).",
        p.activities, p.attributed_in_trace,
        trace.recognition.activities_placed > 0 ? "by MoE recognition" : "in the trace", p.projected,
        p.unattributed(), p.no_correlation, p.no_api_call,
        p.outside_ranges));
    if (p.ops_retimed > 0)
      s.para(fmt::format("{} op ranges took the GPU span of their activities as their time.", p.ops_retimed));
  }
  return s;
}

Section nvtx_section(const NvtxAnalysis& n, const ReportOptions& o) {
  Section s{"nvtx", "NVTX ranges on the GPU", {}};
  s.para(fmt::format(
      "{} NVTX range{} from outside moetrace (e.g. PyTorch operators and annotations), {} of them launched GPU "
      "work. GPU time: the union of the kernels, copies and memsets launched by API calls inside a range (same "
      "rank and thread); a range includes the work of the ranges nested in it.",
      n.ranges, n.ranges == 1 ? "" : "s", n.ranges_with_gpu));
  Table t;
  t.header = {"domain", "name", "ranges", "host time", "GPU activities", "GPU time"};
  const std::size_t shown = o.per_rank ? n.names.size() : std::min<std::size_t>(n.names.size(), 15);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto& e = n.names[i];
    std::string name = e.name.size() > 60 ? e.name.substr(0, 57) + "..." : e.name;
    t.rows.push_back({e.domain.empty() ? "-" : e.domain, name, std::to_string(e.ranges), format_duration(e.host_ns),
                      std::to_string(e.activities), format_duration(e.gpu_busy_ns)});
  }
  s.table(shown < n.names.size()
              ? fmt::format("By name, most GPU time first ({} of {} names; --per-rank lists all):", shown,
                            n.names.size())
              : std::string("By name, most GPU time first:"),
          std::move(t));
  return s;
}

Section memory_section(const MemoryAnalysis& m, const ReportOptions& o) {
  Section s{"memory", "Memory", {}};
  if (!m.has_allocations) {
    s.para("No device allocations in the trace (no memory events, no buffers).");
    return s;
  }
  const RankMemory* peak = nullptr;
  for (const auto& r : m.ranks)
    if (r.rank == m.peak_rank) peak = &r;
  if (peak) {
    const auto& c = peak->peak_by_class;
    s.para(fmt::format("Peak device memory {} on rank {} at {} into the run: model states {}, activations {}, "
                       "temporary buffers {}, unattributed {} (classes of mpipemoe Sec. II-B from buffer tags).",
                       format_bytes(peak->peak_bytes), peak->rank, format_duration(peak->peak_ns - m.origin_ns),
                       format_bytes(c[0]),
                       format_bytes(c[1]), format_bytes(c[2]), format_bytes(c[3])));
  }
  Table ranks{{"rank", "source", "peak", "model states", "activations", "temporary", "unattributed",
               "bubble B*ms", "bubble %"},
              {}};
  const auto [listed, note] =
      ranks_to_list(m.ranks, o.per_rank, "peak memory", [](const RankMemory& r) { return r.peak_bytes; },
                    [](const RankMemory& r) { return format_bytes(r.peak_bytes); });
  for (auto i : listed) {
    const auto& r = m.ranks[i];
    ranks.rows.push_back({std::to_string(r.rank), r.from_events ? "events" : "buffers",
                          format_bytes(r.peak_bytes), format_bytes(r.peak_by_class[0]),
                          format_bytes(r.peak_by_class[1]), format_bytes(r.peak_by_class[2]),
                          format_bytes(r.peak_by_class[3]), format_bytes_ms(r.memory_bubble_bytes_ns),
                          pct(r.bubble_fraction())});
  }
  s.table("Per rank (peak and its composition; bubbles as byte-time):", std::move(ranks));
  if (!note.empty()) s.para(note);
  if (!m.has_buffer_usage) {
    s.para("Memory bubbles need allocations linked to buffers and op_buffers rows; this trace has none.");
  } else {
    s.para(fmt::format("Memory bubbles (allocated while no op using the buffer runs; mpipemoe Fig. 6): {} "
                       "in all, {} of the buffers' allocated byte-time.",
                       format_bytes_ms(m.memory_bubble_bytes_ns), pct(m.bubble_fraction())));
    Table tags{{"tag", "class", "allocations", "largest", "allocated B*ms", "bubble B*ms", "bubble %"}, {}};
    for (const auto& t : m.tags)
      tags.rows.push_back({t.tag, std::string(memory_class_name(t.memory_class)), std::to_string(t.buffers),
                           format_bytes(t.max_bytes), format_bytes_ms(t.allocated_bytes_ns),
                           format_bytes_ms(t.memory_bubble_bytes_ns), pct(t.bubble_fraction())});
    s.table("Per buffer tag:", std::move(tags));
    const auto top = largest_bubbles(m, static_cast<std::size_t>(std::max(0, o.top_buffers)));
    Table buffers{{"buffer", "rank", "tag", "layer", "chunk", "bytes", "allocated", "used", "bubble"}, {}};
    for (const auto* b : top)
      buffers.rows.push_back({std::to_string(b->buffer.value), std::to_string(b->rank.value), b->tag,
                              b->layer >= 0 ? std::to_string(b->layer) : "-",
                              b->chunk >= 0 ? std::to_string(b->chunk) : "-", format_bytes(b->bytes),
                              format_duration(b->free_ns - b->alloc_ns), format_duration(b->used_ns),
                              format_duration(b->bubble_ns)});
    if (!buffers.rows.empty()) s.table("Buffers with the largest bubbles:", std::move(buffers));
  }
  if (!m.layers.empty()) {
    Table model{{"layer", "E", "M", "H", "B", "n", "Eq.1 model states", "Eq.2 activations", "trace act.",
                 "Eq.3 temporary", "trace temp.", "Eq.5 saving", "Eq.6 ratio", "layer: none", "layer: S1-S4"},
                {}};
    for (const auto& l : m.layers)
      model.rows.push_back({std::to_string(l.layer), std::to_string(l.experts), std::to_string(l.model_dim),
                            std::to_string(l.hidden_dim), std::to_string(l.tokens), std::to_string(l.partitions),
                            format_bytes(l.model_states_bytes), format_bytes(l.activations_bytes),
                            bytes_or_dash(l.measured_peak_bytes[1]), format_bytes(l.temporary_buffers_bytes),
                            bytes_or_dash(l.measured_peak_bytes[2]), format_bytes(l.reuse_saving_bytes),
                            pct(l.saving_ratio), format_bytes(l.layer_bytes_without_reuse),
                            format_bytes(l.layer_bytes_with_reuse)});
    s.table("mpipemoe memory model per MoE layer and device (Eq. 1-6 in elements x elem_bytes; B = routed tokens "
            "per device, top-k included; n = partitions; 'trace' = the layer's buffers of that class alive at once, max over ranks; "
            "'layer' = Eq. 1 + Eq. 4 (M_act + M_buf), less 2 x Eq. 5 with reuse, which every strategy S1-S4 saves alike):",
            std::move(model));
  }
  return s;
}

Section expert_load_section(const ExpertLoadAnalysis& a, const ReportOptions& o) {
  Section s{"expert_load", "Expert load", {}};
  if (!a.has_load) {
    s.para("No expert load in the trace.");
    return s;
  }
  s.para(fmt::format(
      "Up to {} experts on {} devices. Home placement: the trace's home rows, else expert e on rank "
      "floor(e P / E). Replicas and shadows compute the tokens of their own rank. Balance degree = standard "
      "deviation of the tokens per device (pro-prophet Sec. VI-C); RB = balance degree home / actual "
      "placement; imbalance = slowest rank's MoE-layer time minus the mean (fwd + bwd per iteration).",
      a.experts, a.devices));
  if (!a.origin.empty()) s.para("Load from " + a.origin + ".");
  Table t{{"layer", "its", "expert max/mean", "expert CV", "device max/mean", "balance degree", "RB",
           "imbalance", "busiest expert time", "mean expert time"},
          {}};
  for (const auto& l : a.layers) {
    const bool placed = l.has_placement;
    t.rows.push_back({std::to_string(l.layer), std::to_string(l.iterations), fmt_double(l.expert_max_over_mean),
                      fmt_double(l.expert_cv),
                      placed ? fmt::format("{} -> {}", fmt_double(l.device_max_over_mean_home),
                                           fmt_double(l.device_max_over_mean))
                             : fmt_double(l.device_max_over_mean),
                      placed ? fmt::format("{} -> {}", fmt_double(l.balance_degree_home, 4),
                                           fmt_double(l.balance_degree, 4))
                             : fmt_double(l.balance_degree, 4),
                      fmt_double(l.rb), ns_or_dash(l.imbalance_ns), ns_or_dash(l.busiest_expert_compute_ns),
                      ns_or_dash(l.mean_expert_compute_ns)});
  }
  s.table("Per MoE layer (means over iterations; 'home -> actual' where the trace places copies):", std::move(t),
          "the load names no MoE layer of the trace's iterations");
  if (o.per_iteration) {
    Table r{{"layer/it", "tokens", "heaviest", "expert max/mean", "busiest rank", "balance home", "balance",
             "RB", "imbalance"},
            {}};
    for (const auto& x : a.rows)
      r.rows.push_back({fmt::format("{}/{}", x.layer, x.iteration), std::to_string(x.total_tokens),
                        std::to_string(x.heaviest_expert), fmt_double(x.expert_max_over_mean),
                        std::to_string(x.busiest_rank), fmt_double(x.balance_degree_home, 4),
                        fmt_double(x.balance_degree, 4), fmt_double(x.rb), ns_or_dash(x.imbalance_ns())});
    s.table("Per layer and iteration:", std::move(r));
  }
  return s;
}

Section locality_section(const LocalityAnalysis& a, const ReportOptions& o) {
  Section s{"locality", "Locality of expert load across iterations", {}};
  if (!a.has_load) {
    s.para("No expert load in the trace.");
    return s;
  }
  s.para("How well iteration j's tokens per expert predict iteration j+1's (the premise of Pro-Prophet's "
         "planner): cosine similarity (1 = same shape), L1 distance of the normalised distributions (0..2), "
         "relative L1 error of predicting j+1 by j, and how often the heaviest expert stays the heaviest.");
  Table t{{"layer", "iterations", "pairs", "cosine", "min cosine", "L1 distance", "prediction error",
           "heaviest kept"},
          {}};
  for (const auto& l : a.layers)
    t.rows.push_back({std::to_string(l.layer), std::to_string(l.iterations), std::to_string(l.consecutive.pairs),
                      fmt_double(l.consecutive.cosine_similarity, 4), fmt_double(l.min_cosine_similarity, 4),
                      fmt_double(l.consecutive.l1_distance), pct(l.consecutive.relative_l1_error),
                      pct(l.consecutive.heaviest_predicted)});
  s.table("Consecutive iterations, per MoE layer:", std::move(t),
          "no MoE layer has the load of two consecutive iterations");
  if (!a.curve.empty()) {
    Table c{{"distance", "pairs", "cosine", "L1 distance", "prediction error", "heaviest kept"}, {}};
    for (const auto& p : a.curve)
      c.rows.push_back({std::to_string(p.distance), std::to_string(p.pairs), fmt_double(p.cosine_similarity, 4),
                        fmt_double(p.l1_distance), pct(p.relative_l1_error), pct(p.heaviest_predicted)});
    s.table("All layers, by distance in iterations:", std::move(c));
  }
  if (o.per_iteration) {
    Table p{{"layer", "j -> j+1", "cosine", "L1 distance", "error", "heaviest"}, {}};
    for (const auto& x : a.pairs)
      p.rows.push_back({std::to_string(x.layer), fmt::format("{} -> {}", x.from_iteration, x.to_iteration),
                        fmt_double(x.cosine_similarity, 4), fmt_double(x.l1_distance), pct(x.relative_l1_error),
                        fmt::format("{} -> {}", x.heaviest_from, x.heaviest_to)});
    s.table("Consecutive pairs:", std::move(p));
  }
  return s;
}

std::vector<std::string> fit_row(const CostModelFit& f, std::string first) {
  const bool flops = f.x == "flops";
  const double rate = f.fit.beta > 0 ? 1.0 / f.fit.beta : 0.0;
  return {std::move(first),
          f.sample,
          f.fit.method,
          std::to_string(f.fit.points),
          fmt::format("{} .. {}", si(f.fit.x_min, flops ? "FLOP" : "B"), si(f.fit.x_max, flops ? "FLOP" : "B")),
          seconds(f.fit.alpha),
          fmt::format("{:.3g}", f.fit.beta),
          rate > 0 ? si(rate, flops ? "FLOP/s" : "B/s") : "-",
          fmt_double(f.fit.r2, 4),
          seconds(f.fit.residual_rms)};
}

}  // namespace

Section fitted_models_section(const CostModel& m, const std::string& not_computed_reason) {
  Section s{"fitted_models", "Fitted models", {}};
  s.para("t(x) = alpha + beta x by least squares over the ops' GPU times (pipemoe Eq. 13 for computation, "
         "Eq. 16 for collectives); 'lone' fits use only ops nothing overlapped. `moetrace fit` writes these "
         "as the simulator's cost model (schemas/cost_model.schema.json) or with their goodness of fit "
         "(--format fits).");
  const std::vector<std::string> header{"", "sample", "method", "points", "x range", "alpha", "beta (s/x)",
                                        "1/beta", "R^2", "residual RMS"};
  auto table_of = [&](const std::vector<CostModelFit>& fits, const std::string& first, bool group) {
    Table t{header, {}};
    t.header[0] = first;
    for (const auto& f : fits) t.rows.push_back(fit_row(f, group ? fmt::format("{} x{}", f.kind, f.group_size) : f.kind));
    return t;
  };
  if (!not_computed_reason.empty()) {
    s.para("Not computed: " + not_computed_reason + ".");
    return s;
  }
  if (m.compute.empty() && m.collectives.empty() && m.copies.empty())
    s.para("No op carries FLOPs or bytes, so nothing could be fitted.");
  if (!m.compute.empty()) {
    s.table("Computation (x = FLOPs; bytes for ops that carry none, such as permute and unpermute):",
            table_of(m.compute, "op kind", false));
    // What the simulator's cost model takes: the same points without a free
    // intercept (cost_model.h). Where ops of one kind run different numbers of
    // GEMMs (a gate's forward 1, its backward 2), the line above cannot fit
    // them and this can.
    Table t{{"op kind", "x", "alpha per launch", "beta (s/x)", "1/beta"}, {}};
    for (const auto& f : m.compute) {
      if (!f.launch_fit.usable) continue;
      const bool flops = f.x == "flops";
      const double beta = f.launch_fit.beta;
      t.rows.push_back({f.kind, f.x, seconds(f.launch_fit.alpha_per_launch), fmt::format("{:.3g}", beta),
                        beta > 0 ? si(1.0 / beta, flops ? "FLOP/s" : "B/s") : "-"});
    }
    if (!t.rows.empty())
      s.table("Computation as the simulator takes it (t = launches x alpha + beta x; launches: the GEMMs an op runs, "
              "expert FFN forward 2 and backward 4, recompute 1, gate backward 2, every other op 1):",
              std::move(t));
  }
  if (!m.collectives.empty())
    s.table(fmt::format("Collectives (one point per instance: x = bytes the busiest participant sends{}, t = the "
                        "shortest participant's time; 'x N' = group size):",
                        m.all_to_all_volume == "max_recv"        ? "; all-to-all: receives, which fits its times best"
                        : m.all_to_all_volume == "max_send_recv" ? "; all-to-all: sends or receives, the larger, which "
                                                                   "fits its times best"
                                                                 : ""),
            table_of(m.collectives, "collective", true));
  if (!m.copies.empty()) s.table("Copies (x = bytes):", table_of(m.copies, "op kind", false));
  if (!m.host_issue.empty()) {
    Table t{{"op kind", "ops", "median", "method", "per op", "per GEMM launch"}, {}};
    for (const auto& f : m.host_issue)
      t.rows.push_back({f.kind, std::to_string(f.points), seconds(f.median), f.method, seconds(f.alpha),
                        seconds(f.per_launch)});
    s.table("Host issue time (each op's launch interval on the host; t = per op + per GEMM launch x the "
            "simulator's GEMM count, through each count's median):",
            t);
  }
  if (m.interference.empty()) {
    s.para("Interference factors: not measurable (needs ops of one kind both alone and overlapped).");
  } else {
    Table t{{"factor", "of", "under", "value", "lone ops", "overlapped ops"}, {}};
    for (const auto& f : m.interference)
      t.rows.push_back({fmt::format("{}_{}", f.factor, f.interferer), f.target, f.interferer, fmt_double(f.value, 4),
                        std::to_string(f.lone_ops), std::to_string(f.overlapped_ops)});
    s.table("Interference (mpipemoe Sec. II-C: speed overlapped / speed alone; sigma computation, mu "
            "communication, eta memory copy):",
            std::move(t));
  }
  return s;
}

std::string no_moe_layer_reason(const Trace& trace) {
  const auto& r = trace.recognition;
  if (!r.ran) return "no op range of the trace belongs to an MoE layer";
  if (!r.moe)
    return "no range or kernel matched an MoE rule (expert GEMM, router, dispatch or combine); a --moe-rules file "
           "can name the job's own (the largest kernels no rule classifies are listed below)";
  return "MoE work was recognised but no layer instance formed around it (no expert computation between a router "
         "and its combine)";
}

std::vector<std::string> breakdown_summary(const Trace& trace, const Breakdown& b) {
  std::vector<std::string> lines;
  if (!b.has_op_ranges) {
    lines.push_back(
        "This trace has no MoE op ranges (an imported or uninstrumented run): time is split per rank by "
        "kernel name, with the rules of analyzer/data/kernel_classes.json; the per-layer, per-iteration and "
        "per-phase breakdown and the MoE-layer shares cannot be computed from it.");
    return lines;
  }
  if (b.iterations.empty()) return lines;
  const auto n = static_cast<std::int64_t>(b.iterations.size());
  const auto& it = b.iteration_total;
  if (b.layers.empty()) {
    lines.push_back(fmt::format("{} iteration row{} (rank x iteration), mean iteration {}; no MoE layer in the trace: {}",
                                n, n == 1 ? "" : "s", format_duration(it.window_ns / n),
                                no_moe_layer_reason(trace)));
    lines.push_back(fmt::format("all-to-all: {} of iteration time; all-reduce: {} of iteration time",
                                format_percent(b.all_to_all_share_of_iteration()),
                                format_percent(b.all_reduce_share_of_iteration())));
  } else {
    lines.push_back(fmt::format("{} iteration row{} (rank x iteration), mean iteration {}; MoE layers are {} of it",
                                n, n == 1 ? "" : "s", format_duration(it.window_ns / n),
                                format_percent(b.moe_share_of_iteration())));
    lines.push_back(fmt::format("all-to-all: {} of MoE-layer time, {} of iteration time",
                                format_percent(b.all_to_all_share_of_moe()),
                                format_percent(b.all_to_all_share_of_iteration())));
    lines.push_back(fmt::format("all-reduce: {} of MoE-layer time, {} of iteration time",
                                format_percent(b.all_reduce_share_of_moe()),
                                format_percent(b.all_reduce_share_of_iteration())));
  }
  lines.push_back(fmt::format("communication hidden by computation: {} ({} exposed per iteration)",
                              format_percent(it.hidden_fraction()), format_duration(it.comm_exposed_ns / n)));
  return lines;
}

Section breakdown_section(const Trace& trace, const Breakdown& b, const ReportOptions& options) {
  Section s{"breakdown", "Where the time goes", {}};
  for (auto& line : breakdown_summary(trace, b)) s.para(std::move(line));
  if (!b.layers.empty()) {
    Table t{split_header("layer"), {}};
    t.header.push_back("overlap %");
    for (const auto& l : b.layers) {
      t.rows.push_back(split_row(l.total, std::to_string(l.layer), l.mean_window_ns));
      t.rows.back().push_back(fmt::format("{:.1f}", 100.0 * l.total.overlap_share()));
    }
    const bool forward_only = b.forward_only();
    s.table(std::string(forward_only ? "Per MoE layer, forward only (no backward pass in the trace; time per rank and "
                                       "iteration: the union of its forward windows; the "
                                     : "Per MoE layer (time per rank and iteration: the union of its forward and "
                                       "backward windows; the ") +
            "other columns are % of the sum of those windows. The category columns overlap where the layer's "
            "ops of several categories run at once; busy is their union, outside the time in which only other "
            "work ran (other layers, non-MoE ops), and busy + outside + idle = 100; hidden is % of the layer's "
            "communication overlapped by computation; overlap is % of its busy time in which another chunk's "
            "work ran beside it (another layer instance, micro-batch or phase, or non-MoE work), as in "
            "overlapped schedules):",
            std::move(t));
    for (const auto& l : b.layers)
      if (l.ranks > 1 && l.max_window_ns > l.mean_window_ns * 11 / 10)
        s.para(fmt::format("layer {}: slowest rank {} takes {} ({} above the mean)", l.layer, l.slowest_rank,
                           format_duration(l.max_window_ns),
                           format_percent(ratio(l.max_window_ns - l.mean_window_ns, l.mean_window_ns))));
  }
  Table r{split_header("rank"), {}};
  const auto [listed, note] =
      ranks_to_list(b.ranks, options.per_rank, "busy time (the busiest is the straggler)",
                    [](const RankSummary& x) { return x.t.busy_ns; },
                    [](const RankSummary& x) { return format_duration(x.t.busy_ns); });
  for (auto i : listed) r.rows.push_back(split_row(b.ranks[i].t, std::to_string(b.ranks[i].rank), b.ranks[i].t.window_ns));
  s.table(fmt::format("Per rank (window: {}):", rank_window_description(b.rank_window)), std::move(r));
  if (!note.empty()) s.para(note);
  if (options.per_iteration) {
    Table t{split_header("rank/it"), {}};
    for (const auto& it : b.iterations)
      t.rows.push_back(split_row(it.t, fmt::format("{}/{}", it.rank, it.iteration), it.t.window_ns));
    s.table("Per rank and iteration:", std::move(t));
  }
  if (options.per_rank) {
    Table t{split_header("r/l/i/p"), {}};
    for (const auto& x : b.rows)
      t.rows.push_back(split_row(x.t, fmt::format("{}/{}/{}/{}", x.rank, x.layer, x.iteration, phase_name(x.phase)),
                                 x.t.window_ns));
    s.table("Per rank, layer, iteration and phase:", std::move(t));
  }
  return s;
}

Section recommendations_section(const Analyses& a) {
  Section rec{"recommendations", "Recommendations", {}, a.recommendations ? "computed" : "not_computed"};
  if (!a.recommendations && !a.not_computed_reason.empty()) {
    rec.para("Not computed: " + a.not_computed_reason + ".");
    return rec;
  }
  if (!a.recommendations) {
    rec.para("Not computed (moetrace report --no-recommendations; `moetrace recommend` gives them alone).");
    return rec;
  }
  const auto& r = *a.recommendations;
  rec.para("Hardware model: " + r.hardware.description + ".");
  for (const auto& n : r.notes) rec.para("Note: " + n);
  if (r.items.empty()) {
    rec.para("No MoE layer with expert load to advise on.");
    return rec;
  }
  Table t{{"layer", "subject", "action", "predicted gain"}, {}};
  // Long actions (placements) are cut in the table; the paragraphs below
  // give them whole with their evidence.
  auto cut = [](const std::string& action) { return action.size() <= 60 ? action : action.substr(0, 57) + "..."; };
  for (const auto& it : r.items)
    t.rows.push_back({std::to_string(it.layer), it.subject, cut(it.action),
                      !it.gain_known     ? std::string("-")
                      : it.gain_interval ? fmt::format("{:+.1f}% ({:+.1f} to {:+.1f}%)", 100.0 * it.predicted_gain,
                                                       100.0 * it.gain_low, 100.0 * it.gain_high)
                                         : fmt::format("{:+.1f}%", 100.0 * it.predicted_gain)});
  rec.table("Per MoE layer (predicted gain: share of the layer's time per iteration saved; negative: the change "
            "costs time):",
            std::move(t));
  Table replay{{"layer", "measured", "replay", "basis", "error", "advice"}, {}};
  for (const auto& L : r.layers)
    if (L.replay.computed)
      replay.rows.push_back({std::to_string(L.layer), format_duration(static_cast<std::int64_t>(L.replay.measured_s * 1e9)),
                             format_duration(static_cast<std::int64_t>(L.replay.simulated_s * 1e9)), L.replay.basis,
                             fmt::format("{:+.1f}%", 100.0 * L.replay.error),
                             L.replay.unreliable ? "unreliable: " + L.replay.off_term + " off" : "reliable"});
  if (!replay.rows.empty())
    rec.table("Replay of the trace's own configuration on the hardware model, beside the measured layer time per "
              "iteration (off by more than 20 %: the layer's advice is unreliable):",
              std::move(replay));
  for (const auto& it : r.items)
    rec.para(fmt::format("layer {}, {}: {}. {}", it.layer, it.subject, it.action, it.evidence));
  return rec;
}

std::vector<Section> analysis_sections(const Trace& trace, const Analyses& a, const ReportOptions& options) {
  std::vector<Section> s;
  if (has_ranks_section(trace)) s.push_back(ranks_section(trace, a, options));
  if (trace.recognition.ran) s.push_back(recognition_section(trace, a));
  s.push_back(projection_section(trace));
  if (a.nvtx.ranges > 0) s.push_back(nvtx_section(a.nvtx, options));
  s.push_back(launch_queue_section(a, options));
  s.push_back(critical_path_section(a, options));
  s.push_back(kernel_sequences_section(a.kernel_sequences));
  s.push_back(efficiency_section(a, options));
  s.push_back(memory_section(a.memory, options));
  s.push_back(expert_load_section(a.expert_load, options));
  s.push_back(locality_section(a.locality, options));
  s.push_back(fitted_models_section(a.cost_model, a.fits_not_computed_reason));
  s.push_back(recommendations_section(a));
  return s;
}

void render_text(std::ostream& out, const Section& s) {
  out << "\n" << s.title << "\n" << std::string(s.title.size(), '-') << "\n";
  for (const auto& b : s.blocks) {
    out << b.text << "\n";
    if (!b.has_table) continue;
    const auto& t = b.table;
    std::vector<std::size_t> w(t.header.size(), 0);
    auto widen = [&](const std::vector<std::string>& row) {
      for (std::size_t i = 0; i < row.size() && i < w.size(); ++i) w[i] = std::max(w[i], row[i].size());
    };
    widen(t.header);
    for (const auto& r : t.rows) widen(r);
    auto line = [&](const std::vector<std::string>& row) {
      std::string l = "  ";
      for (std::size_t i = 0; i < w.size(); ++i) {
        const auto& cell = i < row.size() ? row[i] : std::string();
        l += i == 0 ? fmt::format("{:<{}}", cell, w[i]) : fmt::format("  {:>{}}", cell, w[i]);
      }
      while (!l.empty() && l.back() == ' ') l.pop_back();
      out << l << "\n";
    };
    line(t.header);
    for (const auto& r : t.rows) line(r);
  }
}

void render_markdown(std::ostream& out, const Section& s) {
  out << "\n## " << s.title << "\n\n";
  auto esc = [](const std::string& v) {
    std::string r;
    for (char c : v) r += c == '|' ? std::string("\\|") : std::string(1, c);
    return r;
  };
  for (const auto& b : s.blocks) {
    out << esc(b.text) << "\n\n";
    if (!b.has_table) continue;
    const auto& t = b.table;
    out << "|";
    for (const auto& h : t.header) out << " " << esc(h) << " |";
    out << "\n|";
    for (std::size_t i = 0; i < t.header.size(); ++i) out << (i == 0 ? " --- |" : " ---: |");
    out << "\n";
    for (const auto& r : t.rows) {
      out << "|";
      for (const auto& c : r) out << " " << esc(c) << " |";
      out << "\n";
    }
    out << "\n";
  }
}

}  // namespace moetrace::analyzer::report_detail
