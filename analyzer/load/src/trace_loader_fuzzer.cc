// libFuzzer target: a moetrace trace database (after a crash, a copy, a disk
// error) through the loader and every analysis behind `moetrace report`, with
// the report rendered in each format. Bad input must end in one
// moetrace::Error line. Seeds: tools/fuzz.sh (small simulated and synthetic
// traces, imported ones).
#include <cstddef>
#include <cstdint>
#include <sstream>

#include "fuzz_support.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moetrace;
  const std::string path = fuzz::write_input("trace.db", data, size);
  try {
    const auto trace = analyzer::load_trace(path);
    const auto analyses = analyzer::analyze(trace);
    for (const auto format : {analyzer::ReportFormat::kText, analyzer::ReportFormat::kJson,
                              analyzer::ReportFormat::kMarkdown, analyzer::ReportFormat::kHtml}) {
      std::ostringstream out;
      analyzer::ReportOptions options;
      options.format = format;
      analyzer::write_report(out, trace, analyses, options);
    }
  } catch (const Error& e) {
    fuzz::check_error_message(e);
  }
  return 0;
}
