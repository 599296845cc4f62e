// The HTML report: one self-contained file (inline CSS and SVG, no script or
// font or image from anywhere else) so it can be archived by CI and opened
// offline. Plots are drawn here as SVG; every mark has a <title> tooltip.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>

#include "moetrace/analyzer/report.h"
#include "report_sections.h"

namespace moetrace::analyzer {
namespace {

using report_detail::Section;

std::string esc(std::string_view s) {
  std::string r;
  r.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': r += "&amp;"; break;
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '"': r += "&quot;"; break;
      default: r += c;
    }
  }
  return r;
}

constexpr const char* kCss = R"(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1200px; padding: 0 16px 48px; color: #222; }
h1 { font-size: 22px; margin: 20px 0 4px; } h2 { font-size: 18px; margin: 32px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
nav a { margin-right: 12px; } p { margin: 6px 0; } .meta { color: #555; }
table { border-collapse: collapse; margin: 6px 0 14px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; } th { background: #f4f4f4; }
td:first-child, th:first-child { text-align: left; }
figure { margin: 10px 0 16px; } figcaption { color: #555; font-size: 12px; }
svg text { font: 11px system-ui, sans-serif; fill: #333; } svg .axis { stroke: #888; stroke-width: 1; }
svg .grid { stroke: #eee; stroke-width: 1; } svg .alloc { fill: #9ecae1; fill-opacity: 0.35; stroke: #3182bd; stroke-width: 1.2; }
svg .bubble { fill: #fd8d3c; fill-opacity: 0.6; stroke: none; } svg .curve { fill: none; stroke-width: 1.5; }
svg .curve.all { stroke: #000; stroke-width: 2.5; } .legend span { display: inline-block; margin-right: 12px; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: -1px; }
.empty { color: #888; font-style: italic; }
)";

struct CategoryColor {
  const char* key;
  const char* label;
  const char* color;
};
constexpr CategoryColor kCategoryColors[] = {
    {"all_to_all", "all-to-all", "#d62728"},     {"all_reduce", "all-reduce", "#ff7f0e"},
    {"other_comm", "other comm", "#bcbd22"},     {"expert_compute", "expert compute", "#1f77b4"},
    {"gating", "gating", "#9467bd"},             {"other_compute", "other compute", "#17becf"},
    {"memcpy", "copies", "#8c564b"},             {"overlap", "overlapped", "#7f7f7f"},
    {"idle", "idle / outside the layer's ops", "#e6e6e6"},
};
constexpr const char* kLayerColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string legend(std::size_t n) {
  std::string s = "<div class=\"legend\">";
  for (std::size_t i = 0; i < n; ++i)
    s += fmt::format("<span><i style=\"background:{}\"></i>{}</span>", kCategoryColors[i].color,
                     kCategoryColors[i].label);
  return s + "</div>";
}

// Stacked bars per MoE layer: exclusive time of each category, time in which
// several categories overlapped, and the rest of the window.
std::string breakdown_plot(const Breakdown& b) {
  struct Bar {
    std::string label;
    const TimeSplit* t;
  };
  std::vector<Bar> bars;
  for (const auto& l : b.layers) bars.push_back({fmt::format("layer {}", l.layer), &l.total});
  if (bars.empty())
    for (const auto& r : b.ranks) bars.push_back({fmt::format("rank {}", r.rank), &r.t});
  if (bars.empty()) return "<p class=\"empty\">No time to break down.</p>";
  const int left = 80, width = 900, bar_h = 18, gap = 8;
  const int height = static_cast<int>(bars.size()) * (bar_h + gap) + 30;
  std::string s = fmt::format("<figure id=\"plot-breakdown\"><svg class=\"plot\" width=\"{}\" height=\"{}\" "
                              "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"breakdown per layer\">",
                              left + width + 20, height, left + width + 20, height);
  for (int p = 0; p <= 100; p += 25) {
    const double x = left + width * p / 100.0;
    s += fmt::format("<line class=\"grid\" x1=\"{:.1f}\" y1=\"0\" x2=\"{:.1f}\" y2=\"{}\"/>", x, x, height - 20);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}%</text>", x, height - 6, p);
  }
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const auto& t = *bars[i].t;
    const int y = static_cast<int>(i) * (bar_h + gap) + 4;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", left - 6, y + 13, esc(bars[i].label));
    if (t.window_ns <= 0) continue;
    std::int64_t exclusive = 0;
    std::vector<std::int64_t> parts;
    for (int c = 0; c < kNumCategories; ++c) {
      parts.push_back(t.exclusive_ns[static_cast<std::size_t>(c)]);
      exclusive += t.exclusive_ns[static_cast<std::size_t>(c)];
    }
    parts.push_back(std::max<std::int64_t>(0, t.busy_ns - exclusive));
    parts.push_back(std::max<std::int64_t>(0, t.window_ns - t.busy_ns));
    double x = left;
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const double w = width * static_cast<double>(parts[k]) / static_cast<double>(t.window_ns);
      if (w <= 0) continue;
      s += fmt::format("<rect class=\"seg\" data-category=\"{}\" x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" "
                       "height=\"{}\" fill=\"{}\"><title>{}: {} {} ({:.1f}%)</title></rect>",
                       kCategoryColors[k].key, x, y, w, bar_h, kCategoryColors[k].color, esc(bars[i].label),
                       kCategoryColors[k].label, format_duration(parts[k]),
                       100.0 * static_cast<double>(parts[k]) / static_cast<double>(t.window_ns));
      x += w;
    }
  }
  s += "</svg>" + legend(std::size(kCategoryColors)) +
       "<figcaption>Share of each MoE layer's time (all ranks, iterations and both phases) in which one "
       "category ran alone; 'overlapped' is time in which several ran at once.</figcaption></figure>";
  return s;
}

std::string heat_color(double v) {  // v in [0, 1]: white to dark blue
  v = std::clamp(v, 0.0, 1.0);
  const int r = static_cast<int>(247 - v * (247 - 8)), g = static_cast<int>(251 - v * (251 - 48)),
            b = static_cast<int>(255 - v * (255 - 107));
  return fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
}

std::string heatmap_plot(const ExpertLoadAnalysis& a) {
  if (!a.has_load || a.layers.empty()) return "<p class=\"empty\">No expert load in the trace.</p>";
  int experts = 0;
  for (const auto& l : a.layers) experts = std::max(experts, static_cast<int>(l.tokens_per_expert.size()));
  const int left = 70, top = 20;
  const int cell_w = std::clamp(880 / std::max(1, experts), 4, 40), cell_h = 22;
  const int width = left + experts * cell_w + 20, height = top + static_cast<int>(a.layers.size()) * cell_h + 30;
  std::string s = fmt::format("<figure id=\"plot-load-heatmap\"><svg class=\"plot\" width=\"{}\" height=\"{}\" "
                              "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"expert load heatmap\">",
                              width, height, width, height);
  const int step = std::max(1, experts / 16);
  for (int e = 0; e < experts; e += step)
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", left + e * cell_w + cell_w / 2,
                     top - 6, e);
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const auto& l = a.layers[i];
    const int y = top + static_cast<int>(i) * cell_h;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">layer {}</text>", left - 6, y + 15, l.layer);
    const auto max = l.tokens_per_expert.empty()
                         ? 0
                         : *std::max_element(l.tokens_per_expert.begin(), l.tokens_per_expert.end());
    const double mean = load_mean(l.tokens_per_expert);
    for (std::size_t e = 0; e < l.tokens_per_expert.size(); ++e) {
      const auto v = l.tokens_per_expert[e];
      s += fmt::format("<rect class=\"cell\" data-layer=\"{}\" data-expert=\"{}\" x=\"{}\" y=\"{}\" width=\"{}\" "
                       "height=\"{}\" fill=\"{}\" stroke=\"#fff\"><title>layer {} expert {}: {} tokens ({:.2f}x the "
                       "mean)</title></rect>",
                       l.layer, e, left + static_cast<int>(e) * cell_w, y, cell_w, cell_h,
                       heat_color(max > 0 ? static_cast<double>(v) / static_cast<double>(max) : 0.0), l.layer, e, v,
                       mean > 0 ? static_cast<double>(v) / mean : 0.0);
    }
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">expert</text>", left + experts * cell_w / 2,
                   height - 8);
  s += "</svg><figcaption>Tokens routed to each expert, summed over iterations and source ranks; each row "
       "is shaded relative to its heaviest expert.</figcaption></figure>";
  return s;
}

std::string locality_plot(const LocalityAnalysis& a) {
  if (!a.has_load || a.curve.empty())
    return "<p class=\"empty\">Not enough iterations with expert load for a locality curve.</p>";
  const int left = 60, top = 10, w = 600, h = 240;
  int max_d = 1;
  double lo = 1.0;
  for (const auto& p : a.curve) {
    max_d = std::max(max_d, p.distance);
    lo = std::min(lo, p.cosine_similarity);
  }
  for (const auto& l : a.layers)
    for (const auto& p : l.curve) lo = std::min(lo, p.cosine_similarity);
  lo = std::min(0.9, std::floor(lo * 10.0) / 10.0);
  auto X = [&](int d) { return left + (max_d == 1 ? w / 2.0 : w * (d - 1) / static_cast<double>(max_d - 1)); };
  auto Y = [&](double v) { return top + h * (1.0 - (v - lo) / (1.0 - lo)); };
  std::string s = fmt::format("<figure id=\"plot-locality\"><svg class=\"plot\" width=\"{}\" height=\"{}\" "
                              "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"locality curve\">",
                              left + w + 140, top + h + 40, left + w + 140, top + h + 40);
  for (int k = 0; k <= 4; ++k) {
    const double v = lo + (1.0 - lo) * k / 4.0;
    s += fmt::format("<line class=\"grid\" x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\"/>", left, Y(v), left + w, Y(v));
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.2f}</text>", left - 6, Y(v) + 4, v);
  }
  for (int d = 1; d <= max_d; ++d)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>", X(d), top + h + 16, d);
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">iterations apart</text>", left + w / 2, top + h + 34);
  auto curve = [&](const std::vector<LocalityPoint>& pts, const std::string& cls, const std::string& color,
                   const std::string& name) {
    std::string path;
    for (const auto& p : pts) path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", X(p.distance), Y(p.cosine_similarity));
    std::string r = fmt::format("<path class=\"curve {}\" d=\"{}\" stroke=\"{}\"><title>{}</title></path>", cls, path,
                                color, esc(name));
    for (const auto& p : pts)
      r += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}, {} apart: cosine {:.4f} "
                       "({} pairs)</title></circle>",
                       X(p.distance), Y(p.cosine_similarity), color, esc(name), p.distance, p.cosine_similarity,
                       p.pairs);
    return r;
  };
  int li = 0;
  for (const auto& l : a.layers) {
    const auto color = kLayerColors[static_cast<std::size_t>(li++) % std::size(kLayerColors)];
    s += curve(l.curve, "layer", color, fmt::format("layer {}", l.layer));
    if (!l.curve.empty())
      s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" style=\"fill:{}\">layer {}</text>", left + w + 10,
                       top + 14.0 * li, color, l.layer);
  }
  s += curve(a.curve, "all", "#000", "all layers");
  s += "</svg><figcaption>Mean cosine similarity of the tokens per expert of iterations j and j + d, per MoE "
       "layer (thick: all layers). Near 1: the load of one iteration predicts the next.</figcaption></figure>";
  return s;
}

