#include "moetrace/gui/analysis_results.h"

#include <algorithm>
#include <thread>

#include "moetrace/analyzer/recommend.h"

namespace moetrace::gui {

const analyzer::ReportSection* AnalysisResults::section(std::string_view id) const {
  for (const auto& s : sections)
    if (s.id == id) return &s;
  return nullptr;
}

AnalysisResults compute_analysis_results(const analyzer::Trace& trace, const std::function<void()>& beside,
                                         const analyzer::RecommendOptions& advice) {
  AnalysisResults r;
  analyzer::Analyses a;
  try {
    // Every core, at a lower priority than the GUI's threads: the analyses
    // run while the timeline is drawn and panned, which must stay smooth,
    // and take whatever time drawing leaves.
    const analyzer::BackgroundAnalyses background;
    a = analyzer::analyze(trace, {}, {}, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  } catch (const std::exception& e) {
    r.error = e.what();
    r.recommendations_error = r.error;
    if (beside) beside();
    return r;
  }
  // Not beside the analyses: their highest memory (the critical paths'
  // search) would hold the caller's results too. Joined when it goes out of
  // scope, whatever the recommendations or the sections throw.
  std::jthread other;
  if (beside) other = std::jthread(beside);
  try {
    analyzer::add_recommendations(trace, a, advice);
  } catch (const std::exception& e) {
    r.recommendations_error = e.what();
  }
  r.sections = analyzer::report_sections(trace, a);
  if (other.joinable()) other.join();
  r.analyses = std::make_shared<const analyzer::Analyses>(std::move(a));
  return r;
}

}  // namespace moetrace::gui
