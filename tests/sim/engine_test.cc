// The discrete-event engine on small hand-built plans: stream order,
// collectives starting together, link sharing rules, interference factors,
// the uneven all-to-all rule (pro-prophet Eq. 1), memory accounting, and
// clear errors for plans that stall. Expected times are derived by hand.
#include <gtest/gtest.h>

#include "moetrace/schema/error.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"
#include "error_of.h"

namespace moetrace::sim {
namespace {

using plan::Collective;
using plan::CollectiveKind;

// A tiny plan builder: each rank has a compute, a comm and a copy stream.
struct TestPlan {
  plan::Plan p;
  explicit TestPlan(int ranks) {
    p.variant = "test";
    p.world_size = ranks;
    for (int r = 0; r < ranks; ++r)
      for (auto role : {plan::StreamRole::kCompute, plan::StreamRole::kComm, plan::StreamRole::kCopy}) {
        plan::Stream s;
        s.id = StreamId(static_cast<int>(p.streams.size()));
        s.rank = RankId(r);
        s.role = role;
        s.name = "s";
        p.streams.push_back(s);
      }
  }
  StreamId stream(int rank, plan::StreamRole role) const { return StreamId(rank * 3 + static_cast<int>(role)); }
  OpId compute(int rank, double flops, std::vector<OpId> deps = {}, int stream_role = 0) {
    plan::Op op;
    op.id = OpId(static_cast<std::int64_t>(p.ops.size()));
    op.kind = OpKind::kDenseFfn;
    op.name = "compute" + std::to_string(op.id.value);
    op.rank = RankId(rank);
    op.stream = StreamId(rank * 3 + stream_role);
    op.flops = flops;
    op.deps = std::move(deps);
    p.ops.push_back(op);
    return op.id;
  }
  // One collective: per rank its bytes (all-to-all: sends to rank (r+1) % P).
  std::vector<OpId> collective(CollectiveKind kind, const std::vector<std::int64_t>& bytes, int stream_role = 1,
                               std::vector<std::vector<OpId>> deps = {}) {
    const int P = static_cast<int>(bytes.size());
    std::vector<OpId> ids;
    for (int r = 0; r < P; ++r) {
      plan::Op op;
      op.id = OpId(static_cast<std::int64_t>(p.ops.size()));
      op.kind = kind == CollectiveKind::kAllToAllV ? OpKind::kDispatchAllToAll : OpKind::kGradAllReduce;
      op.name = "coll" + std::to_string(next_collective_);
      op.rank = RankId(r);
      op.stream = StreamId(r * 3 + stream_role);
      op.bytes = bytes[static_cast<std::size_t>(r)];
      Collective c;
      c.id = plan::CollectiveId(next_collective_);
      c.kind = kind;
      for (int q = 0; q < P; ++q) c.group.push_back(RankId(q));
      if (kind == CollectiveKind::kAllToAllV) {
        c.sends.push_back({RankId((r + 1) % P), {}, bytes[static_cast<std::size_t>(r)]});
        c.recvs.push_back({RankId((r + P - 1) % P), {}, bytes[static_cast<std::size_t>((r + P - 1) % P)]});
      }
      op.data = c;
      if (!deps.empty()) op.deps = deps[static_cast<std::size_t>(r)];
      p.ops.push_back(op);
      ids.push_back(op.id);
    }
    ++next_collective_;
    return ids;
  }
  std::int64_t next_collective_ = 0;
};

// 1 s per GFLOP, 1 s per GB, no latencies: durations read off directly.
CostModel unit_model(LinkSharing sharing = LinkSharing::kSerial) {
  CostModel m = cost_model_preset("h100-nvlink-ib");
  m.compute = {0, 1e-9, 0};
  m.compute_by_kind.clear();
  for (auto& c : m.collectives) c.points = {{2, 0, 1e-9}};
  m.copy_h2d = m.copy_d2h = m.copy_d2d = {0, 1e-9};
  m.link_sharing = sharing;
  m.interference = {};
  m.all_to_all_volume = AllToAllVolume::kMaxSendRecv;
  m.all_to_all_counts_local = true;
  return m;
}

TEST(Engine, StreamOrderAndDependencies) {
  TestPlan t(1);
  const OpId a = t.compute(0, 2e9);                 // [0, 2]
  const OpId b = t.compute(0, 1e9);                 // same stream: [2, 3]
  const OpId c = t.compute(0, 1e9, {a}, 2);         // copy-stream slot, waits for a: [2, 3]... shared SMs
  (void)b;
  CostModel m = unit_model();
  m.share_compute = false;
  const auto r = simulate(t.p, m);
  EXPECT_DOUBLE_EQ(r.start_s[1], 2.0);
  EXPECT_DOUBLE_EQ(r.end_s[1], 3.0);
  EXPECT_DOUBLE_EQ(r.start_s[static_cast<std::size_t>(c.value)], 2.0);
  EXPECT_DOUBLE_EQ(r.makespan_s, 3.0);
}

TEST(Engine, ConcurrentComputeSharesTheSms) {
  // Two 1-GFLOP ops on two streams of one rank: each runs at half speed,
  // both end at 2 s.
  TestPlan t(1);
  t.compute(0, 1e9, {}, 0);
  t.compute(0, 1e9, {}, 2);
  const auto r = simulate(t.p, unit_model());
  EXPECT_DOUBLE_EQ(r.end_s[0], 2.0);
  EXPECT_DOUBLE_EQ(r.end_s[1], 2.0);
}

TEST(Engine, CollectiveStartsWhenEveryRankArrives) {
  TestPlan t(2);
  const OpId slow = t.compute(1, 3e9);
  t.compute(0, 1e9);
  const auto coll = t.collective(CollectiveKind::kAllReduce, {1'000'000'000, 1'000'000'000}, 1, {{}, {slow}});
  const auto r = simulate(t.p, unit_model());
  for (OpId o : coll) {
    EXPECT_DOUBLE_EQ(r.start_s[static_cast<std::size_t>(o.value)], 3.0);
    EXPECT_DOUBLE_EQ(r.end_s[static_cast<std::size_t>(o.value)], 4.0);
  }
}

TEST(Engine, UnevenAllToAllCostsItsBusiestRank) {
  // pro-prophet Eq. 1: rank 0 sends 3 GB, rank 1 sends 1 GB; both end when
  // the busiest rank is done: max(send, recv) = 3 GB -> 3 s.
  TestPlan t(2);
  const auto coll = t.collective(CollectiveKind::kAllToAllV, {3'000'000'000, 1'000'000'000});
  const auto r = simulate(t.p, unit_model());
  EXPECT_DOUBLE_EQ(r.end_s[static_cast<std::size_t>(coll[0].value)], 3.0);
  EXPECT_DOUBLE_EQ(r.end_s[static_cast<std::size_t>(coll[1].value)], 3.0);
}

TEST(Engine, LinkSharingRules) {
  // Two 1-GB all-reduces on two different streams of the same two ranks.
  auto build = [] {
    TestPlan t(2);
    t.collective(CollectiveKind::kAllReduce, {1'000'000'000, 1'000'000'000}, 1);
    t.collective(CollectiveKind::kAllReduce, {1'000'000'000, 1'000'000'000}, 2);
    return t;
  };
  {
    // One network resource (pipemoe): the second waits, in plan order.
    const auto r = simulate(build().p, unit_model(LinkSharing::kSerial));
    EXPECT_DOUBLE_EQ(r.end_s[0], 1.0);
    EXPECT_DOUBLE_EQ(r.start_s[2], 1.0);
    EXPECT_DOUBLE_EQ(r.end_s[2], 2.0);
  }
  {
    // Fair share: both progress at half speed and end together.
    const auto r = simulate(build().p, unit_model(LinkSharing::kFairShare));
    EXPECT_DOUBLE_EQ(r.end_s[0], 2.0);
    EXPECT_DOUBLE_EQ(r.end_s[2], 2.0);
  }
  {
    const auto r = simulate(build().p, unit_model(LinkSharing::kIndependent));
    EXPECT_DOUBLE_EQ(r.end_s[0], 1.0);
    EXPECT_DOUBLE_EQ(r.end_s[2], 1.0);
  }
}

TEST(Engine, InterferenceSlowsOverlappedWork) {
  // mpipemoe Sec. II-C: a 2-GFLOP compute op beside a 1-GB all-reduce with
  // sigma_comm = 0.5 (compute at half speed while communication runs) and
  // mu_comp = 0.8. Comm: 1 / 0.8 = 1.25 s. Compute: 1.25 s at 0.5 does
  // 0.625 GFLOP, the remaining 1.375 at full speed: ends at 2.625 s.
  TestPlan t(2);
  t.compute(0, 2e9);
  t.collective(CollectiveKind::kAllReduce, {1'000'000'000, 1'000'000'000});
  CostModel m = unit_model(LinkSharing::kIndependent);
  m.interference.sigma_comm = 0.5;
  m.interference.mu_comp = 0.8;
  const auto r = simulate(t.p, m);
  EXPECT_NEAR(r.end_s[1], 1.25, 1e-12);
  EXPECT_NEAR(r.end_s[2], 1.25, 1e-12);  // the collective ends together; rank 1 had no compute
  EXPECT_NEAR(r.end_s[0], 2.625, 1e-12);
}

TEST(Engine, MemoryPeakCountsLiveBuffers) {
  TestPlan t(1);
  auto add_buffer = [&](std::int64_t bytes, bool persistent) {
    plan::Buffer b;
    b.id = BufferId(static_cast<std::int64_t>(t.p.buffers.size()));
    b.rank = RankId(0);
    b.rows = bytes;
    b.cols = 1;
    b.elem_bytes = 1;
    b.persistent = persistent;
    t.p.buffers.push_back(b);
    return b.id;
  };
  const BufferId states = add_buffer(100, true), x = add_buffer(10, false), y = add_buffer(20, false);
  (void)states;
  const OpId a = t.compute(0, 1e9);
  const OpId b = t.compute(0, 1e9);
  const OpId c = t.compute(0, 1e9);
  t.p.ops[static_cast<std::size_t>(a.value)].alloc_before = {x};
  t.p.ops[static_cast<std::size_t>(b.value)].alloc_before = {y};
  t.p.ops[static_cast<std::size_t>(b.value)].free_after = {x};
  t.p.ops[static_cast<std::size_t>(c.value)].free_after = {y};
  const auto r = simulate(t.p, unit_model());
  EXPECT_EQ(r.memory[0].persistent_bytes, 100);
  EXPECT_EQ(r.memory[0].peak_bytes, 130);
  EXPECT_DOUBLE_EQ(r.memory[0].peak_time_s, 1.0);
  EXPECT_DOUBLE_EQ(r.alloc_s[static_cast<std::size_t>(x.value)], 0.0);
  EXPECT_DOUBLE_EQ(r.free_s[static_cast<std::size_t>(x.value)], 2.0);
  EXPECT_DOUBLE_EQ(r.free_s[static_cast<std::size_t>(y.value)], 3.0);
}

TEST(Engine, StallingPlansAreAClearError) {
  // Rank 0 issues collective A then B on its comm stream, rank 1 B then A.
  TestPlan t(2);
  auto op = [&](int rank, std::int64_t id) {
    plan::Op o;
    o.id = OpId(static_cast<std::int64_t>(t.p.ops.size()));
    o.kind = OpKind::kGradAllReduce;
    o.name = "ar" + std::to_string(id);
    o.rank = RankId(rank);
    o.stream = t.stream(rank, plan::StreamRole::kComm);
    o.bytes = 1;
    Collective c;
    c.id = plan::CollectiveId(id);
    c.kind = CollectiveKind::kAllReduce;
    c.group = {RankId(0), RankId(1)};
    o.data = c;
    t.p.ops.push_back(o);
  };
  op(0, 0);
  op(0, 1);
  op(1, 1);
  op(1, 0);
  try {
    simulate(t.p, unit_model());
    FAIL() << "expected a stall";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan stalls"), std::string::npos) << e.what();
  }
}

TEST(Engine, BadPlansAreErrorsNotCrashes) {
  TestPlan t(1);
  t.compute(0, 1);
  t.p.ops[0].deps = {OpId(5)};
  EXPECT_THROW(simulate(t.p, unit_model()), Error);
  TestPlan u(1);
  u.compute(0, 1);
  u.p.ops[0].stream = StreamId(99);
  EXPECT_THROW(simulate(u.p, unit_model()), Error);
}

// Host issue (cost_model.h): a rank's host issues its ops in plan order.
// Three 1-GFLOP (1 s) dense ops on one stream, each taking 3 s of host time
// (one launch: released at the issue's end): the host issues them at 3, 6
// and 9 s, so they run [3, 4], [6, 7], [9, 10]; without the host term
// [0, 1], [1, 2], [2, 3].
TEST(Engine, HostIssueBoundsSmallOps) {
  TestPlan t(1);
  for (int i = 0; i < 3; ++i) t.compute(0, 1e9);
  CostModel m = unit_model();
  EXPECT_DOUBLE_EQ(simulate(t.p, m).makespan_s, 3.0);
  m.host_issue[OpKind::kDenseFfn] = {3.0, 0.0};
  const auto r = simulate(t.p, m);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(r.issue_start_s[i], 3.0 * static_cast<double>(i));
    EXPECT_DOUBLE_EQ(r.issue_end_s[i], 3.0 * static_cast<double>(i + 1));
    EXPECT_DOUBLE_EQ(r.start_s[i], 3.0 * static_cast<double>(i + 1));
  }
  EXPECT_DOUBLE_EQ(r.makespan_s, 10.0);
  // A host faster than the GPU (0.5 s an op) is hidden behind it: the ops
  // start at 0.5 (the first issue), then back to back.
  m.host_issue[OpKind::kDenseFfn] = {0.5, 0.0};
  EXPECT_DOUBLE_EQ(simulate(t.p, m).makespan_s, 3.5);
  // A kind without a host term issues instantly.
  m.host_issue.clear();
  m.host_issue[OpKind::kExpertFfn] = {3.0, 0.0};
  EXPECT_DOUBLE_EQ(simulate(t.p, m).makespan_s, 3.0);
}

// An op of L GEMM launches issues them evenly over its host time, each
// followed by 1/L of its GPU work: it ends no earlier than its issue's end
// plus one part. An expert FFN backward (4 launches) of 4 s on the GPU with
// 1 s + 2 s a launch of host time (9 s): released at 9 - 3 = 6 s, it ends at
// 10 s = the issue's end + 1 s. With a GPU op of 40 s it is released when
// the issue begins (9 - 30 < 0) and ends at 40 s.
TEST(Engine, HostIssueOfSeveralLaunchesOverlapsTheirWork) {
  for (const auto& [flops, end] : {std::pair{4e9, 10.0}, std::pair{40e9, 40.0}}) {
    TestPlan t(1);
    const OpId a = t.compute(0, flops);
    t.p.ops[static_cast<std::size_t>(a.value)].kind = OpKind::kExpertFfn;
    t.p.ops[static_cast<std::size_t>(a.value)].data = plan::FfnBackward{};
    ASSERT_EQ(launches(t.p.ops[0]), 4);
    CostModel m = unit_model();
    m.compute_by_kind[OpKind::kExpertFfn] = {0, 1e-9, 0};
    m.host_issue[OpKind::kExpertFfn] = {1.0, 2.0};
    const auto r = simulate(t.p, m);
    EXPECT_DOUBLE_EQ(r.issue_end_s[0], 9.0);
    EXPECT_DOUBLE_EQ(r.end_s[0], end) << flops;
  }
}

// Each rank has a host of its own; a collective starts once every
// participant's host has issued it. Rank 0 issues a dense op (4 s of host
// time) before its all-to-all, rank 1 only the all-to-all: the all-to-all
// is released at 4 s (+ 1 s of host time each) = 5 s.
TEST(Engine, HostIssueIsPerRankAndCollectivesWaitForEveryHost) {
  TestPlan t(2);
  t.compute(0, 1e9);
  const auto a2a = t.collective(CollectiveKind::kAllToAllV, {1'000'000'000, 1'000'000'000});
  CostModel m = unit_model();
  m.host_issue[OpKind::kDenseFfn] = {4.0, 0.0};
  m.host_issue[OpKind::kDispatchAllToAll] = {1.0, 0.0};
  const auto r = simulate(t.p, m);
  EXPECT_DOUBLE_EQ(r.issue_end_s[static_cast<std::size_t>(a2a[0].value)], 5.0);
  EXPECT_DOUBLE_EQ(r.issue_end_s[static_cast<std::size_t>(a2a[1].value)], 1.0);
  EXPECT_DOUBLE_EQ(r.start_s[static_cast<std::size_t>(a2a[0].value)], 5.0);
  EXPECT_DOUBLE_EQ(r.start_s[static_cast<std::size_t>(a2a[1].value)], 5.0);
}

// An expert FFN forward of M = 4, H = 8 in 2-byte elements at 1 ns a FLOP
// and 1 ns a byte of its GEMMs' operands. By hand: 2 rows do 4 x 2 x 4 x 8
// = 256 FLOPs and move 2 x (2 x 4 x 8 weights + 2 x 2 x (4 + 8)) = 224
// bytes: 256 ns, FLOP-bound; 1 row does 128 FLOPs on 2 x (64 + 2 x 12) =
// 176 bytes: 176 ns, bound by its weights. Without the byte rate (the
// papers' Eq. 13): 128 ns.
TEST(Engine, ExpertGemmsTakeTheLongerOfTheirFlopsAndTheirBytes) {
  TestPlan t(1);
  plan::Buffer w;
  w.id = BufferId(0);
  w.rows = 2 * 4;  // [W1; W2^T]: 2M x H
  w.cols = 8;
  w.elem_bytes = 2;
  t.p.buffers.push_back(w);
  for (const std::int64_t rows : {2, 1}) {
    const OpId id = t.compute(0, 4.0 * static_cast<double>(rows) * 4 * 8);
    auto& op = t.p.ops[static_cast<std::size_t>(id.value)];
    op.kind = OpKind::kExpertFfn;
    op.data = plan::FfnForward{0, w.id, {}, {}, {}, {{0, rows}}, false};
  }
  CostModel m = unit_model();
  m.compute.gemm_seconds_per_byte = 1e-9;
  const auto r = simulate(t.p, m);
  EXPECT_NEAR(r.end_s[0] - r.start_s[0], 256e-9, 1e-15);
  EXPECT_NEAR(r.end_s[1] - r.start_s[1], 176e-9, 1e-15);
  const auto linear = simulate(t.p, unit_model());
  EXPECT_NEAR(linear.end_s[1] - linear.start_s[1], 128e-9, 1e-15);
}

// The roofline's byte rate in JSON: read, written, and dropped where an
// entry gives a FLOP rate without one (a fit of FLOPs alone must not keep
// the preset's memory side).
TEST(CostModel, GemmByteRateInJson) {
  const CostModel h100 = cost_model_preset("h100-nvlink-ib");
  EXPECT_DOUBLE_EQ(h100.compute.gemm_seconds_per_byte, 1.0 / 2.6e12);
  EXPECT_EQ(to_json(cost_model_from_json(to_json(h100))), to_json(h100));
  EXPECT_EQ(cost_model_preset("pipemoe-2080ti-ib100").compute.gemm_seconds_per_byte, 0);
  const CostModel fitted = cost_model_from_json(R"({"compute_by_kind": {"expert_ffn": {"alpha_s": 8e-6,
                                                    "seconds_per_flop": 1.4e-15}}})");
  EXPECT_EQ(fitted.compute_cost(OpKind::kExpertFfn).gemm_seconds_per_byte, 0);
  EXPECT_DOUBLE_EQ(fitted.compute_cost(OpKind::kRecompute).gemm_seconds_per_byte, 1.0 / 2.6e12);
  const CostModel both = cost_model_from_json(R"({"compute": {"flops_per_s": 5e14, "gemm_bytes_per_s": 4e12}})");
  EXPECT_DOUBLE_EQ(both.compute.gemm_seconds_per_byte, 2.5e-13);
  EXPECT_EQ(moetrace::testing::error_of<ConfigError>(
                [] { cost_model_from_json(R"({"compute": {"gemm_seconds_per_byte": -1}})"); }),
            "cost_model.compute.gemm_seconds_per_byte (-1) must be a finite number >= 0");
}