std::string memory_plot(const MemoryAnalysis& m, const ReportOptions& o) {
  if (!m.has_allocations) return "<p class=\"empty\">No device allocations in the trace.</p>";
  std::vector<const RankMemory*> ranks;
  for (const auto& r : m.ranks)
    if (r.rank == m.peak_rank) ranks.push_back(&r);
  for (const auto& r : m.ranks)
    if (r.rank != m.peak_rank && ranks.size() < 4) ranks.push_back(&r);
  const int left = 80, w = 900, h = 150, gap = 44;
  std::string s = fmt::format("<figure id=\"plot-memory\"><svg class=\"plot\" width=\"{}\" height=\"{}\" "
                              "viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"memory timeline\">",
                              left + w + 20, static_cast<int>(ranks.size()) * (h + gap) + 10,
                              left + w + 20, static_cast<int>(ranks.size()) * (h + gap) + 10);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const auto& r = *ranks[i];
    const auto alloc = downsample_max(r.allocated, std::max(2, o.timeline_points));
    const auto idle = downsample_max(r.idle, std::max(2, o.timeline_points));
    if (alloc.empty()) continue;
    const std::int64_t t0 = alloc.front().ts_ns, t1 = std::max(alloc.back().ts_ns, t0 + 1);
    const double ymax = static_cast<double>(std::max<std::int64_t>(1, r.peak_bytes));
    const int top = static_cast<int>(i) * (h + gap) + 16;
    auto X = [&](std::int64_t t) { return left + w * static_cast<double>(t - t0) / static_cast<double>(t1 - t0); };
    auto Y = [&](std::int64_t b) { return top + h * (1.0 - static_cast<double>(b) / ymax); };
    auto area = [&](const std::vector<MemoryPoint>& pts) {
      if (pts.empty()) return std::string();
      std::string d = fmt::format("M{:.1f},{:.1f}", X(pts.front().ts_ns), Y(0));
      for (std::size_t k = 0; k < pts.size(); ++k) {
        d += fmt::format(" V{:.1f}", Y(pts[k].bytes));
        const auto next = k + 1 < pts.size() ? pts[k + 1].ts_ns : t1;
        d += fmt::format(" H{:.1f}", X(next));
      }
      return d + fmt::format(" V{:.1f} Z", Y(0));
    };
    s += fmt::format("<text x=\"{}\" y=\"{}\">rank {}: peak {} ({})</text>", left, top - 4, r.rank,
                     format_bytes(r.peak_bytes), r.from_events ? "alloc/free events" : "buffers");
    s += fmt::format("<line class=\"axis\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", left, top + h, left + w, top + h);
    s += fmt::format("<line class=\"axis\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", left, top, left, top + h);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", left - 4, top + 10, format_bytes(r.peak_bytes));
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>", left - 4, top + h);
    s += fmt::format("<text x=\"{}\" y=\"{}\">0</text>", left, top + h + 14);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", left + w, top + h + 14,
                     format_duration(t1 - t0));
    s += fmt::format("<path class=\"alloc\" d=\"{}\"><title>rank {}: bytes allocated</title></path>", area(alloc), r.rank);
    if (!idle.empty())
      s += fmt::format("<path class=\"bubble\" d=\"{}\"><title>rank {}: memory bubbles (allocated, no op using "
                       "the buffer running): {}</title></path>",
                       area(idle), r.rank, format_bytes_ms(r.memory_bubble_bytes_ns));
  }
  s += "</svg><div class=\"legend\"><span><i style=\"background:#9ecae1\"></i>allocated</span><span><i "
       "style=\"background:#fd8d3c\"></i>memory bubbles (allocated, unused)</span></div><figcaption>Device "
       "memory over time, from the start of each rank's first allocation (the peak rank first, at most four "
       "ranks; max-preserving downsampling).</figcaption></figure>";
  return s;
}

