#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "moetrace/analyzer/report.h"
#include "moetrace/synthetic/synthetic_trace.h"
#include "json_schema.h"
#include "text_trace.h"

namespace moetrace::analyzer {
namespace {

using testing::schema_errors;

const std::string kSchema = std::string(MOETRACE_SOURCE_DIR) + "/schemas/report.schema.json";

TEST(Report, JsonMatchesTheSchema) {
  const auto path = testing::temp_path("report-synth.db");
  synthetic::SyntheticConfig c;
  c.ranks = 2;
  c.layers = 2;
  c.iterations = 2;
  synthetic::write_synthetic_trace(path, c);
  const auto trace = load_trace(path);
  ReportOptions o;
  o.per_rank = o.per_iteration = true;
  const auto j = report_json(trace, compute_breakdown(trace), o);
  EXPECT_EQ(schema_errors(j, kSchema), std::vector<std::string>{});
  EXPECT_EQ(j["breakdown"]["layers"].size(), 2u);
  EXPECT_EQ(j["breakdown"]["rows"].size(), 2u * 2u * 2u * 2u);  // ranks x layers x iterations x phases
}

TEST(Report, SchemaRejectsAReportWithoutItsBreakdown) {
  // The schema has teeth: dropping a required section fails validation.
  nlohmann::json j = {{"report_version", 1}, {"run", nlohmann::json::object()}};
  EXPECT_FALSE(schema_errors(j, kSchema).empty());
}

TEST(Report, TextNamesTheSharesOfTheFortyPercentLayer) {
  const auto path = testing::temp_path("report-forty.db");
  testing::write_text_trace(path, R"(
    stream id=0 rank=0 role=compute
    stream id=1 rank=0 role=comm
    op rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100
    op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=100 end=300
    op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=300 end=700
    op rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 start=600 end=800
    op rank=0 stream=0 kind=unpermute layer=0 iteration=0 start=800 end=1000
  )");
  const auto trace = load_trace(path);
  std::ostringstream out;
  write_text_report(out, trace, compute_breakdown(trace), {});
  const auto text = out.str();
  EXPECT_NE(text.find("all-to-all: 40.0% of MoE-layer time"), std::string::npos) << text;
  EXPECT_NE(text.find("communication hidden by computation: 25.0%"), std::string::npos) << text;
}

TEST(Report, Durations) {
  EXPECT_EQ(format_duration(999), "999 ns");
  EXPECT_EQ(format_duration(1500), "1.5 us");
  EXPECT_EQ(format_duration(2'340'000), "2.34 ms");
  EXPECT_EQ(format_duration(12'000'000'000), "12 s");
  EXPECT_EQ(format_bytes(3 * 1024 * 1024), "3 MiB");
  EXPECT_EQ(format_percent(0.4), "40.0%");
}

}  // namespace
}  // namespace moetrace::analyzer
