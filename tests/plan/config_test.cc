// Impossible configurations are refused with one line that names the field.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>

#include "moetrace/plan/builders.h"
#include "moetrace/plan/config.h"
#include "moetrace/plan/plan.h"
#include "moetrace/plan/routing.h"
#include "moetrace/schema/error.h"
#include "error_of.h"

namespace moetrace::plan {
namespace {

// The ConfigError message of f, or "" where it does not throw one.
std::string config_error(const std::function<void()>& f) { return moetrace::testing::error_of<ConfigError>(f, ""); }

CommonConfig common() {
  CommonConfig c;
  c.model.num_experts = 4;
  c.ranks = 4;
  return c;
}

// The error validating a C whose common part is common(), after `change`.
template <typename C>
std::string validation_error(const std::function<void(C&)>& change) {
  C c;
  c.common = common();
  change(c);
  return config_error([&] { c.validate(); });
}

// The error of validating a C after `change` (validation_error), to be run
// by the test.
template <typename C>
std::function<std::string()> error_after(std::function<void(C&)> change) {
  return [change = std::move(change)] { return validation_error<C>(change); };
}

// A configuration validate() refuses: a change to a valid one (common() and
// the variant's defaults), and the one line that names the field.
struct Refusal {
  const char* name;
  std::function<std::string()> error;
  const char* message;
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

const Refusal kRefusals[] = {
    {"ExpertsNotDivisibleByRanks", error_after<DpMoeConfig>([](auto& c) { c.common.model.num_experts = 6; }),
     "num_experts (6) is not divisible by ranks (4)"},
    {"PipelineDegreeBelowOne", error_after<PipeMoeConfig>([](auto& c) { c.pipeline_degree = 0; }),
     "pipeline_degree (0) must be at least 1"},
    {"TopKAboveExperts", error_after<DpMoeConfig>([](auto& c) { c.common.model.top_k = 5; }),
     "top_k (5) is greater than num_experts (4)"},
    {"TensorParallelNotDividingRanks", error_after<PpMoeConfig>([](auto& c) { c.tensor_parallel = 3; }),
     "tensor_parallel (3) does not divide ranks (4)"},
    {"LayersNotDivisibleByStages", error_after<PpMoeConfig>([](auto& c) {
       c.common.model.num_layers = 3;
       c.tensor_parallel = 2;
       c.pipeline_stages = 2;
     }),
     "num_layers (3) is not divisible by pipeline_stages (2)"},
    {"ProProphetNOutOfRange", error_after<ProProphetConfig>([](auto& c) { c.n = 4; }),
     "n (4) must be between 0 and ranks - 1 (3)"},
    {"ShadowExpertOutOfRange", error_after<FasterMoeConfig>([](auto& c) { c.shadow_experts = {9}; }),
     "shadow_experts entry (9) is not an expert index below num_experts (4)"},
};

class RefusedConfig : public ::testing::TestWithParam<Refusal> {};

TEST_P(RefusedConfig, OneLineNamesTheField) { EXPECT_EQ(GetParam().error(), GetParam().message); }

INSTANTIATE_TEST_SUITE_P(ConfigErrors, RefusedConfig, ::testing::ValuesIn(kRefusals),
                         [](const ::testing::TestParamInfo<Refusal>& i) { return std::string(i.param.name); });

TEST(ConfigErrors, MemoryBudgetBelowModelStates) {
  DpMoeConfig c;
  c.common = common();  // M 8, H 16, E 4, 1 expert per rank, 1 layer, 2-byte elements
  // Eq. 1: 4 x (E M + 2 H M) elements = 4 x (32 + 256) = 1152 elements = 2304 bytes.
  EXPECT_EQ(model_state_bytes(c.common.model, 1.0, 1), 2304);
  c.common.memory_budget_bytes = 2303;
  const std::string msg = config_error([&] { c.validate(); });
  EXPECT_EQ(msg.rfind("memory_budget_bytes (2303) is below the model states", 0), 0u) << msg;
  c.common.memory_budget_bytes = 2304;
  EXPECT_EQ(config_error([&] { c.validate(); }), "");
}

TEST(ConfigErrors, ReuseNeedsTwoPartitions) {
  EXPECT_EQ(validation_error<MPipeMoeConfig>([](MPipeMoeConfig& c) {
              c.partitions = 1;
              c.strategy = ReuseStrategy::kS2;
            }),
            "partitions (1) must be at least 2 for memory reuse strategy S2");
  EXPECT_EQ(config_error([] { parse_reuse_strategy("S5"); }), "strategy (S5) is not one of none, S1, S2, S3, S4");
  EXPECT_EQ(parse_reuse_strategy("S3"), ReuseStrategy::kS3);
}

TEST(ConfigErrors, LoadDoesNotMatchConfig) {
  DpMoeConfig c;
  c.common = common();
  c.common.model.num_layers = 2;
  SyntheticLoadConfig s{.layers = 3, .sources = 4, .experts = 4};
  const ExpertLoad load = synthetic_load(s);
  EXPECT_EQ(config_error([&] { build_dpmoe(c, load); }), "expert load has 3 layers, but num_layers is 2");
  s.layers = 2;
  s.sources = 3;
  EXPECT_EQ(config_error([&] { build_dpmoe(c, synthetic_load(s)); }), "expert load has 3 sources, but ranks is 4");
}

TEST(ConfigErrors, InconsistentLoad) {
  ExpertLoad l = ExpertLoad::zeros(1, 1, 1, 2, 1);
  l.tokens_of(0, 0) = 3;
  l.count(0, 0, 0, 0) = 2;
  l.count(0, 0, 0, 1) = 2;
  EXPECT_EQ(config_error([&] { l.validate(); }),
            "expert load counts of (iteration 0, layer 0, source 0) sum to 4, not tokens (3) x top_k (1)");
}

// Every value of the plan's named enums has a name of its own (the names are
// tables: a value missing from one would take the table's first name).
template <class E>
void expect_distinct_names(int last, std::string_view (*name)(E)) {
  std::set<std::string_view> seen;
  for (int v = 0; v <= last; ++v) EXPECT_TRUE(seen.insert(name(static_cast<E>(v))).second) << v;
}

TEST(EnumNames, EveryValueHasItsOwnName) {
  expect_distinct_names(static_cast<int>(StreamRole::kCopy), stream_role_name);
  expect_distinct_names(static_cast<int>(BufferTag::kHostOffload), buffer_tag_name);
  expect_distinct_names(static_cast<int>(ParamKind::kDense), param_kind_name);
  expect_distinct_names(static_cast<int>(CollectiveKind::kSendRecv), collective_kind_name);
  expect_distinct_names(static_cast<int>(Restore::kRecompute), restore_name);
  EXPECT_EQ(buffer_tag_name(BufferTag::kTDI), "T_DI");
  EXPECT_EQ(restore_name(Restore::kRecommunicate), "re-communicate");
}

}  // namespace
}  // namespace moetrace::plan
