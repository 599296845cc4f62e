// Memory timeline, memory bubbles and the mpipemoe memory model on hand-built
// traces. Every expected number is derived by hand in the comment above it.
#include <gtest/gtest.h>

#include "moetrace/analyzer/memory.h"
#include "loaded_trace.h"

namespace moetrace::analyzer {
namespace {

MemoryAnalysis memory_of(const std::string& name, std::string_view text) {
  return analyze_memory(testing::load_text_trace(name, text));
}

// The mpipemoe memory model of the one MoE layer of a trace (its `layer`
// line gives the shape).
LayerMemoryModel layer_model_of(const std::string& name, std::string_view text) {
  auto m = memory_of(name, text);
  if (m.layers.size() != 1) throw std::runtime_error(std::to_string(m.layers.size()) + " layer models, not 1");
  return m.layers[0];
}

const TagBubbles& tag(const MemoryAnalysis& m, std::string_view t) {
  for (const auto& x : m.tags)
    if (x.tag == t) return x;
  throw std::runtime_error("no such tag");
}

// Rank 0, buffers from the buffers table (no raw events):
//   T_DI   1000 B alive [0, 1000), used by op 1 [100, 400) and op 2 [600, 900)
//          -> used 600 ns, bubble 400 ns -> 1000 x 400 = 400,000 B ns,
//             bubbles [0,100), [400,600), [900,1000)
//   params 5000 B alive [0, 1000), used by op 1 only -> bubble 700 ns
//          -> 5000 x 700 = 3,500,000 B ns
//   dT_M   2000 B alive [400, 700), used by no op -> bubble 300 ns -> 600,000 B ns
// Total bubble 4,500,000 B ns; allocated 1000x1000 + 5000x1000 + 2000x300
// = 6,600,000 B ns.
// Timeline: 6000 B from 0, 8000 B on [400, 700), 6000 B after, 0 at 1000.
// Peak 8000 B at 400: model states 5000, activations 1000, temporary 2000.
constexpr std::string_view kBubbles = R"(
  stream id=0 rank=0 role=compute
  op id=1 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=100 end=400
  op id=2 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=bwd start=600 end=900
  buffer id=1 rank=0 tag=T_DI bytes=1000 layer=0 alloc=0 free=1000
  buffer id=2 rank=0 tag=params bytes=5000 layer=0 alloc=0 free=1000
  buffer id=3 rank=0 tag=dT_M bytes=2000 layer=0 alloc=400 free=700
  use op=1 buffer=1 access=r
  use op=2 buffer=1 access=r
  use op=1 buffer=2 access=r
)";

TEST(Memory, BubbleIsBytesTimesUnusedTime) {
  const auto m = memory_of("bubbles.db", kBubbles);
  ASSERT_TRUE(m.has_allocations);
  ASSERT_TRUE(m.has_buffer_usage);
  EXPECT_DOUBLE_EQ(tag(m, "T_DI").memory_bubble_bytes_ns, 400'000.0);
  EXPECT_DOUBLE_EQ(tag(m, "params").memory_bubble_bytes_ns, 3'500'000.0);
  EXPECT_DOUBLE_EQ(tag(m, "dT_M").memory_bubble_bytes_ns, 600'000.0);
  EXPECT_DOUBLE_EQ(m.memory_bubble_bytes_ns, 4'500'000.0);
  EXPECT_DOUBLE_EQ(m.allocated_bytes_ns, 6'600'000.0);
  EXPECT_DOUBLE_EQ(m.buffer_bytes_ns, 6'600'000.0);
  EXPECT_DOUBLE_EQ(m.bubble_fraction(), 4'500'000.0 / 6'600'000.0);
  EXPECT_DOUBLE_EQ(tag(m, "T_DI").bubble_fraction(), 0.4);
  // The three T_DI gaps are listed as bubbles.
  std::vector<std::pair<std::int64_t, std::int64_t>> gaps;
  for (const auto& b : m.bubbles)
    if (b.tag == "T_DI") gaps.emplace_back(b.start_ns, b.end_ns);
  EXPECT_EQ(gaps, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 100}, {400, 600}, {900, 1000}}));
  EXPECT_EQ(tag(m, "T_DI").memory_class, MemoryClass::kActivations);
  EXPECT_EQ(tag(m, "dT_M").memory_class, MemoryClass::kTemporaryBuffers);
}

