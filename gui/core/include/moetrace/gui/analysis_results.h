// What the breakdown, locality, memory and recommendation panels show: the
// analyzer's own analyses (analyzer::analyze, the model `moetrace report`
// prints) and the recommendations computed on them (as `moetrace recommend`
// does). The GUI computes no analysis of its own; the panels only draw these.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::gui {

struct AnalysisResults {
  // analyze() with add_recommendations(): null where analyze() failed.
  std::shared_ptr<const analyzer::Analyses> analyses;
  std::string error;  // why analyze() failed
  // Why the recommenders failed (analyses->recommendations is then nullopt).
  std::string recommendations_error;
  // The report's sections of the analyses (report.h), as the report prints them.
  std::vector<analyzer::ReportSection> sections;

  const analyzer::ReportSection* section(std::string_view id) const;
};

// Runs the analyses on a loaded trace (off the GUI thread). `beside`, where
// given, is the caller's own work over the trace, run on a thread of its
// own while the recommendations are computed (once the analyses have given
// their memory back), or after the analyses where they fail; it must not
// throw. `advice`: what the recommenders take beside the trace (the user's
// model and tokens, as `moetrace recommend --model --tokens`).
AnalysisResults compute_analysis_results(const analyzer::Trace& trace, const std::function<void()>& beside = {},
                                         const analyzer::RecommendOptions& advice = {});

}  // namespace moetrace::gui