TEST(CostModel, ScalePointsInterpolateInLogP) {
  CollectiveCost c;
  c.points = {{16, 1.0, 10.0}, {64, 3.0, 30.0}};
  EXPECT_DOUBLE_EQ(c.at(8).alpha_s, 1.0);   // below: the nearest point
  EXPECT_DOUBLE_EQ(c.at(32).alpha_s, 2.0);  // log2 32 is halfway between 4 and 6
  EXPECT_DOUBLE_EQ(c.at(32).beta_s, 20.0);
  EXPECT_DOUBLE_EQ(c.at(1024).beta_s, 30.0);
}

TEST(CostModel, JsonRoundTripAndFieldNamingErrors) {
  const CostModel a = cost_model_preset("pipemoe-2080ti-ib100");
  const CostModel b = cost_model_from_json(to_json(a));
  EXPECT_EQ(to_json(a), to_json(b));
  EXPECT_DOUBLE_EQ(b.collective(CollectiveKind::kAllToAllV).at(32).alpha_s, 2.09e-4);
  const CostModel c = cost_model_from_json(R"({"base": "pipemoe-2080ti-ib100", "link_sharing": "fair_share",
                                               "compute_by_kind": {"expert_ffn": {"flops_per_s": 1e12}}})");
  EXPECT_EQ(c.link_sharing, LinkSharing::kFairShare);
  EXPECT_DOUBLE_EQ(c.compute_cost(OpKind::kExpertFfn).seconds_per_flop, 1e-12);
  EXPECT_DOUBLE_EQ(c.compute_cost(OpKind::kExpertFfn).alpha_s, 1.5e-4);
  auto message = [](const char* json) {
    return moetrace::testing::error_of<ConfigError>([&] { cost_model_from_json(json); });
  };
  EXPECT_EQ(message(R"({"compute": {"seconds_per_flop": -1}})"),
            "cost_model.compute.seconds_per_flop (-1) must be a finite number >= 0");
  EXPECT_EQ(message(R"({"interference": {"mu_cmop": 0.5}})"), "cost_model.interference.mu_cmop is not a known factor");
  EXPECT_EQ(message(R"({"link_sharing": "shared"})"),
            "link_sharing \"shared\" is not one of serial, fair_share, independent");
  EXPECT_EQ(message(R"({"base": "tpu"})").rfind("cost_model \"tpu\" is not a known preset", 0), 0u);
  // The host issue term: by op kind, round-tripped, checked.
  const CostModel h = cost_model_from_json(R"({"host_issue": {"expert_ffn": {"alpha_s": 2e-5, "per_launch_s": 1.5e-5},
                                                              "gate": {"alpha_s": 3e-5}}})");
  ASSERT_EQ(h.host_issue.size(), 2u);
  EXPECT_DOUBLE_EQ(h.host_issue.at(OpKind::kExpertFfn).at(4), 2e-5 + 4 * 1.5e-5);
  EXPECT_DOUBLE_EQ(h.host_issue.at(OpKind::kGate).per_launch_s, 0);
  EXPECT_EQ(to_json(cost_model_from_json(to_json(h))), to_json(h));
  EXPECT_EQ(to_json(a).find("host_issue"), std::string::npos);  // presets have none
  EXPECT_EQ(message(R"({"host_issue": {"expert_ffn": {"alpha_s": -1}}})"),
            "cost_model.host_issue.expert_ffn.alpha_s (-1) must be a finite number >= 0");
  EXPECT_EQ(message(R"({"host_issue": {"expert_ffn": {"per_kernel_s": 1}}})"),
            "cost_model.host_issue.expert_ffn.per_kernel_s is not a known field");
  EXPECT_EQ(message(R"({"host_issue": {"expert_fnn": {"alpha_s": 1}}})"),
            "cost_model.host_issue.expert_fnn is not an op kind");
}