TEST(Memory, TimelineAndPeakComposition) {
  const auto m = memory_of("peak.db", kBubbles);
  ASSERT_EQ(m.ranks.size(), 1u);
  const auto& r = m.ranks[0];
  EXPECT_FALSE(r.from_events);
  std::vector<std::pair<std::int64_t, std::int64_t>> steps;
  for (const auto& p : r.allocated) steps.emplace_back(p.ts_ns, p.bytes);
  EXPECT_EQ(steps, (std::vector<std::pair<std::int64_t, std::int64_t>>{
                       {0, 6000}, {400, 8000}, {700, 6000}, {1000, 0}}));
  EXPECT_EQ(r.peak_bytes, 8000);
  EXPECT_EQ(r.peak_ns, 400);
  EXPECT_EQ(r.peak_by_class[static_cast<std::size_t>(MemoryClass::kModelStates)], 5000);
  EXPECT_EQ(r.peak_by_class[static_cast<std::size_t>(MemoryClass::kActivations)], 1000);
  EXPECT_EQ(r.peak_by_class[static_cast<std::size_t>(MemoryClass::kTemporaryBuffers)], 2000);
  EXPECT_EQ(m.peak_bytes, 8000);
  EXPECT_EQ(m.peak_rank, 0);
  // Idle bytes: [0,100) T_DI + params = 6000; [100,400) nothing idle (op 1
  // uses both); [400,600) T_DI + params + dT_M = 8000; [600,700) params + dT_M
  // = 7000; [700,900) params = 5000; [900,1000) T_DI + params = 6000.
  std::vector<std::pair<std::int64_t, std::int64_t>> idle;
  for (const auto& p : r.idle) idle.emplace_back(p.ts_ns, p.bytes);
  EXPECT_EQ(idle, (std::vector<std::pair<std::int64_t, std::int64_t>>{
                      {0, 6000}, {100, 0}, {400, 8000}, {600, 7000}, {700, 5000}, {900, 6000}, {1000, 0}}));
}

// Raw alloc/free events take precedence over the buffers table on their
// rank. Address 0x10 is allocated twice (4096 B on [0, 100), 1024 B on
// [200, 300)); address 0x20 (8192 B, buffer 7 = T_M) from 50 and never
// freed, so it lives to the end of the run (300, the latest event); a free
// of 0x30 that was never allocated is counted; host memory (kind 2) is not
// device memory. Peak: 4096 + 8192 = 12288 B on [50, 100) (buffer 8 comes
// from the buffers table and is not counted again on a rank with events).
TEST(Memory, RawEventsPairAllocationsByAddress) {
  const auto m = memory_of("raw.db", R"(
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=expert_ffn start=60 end=80
    buffer id=7 rank=0 tag=T_M bytes=8192
    buffer id=8 rank=0 tag=params bytes=99999 alloc=0 free=300
    use op=1 buffer=7
    alloc rank=0 ts=0 address=0x10 bytes=4096
    alloc rank=0 ts=50 address=0x20 bytes=8192 buffer=7
    free  rank=0 ts=100 address=0x10 bytes=4096
    alloc rank=0 ts=200 address=0x10 bytes=1024
    free  rank=0 ts=250 address=0x30 bytes=64
    alloc rank=0 ts=260 address=0x40 bytes=777 memory_kind=2
    free  rank=0 ts=300 address=0x10 bytes=1024
  )");
  ASSERT_EQ(m.ranks.size(), 1u);
  const auto& r = m.ranks[0];
  EXPECT_TRUE(r.from_events);
  EXPECT_EQ(r.peak_bytes, 12288);
  EXPECT_EQ(r.peak_ns, 50);
  EXPECT_EQ(r.unmatched_frees, 1);
  EXPECT_EQ(r.peak_by_class[static_cast<std::size_t>(MemoryClass::kActivations)], 8192);
  EXPECT_EQ(r.peak_by_class[static_cast<std::size_t>(MemoryClass::kUnattributed)], 4096);
  // T_M alive [50, 300), used [60, 80) -> bubble 230 ns x 8192 B.
  EXPECT_DOUBLE_EQ(tag(m, "T_M").memory_bubble_bytes_ns, 8192.0 * 230);
  // Buffer 8 (params, 99999 B on [0, 300)) is named by no event: it gets
  // its bubble (no op uses it: 300 ns) but does not enter the timeline again.
  EXPECT_DOUBLE_EQ(tag(m, "params").memory_bubble_bytes_ns, 99999.0 * 300);
  EXPECT_EQ(m.tags.size(), 2u);
}

