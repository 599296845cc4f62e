#include <gtest/gtest.h>

#include <vector>

#include "moetrace/cuda/link_model.h"
#include "moetrace/schema/error.h"
#include "error_of.h"

namespace moetrace::cuda {
namespace {

TEST(LinkModel, ParsesKeysAndKeepsDefaults) {
  const LinkModel d;
  const LinkModel m = parse_link_model("latency_us=2.5,sms=4");
  EXPECT_DOUBLE_EQ(m.latency_us, 2.5);
  EXPECT_EQ(m.sms, 4);
  EXPECT_DOUBLE_EQ(m.bandwidth_gb_s, d.bandwidth_gb_s);
  EXPECT_EQ(m.piece_bytes, d.piece_bytes);
  const LinkModel r = parse_link_model(to_string(parse_link_model("bandwidth_gb_s=12.5,piece_bytes=4096")));
  EXPECT_DOUBLE_EQ(r.bandwidth_gb_s, 12.5);
  EXPECT_EQ(r.piece_bytes, 4096);
  EXPECT_NO_THROW(parse_link_model(""));
}

TEST(LinkModel, ErrorsNameTheKey) {
  auto message = [](const char* spec) {
    return moetrace::testing::error_of<ConfigError>([&] { parse_link_model(spec); });
  };
  EXPECT_NE(message("bandwidth=3").find("unknown key 'bandwidth'"), std::string::npos);
  EXPECT_NE(message("sms=many").find("link sms (many) is not an integer"), std::string::npos);
  EXPECT_NE(message("bandwidth_gb_s=0").find("bandwidth_gb_s (0) must be positive"), std::string::npos);
  EXPECT_NE(message("latency_us=-1").find("latency_us"), std::string::npos);
  EXPECT_NE(message("piece_bytes=10").find("multiple of 16"), std::string::npos);
  EXPECT_NE(message("sms").find("not key=value"), std::string::npos);
}

TEST(LinkModel, TransferTimeIsAlphaPlusBytesOverBandwidth) {
  LinkModel m;
  m.latency_us = 5;
  m.bandwidth_gb_s = 100;  // 100 bytes per ns
  EXPECT_DOUBLE_EQ(m.transfer_ns(0), 5000);
  EXPECT_DOUBLE_EQ(m.transfer_ns(1'000'000), 5000 + 10'000);
}

TEST(Pacing, BlocksShareTheBytesAndFinishAtTheModelledTime) {
  LinkModel m{.latency_us = 3, .bandwidth_gb_s = 25, .sms = 6, .piece_bytes = 4096};
  for (std::int64_t bytes : {std::int64_t{1}, std::int64_t{4096}, std::int64_t{100'000},
                             std::int64_t{10'000'000}}) {
    const PaceParams p = pace_params(m, bytes);
    EXPECT_GE(p.blocks, 1);
    EXPECT_LE(p.blocks, m.sms);
    std::int64_t sum = 0;
    for (int b = 0; b < p.blocks; ++b) sum += block_share(bytes, p.piece_bytes, p.blocks, b);
    EXPECT_EQ(sum, bytes);
    const double modelled = m.transfer_ns(bytes);
    const auto finish = static_cast<double>(paced_finish_ns(p, bytes));
    // Round-robin pieces: the busiest block has at most one piece more than its share.
    EXPECT_GE(finish, modelled - 1);
    EXPECT_LE(finish, modelled + static_cast<double>(m.piece_bytes) * p.blocks / m.bandwidth_gb_s + 1);
  }
  EXPECT_EQ(pace_params(m, 100).blocks, 1);  // one piece: one block
}

TEST(Pacing, AllReducePhasesMoveRingTraffic) {
  EXPECT_EQ(all_reduce_phase_bytes(1000, 1), 0);
  EXPECT_EQ(all_reduce_phase_bytes(1000, 2), 500);
  EXPECT_EQ(all_reduce_phase_bytes(1000, 4), 750);
}

TEST(Pacing, ReduceScatterRunsAtTheModelledBandwidthAtEverySize) {
  // The emulated all-reduce's phase 0 at P = 8: rank i sums slice i of the
  // 8 views, pacing its 7 remote copies of the slice. It must take
  // alpha + (P - 1) / P x bytes / beta (a ring's reduce-scatter); pacing
  // blocks sized by the 7 copies instead ran views under 4 MiB 1.9-2.9x slow.
  const LinkModel m;  // the default link
  const int P = 8;
  for (std::int64_t bytes : {std::int64_t{256} << 10, std::int64_t{1} << 20, std::int64_t{4} << 20,
                             std::int64_t{16} << 20, std::int64_t{3'000'000}}) {
    const std::int64_t slice = bytes / P;
    const PaceParams p = reduce_pace_params(m, slice);
    const auto finish = static_cast<double>(paced_reduce_finish_ns(p, slice, P - 1));
    const double modelled = m.transfer_ns(all_reduce_phase_bytes(bytes, P));
    EXPECT_GE(finish, modelled - 1) << bytes;
    // At most one piece of the slice more than the busiest block's share.
    EXPECT_LE(finish, modelled + static_cast<double>(m.piece_bytes * (P - 1)) * p.blocks / m.bandwidth_gb_s + 1)
        << bytes;
    if (slice % m.piece_bytes == 0 || slice < m.piece_bytes) {
      EXPECT_NEAR(finish, modelled, 1.0) << bytes;
    }
  }
}

TEST(Pacing, AggReduceIsOneRemoteCopy) {
  LinkModel m;
  m.sms = 4;
  const std::int64_t bytes = 1 << 20;
  const PaceParams p = reduce_pace_params(m, bytes);
  EXPECT_EQ(p.blocks, 4);
  EXPECT_NEAR(static_cast<double>(paced_reduce_finish_ns(p, bytes, 1)), m.transfer_ns(bytes), 1.0);
}

TEST(Barrier, LinearInTheRanksAndOrdersEveryStreamAfterEveryOther) {
  EXPECT_TRUE(barrier_steps(0).empty());
  EXPECT_TRUE(barrier_steps(1).empty());
  for (int n : {2, 3, 8, 64}) {
    const auto steps = barrier_steps(n);
    int waits = 0, records = 0;
    // Which streams' earlier work each stream (and each event) is ordered after.
    std::vector<std::vector<bool>> after(static_cast<std::size_t>(n), std::vector<bool>(static_cast<std::size_t>(n)));
    for (int i = 0; i < n; ++i) after[static_cast<std::size_t>(i)][static_cast<std::size_t>(i)] = true;
    std::vector<std::vector<bool>> event(static_cast<std::size_t>(n + 1), std::vector<bool>(static_cast<std::size_t>(n)));
    for (const BarrierStep& b : steps) {
      ASSERT_GE(b.stream, 0);
      ASSERT_LT(b.stream, n);
      ASSERT_GE(b.event, 0);
      ASSERT_LE(b.event, n);
      auto& s = after[static_cast<std::size_t>(b.stream)];
      auto& e = event[static_cast<std::size_t>(b.event)];
      if (b.kind == BarrierStep::Kind::kRecord) {
        ++records;
        e = s;
      } else {
        ++waits;
        for (std::size_t k = 0; k < s.size(); ++k) s[k] = s[k] || e[k];
      }
    }
    EXPECT_EQ(waits, 2 * (n - 1)) << n;
    EXPECT_EQ(records, n) << n;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        EXPECT_TRUE(after[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)]) << n << ": " << i << " after " << j;
  }
}

}  // namespace
}  // namespace moetrace::cuda