// A number too large for a double (1e999) is bad JSON like any other: a
// ConfigError, not nlohmann's out_of_range escaping the reader (found by
// cost_model_fuzzer).
TEST(CostModel, NumbersBeyondDoubleAreConfigErrors) {
  auto message = [](auto&& read) { return moetrace::testing::error_of<ConfigError>(read); };
  const auto cost = message([] { cost_model_from_json(R"({"compute": {"alpha_s": 2e111112}})"); });
  EXPECT_EQ(cost.rfind("cost model is not valid JSON", 0), 0u) << cost;
  const auto spec = message([] { run_spec_from_json(R"({"iterations": 1e999})"); });
  EXPECT_NE(spec.find("the configuration is not valid JSON"), std::string::npos) << spec;
}

// ppmoe Sec. 4.1: GPT-3 Medium's 24 layers with MoE on every other FFN are
// 12 blocks of two transformer layers each, so two attentions per block; the
// count is a model key of the run configuration and survives its JSON.
TEST(RunSpecJson, AttentionPerBlock) {
  const RunSpec small = run_preset("ppmoe-small");
  EXPECT_EQ(small.common.model.num_layers, 12);
  EXPECT_EQ(small.common.model.attention_per_block, 2);
  const RunSpec s = run_spec_from_json(R"({"preset": "ppmoe-small", "model": {"attention_per_block": 3}})");
  EXPECT_EQ(s.common.model.attention_per_block, 3);
  EXPECT_EQ(run_spec_from_json(s.to_json()).common.model.attention_per_block, 3);
}

}  // namespace
}  // namespace moetrace::sim
