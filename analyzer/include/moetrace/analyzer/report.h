// Reports: the breakdown of a trace rendered as text (for people) or JSON (for
// programs; described by schemas/report.schema.json). The CLI and CI gates use
// these; later sections (memory, load, recommendations) add to the same JSON
// object under their own keys.
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::analyzer {

enum class ReportFormat { kText, kJson };

struct ReportOptions {
  ReportFormat format = ReportFormat::kText;
  bool per_rank = false;       // one row per rank x layer x iteration x phase
  bool per_iteration = false;  // one row per rank x iteration
};

inline constexpr int kReportVersion = 1;

nlohmann::json run_json(const RunInfo& run);
nlohmann::json time_split_json(const TimeSplit& t);
nlohmann::json breakdown_json(const Breakdown& b, const ReportOptions& options);
// The whole report as one JSON document.
nlohmann::json report_json(const Trace& trace, const Breakdown& b, const ReportOptions& options);
void write_text_report(std::ostream& out, const Trace& trace, const Breakdown& b,
                       const ReportOptions& options);

// "1.23 ms", "456 us", "12.0 s": durations for people.
std::string format_duration(std::int64_t ns);
std::string format_bytes(std::int64_t bytes);
std::string format_percent(double fraction);

}  // namespace moetrace::analyzer