// mpipemoe Eq. 1-6 for E = 4 experts on P = 2 ranks (2 per rank), M = 8,
// H = 32, B = 10 tokens (top-1), n = 4 partitions, 2-byte elements:
//   Eq. 1: 4 (E M + 2 x 2 H M) = 4 (32 + 1024) = 4224 el -> 8448 B
//   Eq. 2: 4 B M + B H = 320 + 320 = 640 el -> 1280 B
//   Eq. 3: B M + B H = 80 + 320 = 400 el -> 800 B
//   Eq. 4: = Eq. 2 -> 1280 B
//   Eq. 5: B (2M (n-2)/n + H (n-1)/n) = 10 (16 x 0.5 + 32 x 0.75) = 320 el -> 640 B
//   Eq. 6: 2 x 320 / (4224 + 2 x 640) = 640 / 5504
// The trace's layer-0 activation buffers peak at 600 B (T_DI 200 + T_M 400
// alive together on [10, 20)).
TEST(Memory, MpipemoeModelOfALayer) {
  const auto l = layer_model_of("model.db", R"(
    run world_size=2
    config model.elem_bytes=2 partitions=4
    layer layer=0 experts=4 top_k=1 model_dim=8 hidden_dim=32 tokens=10
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=expert_ffn layer=0 start=0 end=30
    buffer id=1 rank=0 tag=T_DI bytes=200 layer=0 alloc=0 free=20
    buffer id=2 rank=0 tag=T_M bytes=400 layer=0 alloc=10 free=30
  )");
  EXPECT_EQ(l.partitions, 4);
  EXPECT_DOUBLE_EQ(l.experts_per_rank, 2.0);
  EXPECT_EQ(l.model_states_bytes, 8448);             // Eq. 1
  EXPECT_EQ(l.activations_bytes, 1280);              // Eq. 2
  EXPECT_EQ(l.temporary_buffers_bytes, 800);         // Eq. 3
  EXPECT_EQ(l.pipelined_buffers_bytes, 1280);        // Eq. 4
  EXPECT_EQ(l.reuse_saving_bytes, 640);              // Eq. 5
  EXPECT_DOUBLE_EQ(l.saving_ratio, 640.0 / 5504.0);  // Eq. 6
  EXPECT_EQ(l.measured_peak_bytes[static_cast<std::size_t>(MemoryClass::kActivations)], 600);
  EXPECT_EQ(l.measured_peak_bytes[static_cast<std::size_t>(MemoryClass::kModelStates)], -1);
}

// With expert load in the trace, B is measured: iterations 0 and 1 route 40
// and 60 tokens (top-k included) over P = 2 devices -> B = 50 / 2 = 25,
// whatever layers.tokens says (here 999).
TEST(Memory, TokensOfTheModelComeFromTheExpertLoad) {
  const auto l = layer_model_of("model-load.db", R"(
    run world_size=2
    layer layer=0 experts=2 top_k=2 model_dim=8 hidden_dim=32 tokens=999
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=expert_ffn layer=0 start=0 end=30
    buffer id=1 rank=0 tag=T_DI bytes=200 layer=0 alloc=0 free=20
    load iteration=0 layer=0 src=0 expert=0 tokens=30
    load iteration=0 layer=0 src=1 expert=1 tokens=10
    load iteration=1 layer=0 src=0 expert=1 tokens=60
  )");
  EXPECT_EQ(l.tokens, 25);
}

TEST(Memory, ClassesOfTags) {
  EXPECT_EQ(memory_class("optimizer"), MemoryClass::kModelStates);
  EXPECT_EQ(memory_class("routing"), MemoryClass::kActivations);
  EXPECT_EQ(memory_class("dT_DO"), MemoryClass::kTemporaryBuffers);
  EXPECT_EQ(memory_class("workspace"), MemoryClass::kTemporaryBuffers);
  EXPECT_EQ(memory_class("host_offload"), MemoryClass::kUnattributed);
}