void write_section(std::ostream& out, const Section& sec, const std::string& plot) {
  out << "<section id=\"" << esc(sec.id) << "\"";
  if (!sec.status.empty()) out << " data-status=\"" << esc(sec.status) << "\"";
  out << "><h2>" << esc(sec.title) << "</h2>\n" << plot;
  for (const auto& b : sec.blocks) {
    out << "<p>" << esc(b.text) << "</p>\n";
    if (!b.has_table) continue;
    out << "<table><thead><tr>";
    for (const auto& h : b.table.header) out << "<th>" << esc(h) << "</th>";
    out << "</tr></thead><tbody>\n";
    for (const auto& r : b.table.rows) {
      out << "<tr>";
      for (const auto& c : r) out << "<td>" << esc(c) << "</td>";
      out << "</tr>\n";
    }
    out << "</tbody></table>\n";
  }
  out << "</section>\n";
}

}  // namespace

void write_html_report(std::ostream& out, const Trace& trace, const Analyses& a, const ReportOptions& options) {
  const auto& run = trace.run;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta name=\"generator\" content=\"moetrace report\">\n"
      << "<title>moetrace report: " << esc(run.path) << "</title>\n<style>" << kCss << "</style>\n</head>\n<body>\n";
  out << "<h1>moetrace report</h1>\n<p class=\"meta\">" << esc(run.path) << " &mdash; run "
      << esc(run.name.empty() ? "(unnamed)" : run.name) << ", backend " << esc(run.backend)
      << (run.simulated ? " (simulated)" : "") << ", variant " << esc(run.variant.empty() ? "-" : run.variant) << ", "
      << report_detail::ranks_recorded(trace)
      << (run.finalized ? "" : ", not finalized (the writer did not close)") << "</p>\n";
  for (const auto& w : run_warnings(run)) out << "<p><strong>Warning:</strong> " << esc(w) << "</p>\n";
  const auto sections = report_detail::analysis_sections(trace, a, options);
  out << "<nav><a href=\"#breakdown\">breakdown</a>";
  for (const auto& s : sections) out << "<a href=\"#" << esc(s.id) << "\">" << esc(s.id) << "</a>";
  out << "</nav>\n";
  write_section(out, report_detail::breakdown_section(trace, a.breakdown, options), breakdown_plot(a.breakdown));
  for (const auto& s : sections) {
    std::string plot;
    if (s.id == "memory") plot = memory_plot(a.memory, options);
    else if (s.id == "expert_load") plot = heatmap_plot(a.expert_load);
    else if (s.id == "locality") plot = locality_plot(a.locality);
    write_section(out, s, plot);
  }
  out << "</body>\n</html>\n";
}

}  // namespace moetrace::analyzer
