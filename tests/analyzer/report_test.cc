#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "moetrace/analyzer/report.h"
#include "moetrace/instrument/trace_writer.h"
#include "moetrace/synthetic/synthetic_trace.h"
#include "json_schema.h"
#include "loaded_trace.h"
#include "test_paths.h"

namespace moetrace::analyzer {
namespace {

using testing::schema_errors;

const std::string kReportSchema = std::string(MOETRACE_SOURCE_DIR) + "/schemas/report.schema.json";

Analyses analyses_of(const Trace& t) { return analyze(t); }

// The JSON report of `t` with the per-rank and per-iteration rows.
nlohmann::json report_with_every_row(const Trace& t) {
  ReportOptions o;
  o.per_rank = o.per_iteration = true;
  return report_json(t, analyses_of(t), o);
}

TEST(Report, JsonMatchesTheSchema) {
  const auto path = testing::temp_path("report-synth.db");
  synthetic::SyntheticConfig c{.ranks = 2, .layers = 2, .iterations = 2};
  synthetic::write_synthetic_trace(path, c);
  const auto j = report_with_every_row(load_trace(path));
  EXPECT_EQ(schema_errors(j, kReportSchema), std::vector<std::string>{});
  EXPECT_EQ(j["breakdown"]["layers"].size(), 2u);
  EXPECT_EQ(j["breakdown"]["rows"].size(), 2u * 2u * 2u * 2u);  // ranks x layers x iterations x phases
  EXPECT_EQ(j["recommendations"]["status"], "not_computed");
}

// A small run that feeds every section: two ranks, one MoE layer over three
// iterations, FLOPs and bytes on the ops, buffers used by ops, expert load
// with a replica in iteration 2, the layer's shape and the run's config.
const std::string kRich = R"(
  run world_size=2 variant=pipemoe
  config model.elem_bytes=2 pipeline_degree=2
  layer layer=0 experts=4 top_k=1 model_dim=64 hidden_dim=256 tokens=128
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  stream id=2 rank=1 role=compute
  stream id=3 rank=1 role=comm
  op id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 chunk=0 start=0 end=100 flops=1e5
  op id=2 rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 chunk=0 start=100 end=300 bytes=4096
  op id=3 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 chunk=0 start=300 end=700 flops=4e6
  op id=4 rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 chunk=1 start=600 end=800 bytes=8192
  op id=5 rank=1 stream=2 kind=gate layer=0 iteration=0 chunk=0 start=0 end=120 flops=1e5
  op id=6 rank=1 stream=3 kind=dispatch_all_to_all layer=0 iteration=0 chunk=0 start=120 end=320 bytes=4096
  op id=7 rank=1 stream=2 kind=expert_ffn layer=0 iteration=0 chunk=0 start=320 end=1000 flops=8e6
  op id=8 rank=1 stream=3 kind=combine_all_to_all layer=0 iteration=0 chunk=1 start=1000 end=1200 bytes=8192
  op id=9 rank=0 stream=0 kind=expert_ffn layer=0 iteration=1 start=2000 end=2600 flops=6e6
  buffer id=1 rank=0 tag=T_DI bytes=4096 layer=0 chunk=0 alloc=100 free=900
  buffer id=2 rank=0 tag=T_M bytes=16384 layer=0 chunk=0 alloc=300 free=2700
  buffer id=3 rank=1 tag=params bytes=65536 alloc=0 free=2700
  use op=2 buffer=1 access=w
  use op=3 buffer=1 access=r
  use op=3 buffer=2 access=w
  use op=9 buffer=2 access=r
  use op=7 buffer=3 access=r
)" + testing::load_lines(0, 0, {{10, 0, 0, 40}, {0, 0, 30, 0}}) +
                          testing::load_lines(1, 0, {{12, 0, 0, 0}, {0, 0, 0, 38}}) +
                          testing::load_lines(2, 0, {{0, 0, 0, 20}, {0, 30, 0, 0}}) +
                          "place iteration=2 layer=0 expert=3 rank=0 role=replica\n";

TEST(Report, EverySectionOfARichTraceMatchesTheSchemas) {
  const auto path = testing::temp_path("report-rich.db");
  testing::write_text_trace(path, kRich);
  const auto j = report_with_every_row(load_trace(path));
  EXPECT_EQ(schema_errors(j, kReportSchema), std::vector<std::string>{});
  EXPECT_EQ(schema_errors(j["fitted_models"], std::string(MOETRACE_SOURCE_DIR) + "/schemas/fitted_models.schema.json"),
            std::vector<std::string>{});
  EXPECT_TRUE(j["memory"]["has_buffer_usage"].get<bool>());
  EXPECT_EQ(j["memory"]["tags"].size(), 3u);
  EXPECT_EQ(j["memory"]["layers"].size(), 1u);
  EXPECT_EQ(j["expert_load"]["rows"].size(), 3u);
  EXPECT_EQ(j["locality"]["pairs"].size(), 2u);
  EXPECT_FALSE(j["fitted_models"]["compute"].empty());
}

TEST(Report, SchemaRejectsAReportWithoutItsSections) {
  // The schema has teeth: dropping a required section fails validation.
  nlohmann::json j = {{"report_version", 2}, {"run", nlohmann::json::object()}};
  EXPECT_FALSE(schema_errors(j, kReportSchema).empty());
}

TEST(Report, TextNamesTheSharesOfTheFortyPercentLayer) {
  const auto trace = testing::load_text_trace("report-forty.db", testing::kFortyPercentLayer);
  std::ostringstream out;
  write_text_report(out, trace, analyses_of(trace), {});
  const auto text = out.str();
  EXPECT_NE(text.find("all-to-all: 40.0% of MoE-layer time"), std::string::npos) << text;
  EXPECT_NE(text.find("communication hidden by computation: 25.0%"), std::string::npos) << text;
  for (const char* title : {"\nMemory\n", "\nExpert load\n", "\nLocality of expert load", "\nFitted models\n",
                            "\nRecommendations\n"})
    EXPECT_NE(text.find(title), std::string::npos) << title;
}

TEST(Report, TextAndMarkdownOfTheRichTrace) {
  const auto trace = testing::load_text_trace("report-rich-md.db", kRich);
  const auto a = analyses_of(trace);
  std::ostringstream text, md;
  write_text_report(text, trace, a, {});
  EXPECT_NE(text.str().find("Memory bubbles (allocated while no op using the buffer runs"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("mpipemoe memory model per MoE layer"), std::string::npos);
  write_markdown_report(md, trace, a, {});
  const auto m = md.str();
  EXPECT_EQ(m.rfind("# moetrace report: ", 0), 0u);
  for (const char* h : {"## Where the time goes", "## Memory", "## Expert load", "## Locality of expert load",
                        "## Fitted models", "## Recommendations", "| layer | time | a2a % |", "| --- |"})
    EXPECT_NE(m.find(h), std::string::npos) << h;
}

TEST(Report, HtmlIsSelfContainedAndHasItsPlots) {
  const auto trace = testing::load_text_trace("report-rich-html.db", kRich);
  std::ostringstream out;
  write_html_report(out, trace, analyses_of(trace), {});
  const auto h = out.str();
  EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(h.find("</html>"), std::string::npos);
  // Nothing from the network, no external file.
  for (const char* forbidden : {"http://", "https://", "<link", " src=", "@import", "url("})
    EXPECT_EQ(h.find(forbidden), std::string::npos) << forbidden;
  for (const char* expected :
       {"<style>", "id=\"plot-breakdown\"", "class=\"seg\"", "id=\"plot-load-heatmap\"", "class=\"cell\"",
        "id=\"plot-locality\"", "class=\"curve all\"", "id=\"plot-memory\"", "class=\"bubble\"", "class=\"alloc\"",
        "<section id=\"recommendations\" data-status=\"not_computed\">", "<table>"})
    EXPECT_NE(h.find(expected), std::string::npos) << expected;
  // One heatmap cell per expert of the layer.
  std::size_t cells = 0;
  for (auto p = h.find("class=\"cell\""); p != std::string::npos; p = h.find("class=\"cell\"", p + 1)) ++cells;
  EXPECT_EQ(cells, 4u);
}

TEST(Report, DownsamplingKeepsThePeak) {
  std::vector<MemoryPoint> p;
  for (int i = 0; i < 1000; ++i) p.push_back({i, i == 537 ? 1'000'000 : i % 7});
  const auto d = downsample_max(p, 50);
  EXPECT_LE(d.size(), 50u);
  std::int64_t peak = 0;
  for (const auto& x : d) peak = std::max(peak, x.bytes);
  EXPECT_EQ(peak, 1'000'000);
  EXPECT_EQ(d.back().ts_ns, 999);
  EXPECT_EQ(downsample_max(p, 5000).size(), p.size());
}

TEST(Report, Durations) {
  EXPECT_EQ(format_duration(999), "999 ns");
  EXPECT_EQ(format_duration(1500), "1.5 us");
  EXPECT_EQ(format_duration(2'340'000), "2.34 ms");
  EXPECT_EQ(format_duration(12'000'000'000), "12 s");
  EXPECT_EQ(format_bytes(3 * 1024 * 1024), "3 MiB");
  EXPECT_EQ(format_percent(0.4), "40.0%");
}

// Names are stored as the tool recorded them, not necessarily UTF-8: the JSON
// report writes an invalid byte as U+FFFD instead of throwing (found by
// trace_loader_fuzzer: nlohmann's type_error 316 ended the program).
TEST(Report, JsonOfNamesThatAreNotUtf8) {
  const auto path = testing::temp_path("not-utf8.db");
  {
    instrument::RunRecord run;
    run.backend = "test";
    instrument::TraceWriter w(path, run);
    instrument::KernelRecord k;
    k.rank = RankId(0);
    k.stream = StreamId(0);
    k.start_ns = 0;
    k.end_ns = 100;
    k.name = w.intern("gemm\x96kernel");
    w.add(k);
  }
  const auto t = load_trace(path);
  std::ostringstream out;
  ReportOptions options;
  options.format = ReportFormat::kJson;
  ASSERT_NO_THROW(write_report(out, t, analyses_of(t), options));
  EXPECT_NE(out.str().find("gemm\xef\xbf\xbdkernel"), std::string::npos);
}

}  // namespace
}  // namespace moetrace::analyzer