// Windowed queries of the kBubbles timeline (6000 B from 0, 8000 B on
// [400, 700), 6000 B on [700, 1000), 0 after): over [500, 800) it starts at
// 8000 (in force at 500), drops to 6000 at 700; peak 8000 at 500. Over
// [800, 2000): 6000 then 0 at 1000; peak 6000. Before the first point: 0.
// memory_timeline is analyze_memory's timeline without the bubbles.
TEST(Memory, WindowedTimelineAndTheTimelineAlone) {
  const auto trace = testing::load_text_trace("window.db", kBubbles);
  const auto t = memory_timeline(trace);
  ASSERT_EQ(t.ranks.size(), 1u);
  EXPECT_EQ(t.peak_bytes, 8000);
  EXPECT_EQ(t.measured_peak_bytes(), 8000);
  EXPECT_EQ(t.ranks[0].allocated, analyze_memory(trace).ranks[0].allocated);
  const auto& tl = t.ranks[0].allocated;
  EXPECT_EQ(memory_at(tl, -1), 0);
  EXPECT_EQ(memory_at(tl, 400), 8000);
  EXPECT_EQ(memory_at(tl, 699), 8000);
  EXPECT_EQ(memory_at(tl, 700), 6000);
  const auto w = memory_in_window(tl, 500, 800);
  ASSERT_EQ(w.points.size(), 2u);
  EXPECT_EQ(w.points[0].ts_ns, 500);
  EXPECT_EQ(w.points[0].bytes, 8000);
  EXPECT_EQ(w.points[1].ts_ns, 700);
  EXPECT_EQ(w.points[1].bytes, 6000);
  EXPECT_EQ(w.peak_bytes, 8000);
  EXPECT_EQ(w.peak_ns, 500);
  const auto late = memory_in_window(tl, 800, 2000);
  ASSERT_EQ(late.points.size(), 2u);
  EXPECT_EQ(late.points[1].bytes, 0);
  EXPECT_EQ(late.peak_bytes, 6000);
  // No allocation at all: no peak to compare with a budget.
  EXPECT_EQ(MemoryTimeline{}.measured_peak_bytes(), -1);
}

// One layer, E = 2 experts on P = 1 device, M = 4, H = 16, B = 8, n = 2,
// 1-byte elements, in Eq. 6's accounting:
//   Eq. 1: 4 (E M + 2 x 2 H M) = 4 (8 + 256) = 1056 B
//   Eq. 2 = Eq. 4: 4 B M + B H = 128 + 128 = 256 B
//   Eq. 5: B (2M (n-2)/n + H (n-1)/n) = 8 (0 + 8) = 64 B
// without reuse 1056 + 2 x 256 = 1568 B; with reuse (any of S1-S4) less
// 2 x 64: 1440 B.
TEST(Memory, LayerMemoryOfEachStrategy) {
  const auto l = layer_model_of("model-strategies.db", R"(
    run world_size=1
    config elem_bytes=1 partitions=2
    layer layer=0 experts=2 top_k=1 model_dim=4 hidden_dim=16 tokens=8
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=expert_ffn layer=0 start=0 end=30
  )");
  EXPECT_EQ(l.model_states_bytes, 1056);
  EXPECT_EQ(l.layer_bytes_without_reuse, 1568);
  EXPECT_EQ(l.layer_bytes_with_reuse, 1440);
}

// The pipeline degree r (n): run_config first, else the chunks of the layer.
TEST(Memory, PipelineDegreeFromConfigElseChunks) {
  const auto chunks = testing::temp_path("r_chunks.db");
  testing::write_text_trace(chunks, R"(
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=dispatch_all_to_all layer=0 chunk=0 start=0 end=10
    op id=2 rank=0 stream=0 kind=dispatch_all_to_all layer=0 chunk=2 start=10 end=20
    op id=3 rank=0 stream=0 kind=gate layer=1 start=0 end=10
  )");
  const auto t = load_trace(chunks);
  EXPECT_EQ(pipeline_degree(t, 0), 3);
  EXPECT_EQ(pipeline_degree(t, 1), 1);
  const auto configured = testing::temp_path("r_config.db");
  testing::write_text_trace(configured, R"(
    run world_size=1 variant=pipemoe
    config pipemoe.pipeline_degree=4
    stream id=0 rank=0 role=compute
    op id=1 rank=0 stream=0 kind=dispatch_all_to_all layer=0 chunk=0 start=0 end=10
  )");
  EXPECT_EQ(pipeline_degree(load_trace(configured), 0), 4);
}

}  // namespace
}  // namespace moetrace::analyzer
