#include <gtest/gtest.h>

#include "moetrace/cupti/buffer_pool.h"
#include "moetrace/cupti/op_message.h"

namespace moetrace::cupti {
namespace {

OpLabel label() {
  return {.name = "L1.it0.dispatch_all_to_all.c1.bwd", .op = OpId(17), .rank = RankId(3), .stream = StreamId(10),
          .kind = OpKind::kDispatchAllToAll, .layer = 1, .iteration = 0, .micro_batch = -1, .chunk = 1,
          .phase = Phase::kBackward, .flops = 0.1 + 1e9 / 3.0, .bytes = 4096, .recv_bytes = 12288,
          .peer = RankId(2)};
}

TEST(OpMessage, RoundTrips) {
  const OpLabel l = label();
  const std::string m = format_op_message(l);
  EXPECT_EQ(m.rfind("L1.it0.dispatch_all_to_all.c1.bwd {op=17 rank=3 stream=10 kind=dispatch_all_to_all", 0), 0u) << m;
  auto back = parse_op_message(m);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, l);
}

// A message of a writer older than recv_bytes: unknown (-1), the rest read.
TEST(OpMessage, WithoutReceivedBytes) {
  auto back = parse_op_message("x {op=5 kind=dispatch_all_to_all bytes=4096 peer=-1}");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->bytes, 4096);
  EXPECT_EQ(back->recv_bytes, -1);
}

TEST(OpMessage, NamesWithSpacesAndBracesSurvive) {
  OpLabel l = label();
  l.name = "odd {name} with spaces";
  auto back = parse_op_message(format_op_message(l));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->name, l.name);
}

TEST(OpMessage, ForeignRangesAreNotOps) {
  EXPECT_FALSE(parse_op_message("forward").has_value());
  EXPECT_FALSE(parse_op_message("x {rank=1}").has_value());           // no op id
  EXPECT_FALSE(parse_op_message("x {op=1 kind=nonsense}").has_value());
  EXPECT_FALSE(parse_op_message("x {op=1 phase}").has_value());
  auto minimal = parse_op_message("x {op=5 future_key=1}");
  ASSERT_TRUE(minimal.has_value());
  EXPECT_EQ(minimal->op.value, 5);
  EXPECT_EQ(minimal->kind, OpKind::kOtherOp);
}

TEST(BufferPool, RecyclesAndBounds) {
  ActivityBufferPool pool(5000, 2);
  EXPECT_EQ(pool.buffer_bytes() % ActivityBufferPool::kAlignment, 0u);
  EXPECT_GE(pool.buffer_bytes(), 5000u);
  std::uint8_t* a = pool.acquire();
  std::uint8_t* b = pool.acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 8, 0u);
  EXPECT_EQ(pool.acquire(), nullptr);  // bounded: CUPTI drops, the collector counts
  pool.release(a);
  EXPECT_EQ(pool.acquire(), a);        // recycled, not reallocated
  pool.release(nullptr);
  const PoolStats s = pool.stats();
  EXPECT_EQ(s.allocated, 2u);
  EXPECT_EQ(s.refused, 1u);
  EXPECT_EQ(s.acquired, 3u);
  EXPECT_EQ(s.in_use, 2u);
  EXPECT_EQ(s.peak_in_use, 2u);
  pool.release(a);
  pool.release(b);
}

// Buffers reserved before tracing are handed out without allocating on the
// thread that asks (CUPTI asks on the thread issuing the work), and the
// reservation stays within the pool's bound.
TEST(BufferPool, ReservedBuffersNeedNoAllocationWhenAskedFor) {
  ActivityBufferPool pool(1 << 16, 3);
  pool.reserve(2);
  EXPECT_EQ(pool.stats().allocated, 2u);
  std::uint8_t* a = pool.acquire();
  std::uint8_t* b = pool.acquire();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a[0], 0);
  EXPECT_EQ(b[pool.buffer_bytes() - 1], 0);
  EXPECT_EQ(pool.stats().allocated_on_demand, 0u);
  std::uint8_t* c = pool.acquire();  // past the reservation: allocated when asked
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(pool.stats().allocated_on_demand, 1u);
  pool.release(a);
  pool.release(b);
  pool.release(c);
  ActivityBufferPool bounded(1 << 12, 2);
  bounded.reserve(5);
  EXPECT_EQ(bounded.stats().allocated, 2u);
}

}  // namespace
}  // namespace moetrace::cupti
