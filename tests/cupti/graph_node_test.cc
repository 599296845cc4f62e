// Activities a CUDA graph launched: CUPTI gives them the correlation id of
// the graph launch and the id of their graph node; the converter finds their
// op through the nodes announced during capture and their clones made by
// instantiation. Synthetic records (cupti_records.h), no GPU.
#include <gtest/gtest.h>

#include "cupti_records.h"
#include "moetrace/cupti/activity_converter.h"
#include "moetrace/cupti/converter_intake.h"

namespace moetrace::cupti {
namespace {

using namespace fake;

// The correlation id of the one cudaGraphLaunch every record below shares.
constexpr std::uint32_t kGraphLaunch = 900;

CUpti_ActivityKernel10 graph_kernel(std::uint64_t node, std::uint64_t start, std::uint64_t end) {
  auto k = kernel(1, 7, kGraphLaunch, start, end, "k");
  k.graphNodeId = node;
  k.graphId = 3;
  return k;
}

// A memcpy or memset of 64 bytes the graph ran.
template <class T>
T graph_transfer(CUpti_ActivityKind kind, std::uint64_t node, std::uint64_t start, std::uint64_t end) {
  auto m = on_stream<T>(kind, 1, 7, kGraphLaunch, start, end);
  m.graphNodeId = node;
  m.graphId = 3;
  m.bytes = 64;
  return m;
}

OpLabel label_of_op(std::int64_t id) {
  OpLabel l = gate_label();
  l.op = OpId(id);
  return l;
}

// Capture made nodes 101 (op 5) and 102 (op 6); instantiation cloned them
// into 201 and 202, the ids the launched graph's records carry.
struct GraphNodeTest : ConverterTest {
  GraphNodeTest() {
    conv.map_stream(1, 7, stream_record(3, 1, "compute"));
    conv.note_op(label_of_op(5), 10, 20);
    conv.note_op(label_of_op(6), 20, 30);
    conv.note_graph_node(101, OpId(5));
    conv.note_graph_node(102, OpId(6));
    conv.note_graph_node_clone(201, 101);
    conv.note_graph_node_clone(202, 102);
  }
  const instrument::OpRangeRecord& op_range(std::int64_t id) const {
    for (const auto& o : sink.ops)
      if (o.id.value == id) return o;
    throw std::runtime_error("no op range");
  }
};

TEST_F(GraphNodeTest, EachClonedNodeGivesItsActivitiesTheOpThatCapturedIt) {
  const auto k1 = graph_kernel(201, 1000, 1400);
  const auto k2 = graph_kernel(202, 1500, 1900);
  const auto c = graph_transfer<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY, 202, 2000, 2100);
  const auto s = graph_transfer<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET, 201, 900, 950);
  feed(&k1);
  feed(&k2);
  feed(&c);
  feed(&s);
  // Known at once: nothing waits for a correlation record.
  ASSERT_EQ(sink.kernels.size(), 2u);
  ASSERT_EQ(sink.memcpys.size(), 1u);
  ASSERT_EQ(sink.memsets.size(), 1u);
  EXPECT_EQ(sink.kernels[0].op.value, 5);
  EXPECT_EQ(sink.kernels[1].op.value, 6);
  EXPECT_EQ(sink.memcpys[0].op.value, 6);
  EXPECT_EQ(sink.memsets[0].op.value, 5);
  EXPECT_EQ(conv.stats().graph_activities, 4);
  EXPECT_EQ(conv.stats().activities_without_op, 0);
  conv.finish();
  // Op 5: the memset [900, 950) and kernel [1000, 1400) -> [900, 1400);
  // op 6: kernel [1500, 1900) and memcpy [2000, 2100) -> [1500, 2100).
  EXPECT_EQ(span_of(op_range(5)), Span(900, 1400));
  EXPECT_EQ(span_of(op_range(6)), Span(1500, 2100));
}

TEST_F(GraphNodeTest, TheNodeWinsOverTheGraphLaunchsCorrelation) {
  // The graph was launched inside op 9's scope: its correlation names op 9,
  // but the kernel was captured for op 6.
  const auto corr = correlation(kGraphLaunch, 9);
  feed(&corr);
  const auto k = graph_kernel(202, 1000, 1100);
  feed(&k);
  ASSERT_EQ(sink.kernels.size(), 1u);
  EXPECT_EQ(sink.kernels[0].op.value, 6);
}

TEST_F(GraphNodeTest, AnUnknownNodeFallsBackToTheCorrelation) {
  // Node 777 was never announced: the activity waits for its correlation
  // like any other, and gets the op of the graph launch's scope.
  const auto k = graph_kernel(777, 1000, 1100);
  feed(&k);
  EXPECT_TRUE(sink.kernels.empty());
  const auto corr = correlation(kGraphLaunch, 9);
  feed(&corr);
  ASSERT_EQ(sink.kernels.size(), 1u);
  EXPECT_EQ(sink.kernels[0].op.value, 9);
}

TEST_F(GraphNodeTest, ANodeMadeOutsideAnyOpLeavesItsActivitiesWithoutOne) {
  conv.note_graph_node(103, OpId());  // created outside an op scope: not recorded
  conv.note_graph_node_clone(203, 103);
  const auto k = graph_kernel(203, 1000, 1100);
  feed(&k);
  EXPECT_TRUE(sink.kernels.empty());  // waits: its correlation may still name an op
  conv.finish();
  ASSERT_EQ(sink.kernels.size(), 1u);
  EXPECT_FALSE(sink.kernels[0].op.valid());
  EXPECT_EQ(conv.stats().activities_without_op, 1);
}

TEST_F(GraphNodeTest, NodeIdsOfTheCaptureItselfAlsoResolve) {
  // Should a CUPTI report the captured node's own id rather than its clone's,
  // the activity still finds its op.
  const auto k = graph_kernel(101, 1000, 1100);
  feed(&k);
  ASSERT_EQ(sink.kernels.size(), 1u);
  EXPECT_EQ(sink.kernels[0].op.value, 5);
}

// The collector announces nodes and clones through the intake from the
// capturing thread; they reach the converter in that order before a buffer.
TEST(ConverterIntakeGraph, NodesAndClonesReachTheConverterInOrder) {
  VectorSink sink;
  ConverterIntake intake(sink, ConverterOptions{RankId(0), nullptr});
  intake.note_graph_node(11, OpId(4));
  intake.note_graph_node_clone(21, 11);
  EXPECT_EQ(intake.waiting(), 2u);
  intake.with_converter([&](ActivityConverter& c) {
    const auto k = graph_kernel(21, 100, 200);
    c.convert(as_activity(&k));
  });
  ASSERT_EQ(sink.kernels.size(), 1u);
  EXPECT_EQ(sink.kernels[0].op.value, 4);
}

}  // namespace
}  // namespace moetrace::cupti
