// The executor's CPU-side schedule on the plans of every variant: issue
// order (rules 3 and 4 of plan.h), cross-stream waits (every dependency is
// implied by stream order, waits and collective barriers), pinned-host arena.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "moetrace/cuda/schedule.h"
#include "moetrace/plan/cpu_executor.h"
#include "moetrace/plan/reference.h"
#include "moetrace/plan/routing.h"
#include "moetrace/schema/error.h"
#include "variant_plans.h"

namespace moetrace::cuda {
namespace {

plan::ModelShape small_shape() {
  return {.num_layers = 2, .num_experts = 8, .top_k = 2, .model_dim = 8, .expert_hidden = 16, .dense_hidden = 12,
          .attention = true};
}

std::vector<testing::NamedPlan> plans(int ranks = 4, int iterations = 2) {
  plan::SyntheticLoadConfig lc{.iterations = iterations, .layers = 2, .sources = ranks, .experts = 8, .top_k = 2,
                               .tokens_per_source = 24, .pattern = plan::LoadPattern::kZipf, .zipf_skew = 1.2,
                               .source_noise = 0.3, .seed = 7};
  return testing::variant_plans(small_shape(), ranks, iterations, plan::synthetic_load(lc));
}

RankFilter all_ranks() {
  return [](RankId) { return true; };
}

std::size_t at(OpId id) { return static_cast<std::size_t>(id.value); }

TEST(IssueOrder, EveryOpOnceInStreamOrderAfterItsDeps) {
  for (const auto& [name, p] : plans()) {
    SCOPED_TRACE(name);
    const auto order = issue_order(p, all_ranks());
    std::vector<int> seen(p.ops.size(), 0);
    std::map<std::int32_t, std::int64_t> last_on_stream;
    for (const IssueStep& step : order) {
      ASSERT_FALSE(step.ops.empty());
      for (OpId x : step.ops) {
        const plan::Op& op = p.op(x);
        for (OpId d : op.deps) EXPECT_EQ(seen[at(d)], 1) << op.name << " before its dep " << p.op(d).name;
        auto it = last_on_stream.find(op.stream.value);
        if (it != last_on_stream.end()) {
          EXPECT_LT(it->second, x.value) << op.name;
        }
        last_on_stream[op.stream.value] = x.value;
      }
      for (OpId x : step.ops) ++seen[at(x)];
      if (step.collective) {
        const auto* c = p.op(step.ops.front()).collective();
        ASSERT_NE(c, nullptr);
        EXPECT_EQ(step.ops.size(), c->group.size());
        for (OpId x : step.ops) EXPECT_EQ(p.op(x).collective()->id, c->id);
      } else {
        EXPECT_EQ(step.ops.size(), 1u);
      }
    }
    for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << p.ops[i].name;
  }
}

TEST(IssueOrder, OrderedCollectivesGoOutInPlanOrderOnEveryRank) {
  for (const auto& [name, p] : plans()) {
    SCOPED_TRACE(name);
    for (int r = -1; r < 4; ++r) {  // -1: all ranks (emulated)
      const auto order = issue_order(p, [r](RankId x) { return r < 0 || x.value == r; }, true);
      std::int64_t last = -1;
      for (const IssueStep& step : order) {
        if (!step.collective) continue;
        std::int64_t first = INT64_MAX;
        for (OpId x : step.ops) first = std::min(first, x.value);
        EXPECT_GT(first, last) << p.op(step.ops.front()).name;
        last = first;
      }
    }
  }
}

TEST(IssueOrder, OneRankIssuesOnlyItsOps) {
  const auto all = plans();
  const plan::Plan& p = all.front().plan;
  const auto order = issue_order(p, [](RankId r) { return r.value == 1; });
  std::size_t n = 0;
  for (const IssueStep& step : order) {
    ASSERT_EQ(step.ops.size(), 1u);
    EXPECT_EQ(p.op(step.ops[0]).rank.value, 1);
    ++n;
  }
  EXPECT_EQ(n, static_cast<std::size_t>(std::count_if(p.ops.begin(), p.ops.end(),
                                                      [](const plan::Op& o) { return o.rank.value == 1; })));
}

// Happens-before closure of what the executor enqueues: stream order, the
// planned waits and (emulated communicator) the barriers around collectives.
std::vector<std::vector<bool>> happens_before(const plan::Plan& p, const std::vector<IssueStep>& order,
                                              const WaitPlan& w, bool barriers) {
  const std::size_t n = p.ops.size();
  std::vector<std::vector<bool>> anc(n, std::vector<bool>(n, false));
  std::map<std::int32_t, std::int64_t> prev;  // stream -> last op
  auto merge = [&](std::size_t into, std::size_t from) {
    anc[into][from] = true;
    for (std::size_t i = 0; i < n; ++i)
      if (anc[from][i]) anc[into][i] = true;
  };
  for (const IssueStep& step : order) {
    for (OpId x : step.ops) {
      const plan::Op& op = p.op(x);
      auto it = prev.find(op.stream.value);
      if (it != prev.end()) merge(at(x), static_cast<std::size_t>(it->second));
      for (OpId d : w.waits[at(x)]) merge(at(x), at(d));
    }
    if (step.collective && barriers) {
      // Start barrier: each participant starts after what every other one
      // had before it; end barrier: the participants finish together.
      std::vector<bool> all(n, false);
      for (OpId x : step.ops)
        for (std::size_t i = 0; i < n; ++i)
          if (anc[at(x)][i]) all[i] = true;
      for (OpId x : step.ops) {
        for (std::size_t i = 0; i < n; ++i)
          if (all[i]) anc[at(x)][i] = true;
        for (OpId y : step.ops) anc[at(x)][at(y)] = anc[at(x)][at(y)] || x != y;
      }
    }
    for (OpId x : step.ops) prev[p.op(x).stream.value] = x.value;
  }
  return anc;
}

TEST(PlanWaits, EveryDependencyIsImplied) {
  for (const auto& [name, p] : plans(4, 1)) {
    SCOPED_TRACE(name);
    const auto order = issue_order(p, all_ranks());
    const WaitPlan w = plan_waits(p, order, true);
    const auto anc = happens_before(p, order, w, true);
    std::int64_t cross = 0;
    for (const plan::Op& op : p.ops)
      for (OpId d : op.deps) {
        EXPECT_TRUE(anc[at(op.id)][at(d)]) << op.name << " does not wait for " << p.op(d).name;
        if (p.op(d).stream != op.stream) ++cross;
      }
    EXPECT_LE(w.total_waits, cross);
    for (std::size_t i = 0; i < p.ops.size(); ++i)
      for (OpId d : w.waits[i]) {
        EXPECT_TRUE(w.needs_event[at(d)]);
        EXPECT_NE(p.op(d).stream, p.ops[i].stream);
      }
  }
}

TEST(PlanWaits, WithoutBarriersEachRankStillCoversItsDeps) {
  for (const auto& [name, p] : plans(4, 1)) {
    SCOPED_TRACE(name);
    for (int r = 0; r < 4; ++r) {
      const auto order = issue_order(p, [r](RankId x) { return x.value == r; });
      const WaitPlan w = plan_waits(p, order, false);
      const auto anc = happens_before(p, order, w, false);
      for (const IssueStep& step : order)
        for (OpId x : step.ops)
          for (OpId d : p.op(x).deps)
            if (p.op(d).rank.value == r) {
              EXPECT_TRUE(anc[at(x)][at(d)]) << p.op(x).name;
            }
    }
  }
}

plan::Plan two_stream_plan() {
  plan::Plan p;
  p.world_size = 2;
  for (int s = 0; s < 2; ++s) {
    plan::Stream st;
    st.id = StreamId(s);
    st.rank = RankId(s);
    st.role = plan::StreamRole::kComm;
    st.name = "rank" + std::to_string(s) + ".comm";
    p.streams.push_back(st);
  }
  return p;
}

plan::Op collective_op(std::int64_t id, int rank, std::int64_t collective) {
  plan::Op op;
  op.id = OpId(id);
  op.rank = RankId(rank);
  op.stream = StreamId(rank);
  op.name = "op" + std::to_string(id);
  plan::Collective c;
  c.id = plan::CollectiveId(collective);
  c.kind = plan::CollectiveKind::kAllReduce;
  c.group = {RankId(0), RankId(1)};
  op.data = c;
  return op;
}

TEST(IssueOrder, CollectivesInDifferentOrdersAreAnError) {
  plan::Plan p = two_stream_plan();
  p.ops = {collective_op(0, 0, 1), collective_op(1, 0, 2), collective_op(2, 1, 2), collective_op(3, 1, 1)};
  try {
    issue_order(p, all_ranks());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be issued"), std::string::npos) << e.what();
  }
}

TEST(IssueOrder, CrossStreamCycleIsAnError) {
  plan::Plan p = two_stream_plan();
  plan::Op a;
  a.id = OpId(0);
  a.rank = RankId(0);
  a.stream = StreamId(0);
  a.deps = {OpId(1)};
  plan::Op b;
  b.id = OpId(1);
  b.rank = RankId(1);
  b.stream = StreamId(1);
  b.deps = {OpId(0)};
  p.ops = {a, b};
  EXPECT_THROW(issue_order(p, all_ranks()), Error);
}

TEST(HostArena, OffloadBuffersGetDisjointLiveRegionsAndReuseWaits) {
  for (const auto& [name, p] : plans()) {
    if (name.find("S1") == std::string::npos && name.find("S3") == std::string::npos) continue;
    SCOPED_TRACE(name);
    const auto order = issue_order(p, all_ranks());
    auto bytes = [](const plan::Buffer& b) { return b.bytes(); };
    const HostArenaPlan a = plan_host_arena(p, order, all_ranks(), bytes);
    std::int64_t sum = 0, pinned = 0;
    for (const auto& b : p.buffers)
      if (b.memory == schema::MemoryKind::kPinnedHost) {
        ++pinned;
        sum += (b.bytes() + 255) / 256 * 256;
        EXPECT_GE(a.offset[static_cast<std::size_t>(b.id.value)], 0) << b.name;
      }
    ASSERT_GT(pinned, 0);
    EXPECT_LE(a.bytes, sum);
    EXPECT_GT(a.bytes, 0);
    // Replay: live regions never overlap; a reused region waits for its last user.
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> live;  // buffer -> [begin, end)
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> freed;
    bool some_reuse = false;
    for (const IssueStep& step : order) {
      for (OpId x : step.ops)
        for (BufferId id : p.op(x).alloc_before) {
          const auto& b = p.buffer(id);
          if (b.memory != schema::MemoryKind::kPinnedHost) continue;
          const std::int64_t o = a.offset[static_cast<std::size_t>(id.value)];
          const std::int64_t e = o + b.bytes();
          for (const auto& [other, r] : live) EXPECT_TRUE(e <= r.first || o >= r.second) << b.name;
          for (const auto& [other, r] : freed)
            if (!(e <= r.first || o >= r.second)) {
              some_reuse = true;
              // Either it waits for `other` directly, or for a later user of that region.
              EXPECT_FALSE(a.reuse_waits[static_cast<std::size_t>(id.value)].empty()) << b.name;
            }
          live[id.value] = {o, e};
        }
      for (OpId x : step.ops)
        for (BufferId id : p.op(x).free_after) {
          auto it = live.find(id.value);
          if (it == live.end()) continue;
          freed[id.value] = it->second;
          live.erase(it);
        }
    }
    EXPECT_TRUE(some_reuse) << "an iteration's offload regions should be reused by the next";
  }
}

TEST(MemPoolPolicy, NoReuseMakesAStreamWaitOnItsOwn) {
  // Every dependency between the ranks' streams is a wait the executor
  // issued from the plan (and so in the trace); the pool adds none.
  const MemPoolPolicy p = mem_pool_policy();
  EXPECT_FALSE(p.allow_internal_dependencies);
  EXPECT_TRUE(p.follow_event_dependencies);  // reuse behind the executor's own waits
  EXPECT_TRUE(p.allow_opportunistic);        // reuse of a completed free waits for nothing
  EXPECT_TRUE(p.keep_freed_blocks);
}

// The plans the GPU tests run (gpu_executor_test: every variant at P = 1 for
// NCCL and P = 2, 4, 8 emulated, rows of 6 and 10 elements at P = 2, on the
// reference's own routing) are valid at every one of those sizes: the CPU
// executor reproduces the float64 reference with them, and each has an issue
// order. A GPU-only failure then lies in the CUDA executor, not in the plan.
TEST(GpuTestPlans, MatchTheReferenceOnTheCpuAtEveryWorldSize) {
  const std::int64_t tokens[] = {21, 9, 14, 17, 11, 19, 6, 15};
  struct Size {
    int ranks;
    std::int64_t model_dim, expert_hidden;
  };
  // (6, 10): RowsNotOfSixteenBytesTakeTheElementWisePath.
  for (const Size z : {Size{1, 16, 24}, Size{2, 16, 24}, Size{4, 16, 24}, Size{8, 16, 24}, Size{2, 6, 10}}) {
    const int ranks = z.ranks;
    const plan::ModelShape s{.num_layers = 2, .num_experts = ranks == 1 ? 4 : 8, .top_k = 2,
                             .model_dim = z.model_dim, .expert_hidden = z.expert_hidden, .dense_hidden = 12,
                             .attention = true, .learning_rate = 0.05};
    const plan::ModelWeights w = plan::random_weights(s, 5);
    const plan::TrainingData d =
        plan::random_training_data(s, 2, {std::begin(tokens), std::begin(tokens) + ranks}, 6);
    const plan::ReferenceResult ref = plan::reference_train(s, w, d);
    const auto named = testing::variant_plans(s, ranks, 2, ref.load);
    EXPECT_EQ(named.size(), ranks % 4 == 0 ? 11u : 10u);  // ppmoe needs a multiple of 4
    for (const auto& [name, p] : named) {
      SCOPED_TRACE(name + " P=" + std::to_string(ranks));
      EXPECT_NO_THROW(issue_order(p, all_ranks()));
      const plan::CpuExecutionResult r = plan::execute_on_cpu(p, w, d);
      std::set<std::size_t> covered;
      for (const auto& t : r.outputs) {
        const auto i = static_cast<std::size_t>(t.iteration * d.blocks + t.block);
        EXPECT_LE(plan::relative_error(t.value, ref.outputs[i]), 1e-12);
        covered.insert(i);
      }
      EXPECT_EQ(covered.size(), ref.outputs.size());
      for (const auto& t : r.input_grads) {
        const auto i = static_cast<std::size_t>(t.iteration * d.blocks + t.block);
        EXPECT_LE(plan::relative_error(t.value, ref.input_grads[i]), 1e-12);
      }
      for (const auto& cp : r.final_params)
        EXPECT_LE(plan::relative_error(cp.value, plan::param_slice(ref.final_weights, cp.slice)), 1e-12);
    }
  }
}

}  // namespace
}  // namespace moetrace::cuda
