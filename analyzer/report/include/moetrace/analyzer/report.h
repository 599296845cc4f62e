// Reports: the analyses of a trace rendered for people (text, Markdown, one
// self-contained HTML file with plots) and for programs (JSON, described by
// schemas/report.schema.json). The CLI and CI gates use these.
//
// Sections, in order, with their JSON keys: run, projection (how GPU
// activities were attributed to ops), breakdown, launch_queue (GPU idle time
// per stream, launch-queue lengths and kernel-launch statistics as Holistic
// Trace Analysis defines them; launch_queue.h), critical_path, efficiency,
// kernel_sequences (HTA's frequent CUDA kernel sequences), memory (timeline, peak and
// its composition, memory bubbles, mpipemoe Eq. 1-6), expert_load
// (imbalance, balance degree, RB), locality (load across iterations),
// fitted_models (the fits of cost_model.h with their goodness of fit, as
// `moetrace fit --format fits` writes them), and recommendations (per MoE
// layer: pipeline degree, memory reuse, expert placement, PPMoE layout;
// recommendations.h), present where add_recommendations (recommend.h) ran on
// the analyses, else status "not_computed" and no items.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/downsample.h"
#include "moetrace/analyzer/format.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

enum class ReportFormat { kText, kJson, kMarkdown, kHtml };

// Runs of up to this many ranks are shown rank by rank; beyond, the per-rank
// tables show a summary (min, median, max, the slowest and fastest ranks;
// ReportOptions::per_rank shows all) and the GUI opens with every rank folded
// to its header row, opened on demand.
inline constexpr std::size_t kRanksShownInFull = 32;

struct ReportOptions {
  ReportFormat format = ReportFormat::kText;
  bool per_rank = false;       // one row per rank x layer x iteration x phase
  bool per_iteration = false;  // one row per rank x iteration; load and locality per iteration
  int timeline_points = 512;   // memory timeline points per rank in JSON/HTML (max-preserving)
  int top_buffers = 10;        // buffers with the largest bubbles, listed
};

inline constexpr int kReportVersion = 2;

// A report section as neutral blocks (paragraphs and captioned tables): the
// text, Markdown and HTML writers render them alike, and so does the GUI.
struct ReportTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

struct ReportBlock {
  std::string text;  // a paragraph (no table) or the caption of `table`
  bool has_table = false;
  ReportTable table;
};

struct ReportSection {
  std::string id;     // JSON key and HTML anchor: "memory", "expert_load", ...
  std::string title;
  std::vector<ReportBlock> blocks;
  std::string status = {};  // HTML data-status where set (recommendations: computed / not_computed)
  void para(std::string text) { blocks.push_back({std::move(text), false, {}}); }
  // A table with no rows is never shown as a header alone: its caption
  // becomes a sentence that says there are none, and why where `why_none`
  // says so.
  void table(std::string caption, ReportTable t, std::string_view why_none = {}) {
    if (!t.rows.empty()) {
      blocks.push_back({std::move(caption), true, std::move(t)});
      return;
    }
    while (!caption.empty() && (caption.back() == ':' || caption.back() == '.' || caption.back() == ' '))
      caption.pop_back();
    para(caption + ": none" + (why_none.empty() ? std::string(".") : ", " + std::string(why_none) + "."));
  }
};

// The sections after the breakdown, as every report format shows them:
// projection, launch_queue, critical_path, kernel_sequences, efficiency, memory,
// expert_load, locality, fitted_models, recommendations.
std::vector<ReportSection> report_sections(const Trace& trace, const Analyses& a, const ReportOptions& options = {});

