// Hand-built traces (text_trace.h) loaded as `moetrace report` loads them, for
// the tests that link the analyzer.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/trace.h"
#include "error_of.h"
#include "text_trace.h"

namespace moetrace::testing {

inline analyzer::Trace load_text_trace(const std::string& name, std::string_view text,
                                       const analyzer::LoadOptions& options = {}) {
  const auto path = temp_path(name);
  write_text_trace(path, text);
  return analyzer::load_trace(path, options);
}

// The one-line error loading `path` gives, or "(no error)".
inline std::string load_error(const std::string& path) {
  return error_of([&] { analyzer::load_trace(path); }, "(no error)");
}

// The report of `t` and its analyses `a` in `format` (the other options
// their defaults).
inline std::string report_in(analyzer::ReportFormat format, const analyzer::Trace& t, const analyzer::Analyses& a) {
  analyzer::ReportOptions o;
  o.format = format;
  std::ostringstream out;
  analyzer::write_report(out, t, a, o);
  return out.str();
}

}  // namespace moetrace::testing
