#include "moetrace/gui/analysis_results.h"

namespace moetrace::gui {

AnalysisResults compute_analysis_results(const analyzer::Trace&) {
  // Locality, memory bubbles and recommendations are issue-5 analyses that
  // are not in the analyzer yet. Until they are, every field stays nullopt
  // and each panel shows "analysis not available yet".
  return {};
}

}  // namespace moetrace::gui