nlohmann::json run_json(const RunInfo& run);
nlohmann::json time_split_json(const TimeSplit& t);
nlohmann::json projection_json(const ProjectionStats& p);
nlohmann::json breakdown_json(const Trace& trace, const Breakdown& b, const ReportOptions& options);
nlohmann::json memory_json(const MemoryAnalysis& m, const ReportOptions& options);
nlohmann::json expert_load_json(const ExpertLoadAnalysis& a, const ReportOptions& options);
nlohmann::json locality_json(const LocalityAnalysis& a, const ReportOptions& options);
// The recommendations section: recommendations.h's JSON (status "computed",
// schemas/recommendations.schema.json) where add_recommendations ran, else
// {"status": "not_computed", "items": []}.
nlohmann::json recommendations_json(const Analyses& a);

// A run of several rank files (run_loader.h): files, gaps, clock alignment;
// and the waiting at collectives (rank_waits.h). The report's "ranks" key,
// present for such runs only.
nlohmann::json rank_files_json(const RunFiles& files);
nlohmann::json rank_waits_json(const RankWaitAnalysis& waits);
// The launch_queue section (launch_queue.h): HTA's idle-time rows, the
// queue-length summary and series per stream (at most
// options.timeline_points points each, max-preserving) and the launch
// statistics per rank with its longest launch delays.
nlohmann::json launch_queue_json(const LaunchQueueAnalysis& a, const ReportOptions& options);
// The critical_path section (critical_path.h): per rank its length, time and
// share by category and its events (most path time first, bounded); with
// `across`, the path across ranks under "across_ranks".
nlohmann::json critical_path_json(const std::vector<RankCriticalPath>& paths,
                                  const std::optional<CrossRankCriticalPath>& across = std::nullopt,
                                  const std::string& window = {});

// The kernel_sequences section (kernel_sequences.h): HTA's frequent CUDA
// kernel sequences of one operator on one rank; as a section too, for the
// GUI, which finds them for any operator.
nlohmann::json kernel_sequences_json(const KernelSequenceAnalysis& k);
ReportSection kernel_sequences_section(const KernelSequenceAnalysis& k);

// The whole report as one JSON document.
nlohmann::json report_json(const Trace& trace, const Analyses& a, const ReportOptions& options);
void write_text_report(std::ostream& out, const Trace& trace, const Analyses& a,
                       const ReportOptions& options);
void write_markdown_report(std::ostream& out, const Trace& trace, const Analyses& a,
                           const ReportOptions& options);
// One HTML file, no external resource: inline CSS and SVG plots (breakdown
// bars per layer, expert-load heatmap, locality curve, memory timeline with
// bubbles shaded).
void write_html_report(std::ostream& out, const Trace& trace, const Analyses& a,
                       const ReportOptions& options);
// The fitted-models section alone, as text (`moetrace fit --format text`).
void write_fitted_models_text(std::ostream& out, const CostModel& model);
void write_report(std::ostream& out, const Trace& trace, const Analyses& a, const ReportOptions& options);

inline std::vector<MemoryPoint> downsample_max(const std::vector<MemoryPoint>& points, int max_points) {
  return downsample_max(points, max_points, &MemoryPoint::bytes);
}

// What a reader must know before trusting the numbers, one line each:
// dropped activity records, damaged tables, no integrity record. Every
// report format shows them; the command line prints them on stderr. A run
// of several files: each file's, prefixed with its path
// (RunInfo::file_states).
std::vector<std::string> run_warnings(const RunInfo& run);
// The damage lines (RunInfo::damage), each file's prefixed with its path.
std::vector<std::string> run_damage(const RunInfo& run);
// The last of them alone: empty where the writer's integrity record was found.
std::string integrity_warning(const RunInfo& run);
// Events of accelerators whose activity moetrace does not read (Kineto's
// mtia_*, xpu_*, hpu_*, mlu_*, gcu_*, privateuse1_* categories, which an
// import counts as records not imported), from the import's counts by
// reason: one line per device type, naming it and the count.
std::vector<std::string> unread_device_warnings(const std::map<std::string, std::int64_t>& skipped_by_reason);
// The same from a trace's run_config (import.skipped.*); a run of several
// files: each file's, prefixed with its path.
std::vector<std::string> unread_device_warnings(const RunInfo& run);

}  // namespace moetrace::analyzer
