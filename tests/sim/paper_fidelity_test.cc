// Simulator fidelity: every row of bench/paper_bench (the papers' headline
// measurements run in the simulator, bench/fidelity) held to its expected
// outcome. kExpected lists each row by id: whether it is a hit (a point row
// within 15 % of the paper's value; a range row inside the paper's range; a
// null simulated effect against a paper effect of 5 % or more is a miss),
// whether the paper's ordering holds, and for every miss its cause in one
// line. The test fails when a hit becomes a miss and when a known miss
// becomes a hit (then move it to the hits, so the list stays current), and
// when a row is added or removed without its entry. Paper values are typed
// in from ../shared/papers in bench/fidelity/src/paper_rows.cc; none comes
// from the simulator's own output. A row whose paper value set a constant
// of the model (a calibration input) is printed and held to that status,
// never counted. BENCHMARKS.md ("Simulator fidelity against the papers")
// explains the gaps at length.
//
// Run time (2-core CI VM, RelWithDebInfo, another build running beside it):
// 63 s of CPU in all, 37 s wall at ctest -j2. One test per paper (pipemoe
// one per hardware model) so ctest runs them side by side: pipemoe about
// 15 s per model (864 layer simulations x 4 r each), pro-prophet 20 s
// (every row also at the other setting of its assumptions), mpipemoe 11 s,
// ppmoe 7 s (PPMoE at two micro-batch counts). Labelled `slow`.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "moetrace/fidelity/paper_rows.h"

namespace moetrace::fidelity {
namespace {

enum class Hit { kHit, kMiss, kNotSimulated, kCalibration };
enum class Order { kRight, kWrong, kNone };
using enum Hit;
using enum Order;

struct Outcome {
  Hit hit;
  Order order;
  const char* cause;  // why the row misses or its ordering is wrong; "" for a hit with its ordering right
};
struct Expected {
  const char* id;
  Outcome outcome;
};
// One measurement, two rows: `first` and `second` are the outcomes of the
// two ids the table below names from `row`.
struct TwoOutcomes {
  const char* row;
  Outcome first, second;
};

// ---------------------------------------------------------------------------
// Causes of the known misses (BENCHMARKS.md, "Where the gaps come from").

// ppmoe
constexpr const char* kPpmoeCalibration =
    "calibration input: Table 1's 65.5 % sets the V100 preset's all-to-all (cost_model.cc), not counted";
constexpr const char* kPpmoeAllReduce =
    "Table 3's MoE and FFN all-reduces are 3.0x and 2.2x their computation; Table 2's dense 0.3B at DP 4 x TP 8 "
    "(4174 against 5120 tokens/s/GPU at DP 32) bounds every TP all-reduce of the same model at 0.34x the FFN's "
    "forward computation (the preset gives 0.25x), so Table 3 contradicts Table 2 and every share shifts";
constexpr const char* kPpmoeGate =
    "gating is one GEMM here (1.4 %); the paper's FP32 gate adds softmax, top-1 and index kernels (7.8 %)";
constexpr const char* kPpmoeLargeBaseline =
    "not simulated: the 143B DPMoE baseline is DP 128 x TP 2 x EP 64 and the dpmoe builder has no tensor "
    "parallelism";

// pipemoe
constexpr const char* kPipemoeOverlapR1 =
    "r = 1 loses more to Algorithm 1's r than measured: the serial, interference-free overlap of the paper's Eq. "
    "9-12 grants more than the testbed had (paper_bench --sensitivity lowers it)";
constexpr const char* kPipemoeTie =
    "the fixed r and Algorithm 1's r time within 2 % under the paper's alpha/beta (per-chunk all-to-all startup)";
constexpr const char* kPipemoeRanking =
    "the ranking of the fixed r differs from Table VI's: under the paper's alpha/beta the overlap model ranks r "
    "otherwise than the testbed did";
constexpr const char* kPipemoeR2Share =
    "r = 2 is the best of {1,2,4,8} in 51 % of the valid cases under the Fig. 6 fits (63 % under solver.py's "
    "constants), not about 2/3: with Fig. 6's 17 us all-to-all startup at P = 16 larger r win more often";
constexpr const char* kPipemoeBestOverWorst =
    "2.05 just above the paper's 1.78-2.02: the Fig. 6 fits' overlap gains slightly more than measured";
constexpr const char* kPipemoeForwardOnly =
    "Algorithm 1 chooses r from the forward pass alone (Sec. IV-B) and without Tutel's padding of the capacity to "
    "a multiple of r; over forward and backward the best of {1,2,4,8} beats it in 29-44 % of the cases";
constexpr const char* kPipemoeR1 =
    "contradiction in the paper: under its own alpha/beta no r in 1..16 beats r = 1 for this layer (the all-to-all "
    "startup is paid per chunk on one link), so Algorithm 1 rightly returns r = 1 and PipeMoE, Algorithm 1 in "
    "Tutel (Sec. IV-C), runs Tutel's plan: S1 = 1. Table VII's end-to-end saving (36-209 ms an iteration) is 19-216 "
    "times the most any schedule can save on one MoE layer under those constants";
constexpr const char* kPipemoeFasterOverlap =
    "with r = 1 (or 2) PipeMoE is (nearly) Tutel, and FasterMoE's smart schedule (P/4 group exchanges, each paying "
    "4/(P-1) of the all-to-all startup) overlaps the expert computation that Tutel's single all-to-all cannot: "
    "FasterMoE comes out 1-5 % faster on TM-1, the paper has PipeMoE 5-8 % faster";
constexpr const char* kPipemoeFasterSteps =
    "FasterMoE's P/4 steps each launch every local expert's GEMMs at the paper's per-GEMM startup (solver.py "
    "1.5e-4 s, Fig. 6 6.2e-5 s), where Tutel batches them: 8-16 steps at P = 32-64 cost more than the testbed's "
    "kernels did";
constexpr const char* kPipemoeFasterRoberta =
    "FasterMoE 1.2-1.4x slower than PipeMoE on RoBERTa where the paper measured 1.7-1.8x: the paper's gap "
    "FasterMoE - PipeMoE is 423-477 ms an iteration at every P and E/P, ours grows with the P/4 steps and E/P "
    "experts (1.5-25.6 ms a layer); a cost per layer independent of both, which the paper does not measure";

// mpipemoe
constexpr const char* kMpipemoeFastMoeMemory =
    "our footprints are the MoE layer's, the paper's the whole model's (a part no strategy reduces: 14-16 % of "
    "FastMoE's footprint makes 0.267 and 0.478 into 0.23 and 0.40), and our FasterMoE's equals FastMoE's where the "
    "paper's is 1.06-1.13x it (Sec. V-D; fastermoe/schedule.py keeps each step's expert output, ctx.gobs); the "
    "two cancel against FasterMoE only";

// pro-prophet
constexpr const char* kProProphetPadding32 =
    "above the range on 32 GPUs: DeepSpeed-MoE's capacity padding (assumed) pads more with 32 experts at skew 1.2 "
    "(assumed) than the paper's DeepSpeed-MoE lost";
constexpr const char* kProProphetPaddingTopTwo =
    "just above the range at top-2: DeepSpeed-MoE's capacity padding (assumed) costs more than measured";
constexpr const char* kProProphetSmallTie =
    "Pro-Prophet beats FasterMoE by only 2.6-4.9 % on the smallest models (the ranges start at 5-14 %): the "
    "all-to-all is most of their layer, with little computation to hide the planner's transfers under";
constexpr const char* kProProphetOverFaster =
    "Pro-Prophet's gain over FasterMoE 0.4-6 % below the range at top-2: little computation to hide the planner's "
    "transfers under (as on the smallest models)";
constexpr const char* kProProphetAboveBest =
    "1.28 against 1.01-1.23: Pro-Prophet gains more over FasterMoE on MoE-GPT-L than measured; not analysed further";
constexpr const char* kProProphetHpnv =
    "Table IV's HPNV nodes (NVLink pairs) run on the HPWNV model, whose all-to-all depends on P only, and "
    "DeepSpeed-MoE's padding is assumed: the speedups over it run 0.81-1.43x the paper's";
constexpr const char* kProProphetFasterBroadcast =
    "the paper's FasterMoE broadcasts shadows to devices that do not need them (its 0.96x); ours shadows by its "
    "own model on the same load";
constexpr const char* kProProphetTopTwoLpwnv =
    "Pro-Prophet's gain at top-2 on the LPWNV nodes is smaller than measured (0.75-0.82 of it); likely the "
    "planner's Eq. 4-5 stopping early, as in Fig. 16";
constexpr const char* kProProphetPlannerEarly =
    "the planner's RB over FasterMoE's is 1.7-1.9 against up to 11.01: its cost model (Eq. 4-5, one average "
    "bandwidth for Trans and all-to-all) stops replicating earlier than the paper's did on its real distributions";

// ---------------------------------------------------------------------------
// Every row, by id. A measurement the papers give twice (pipemoe under two
// hardware models, Pro-Prophet against two baselines) is one line, its two
// outcomes side by side.

constexpr Expected kExpected[] = {
    // ppmoe
    {"ppmoe/table2/dpmoe-small/throughput", {kHit, kNone, ""}},
    {"ppmoe/table2/ppmoe-small/throughput", {kHit, kNone, ""}},
    {"ppmoe/table2/small/ppmoe-over-dpmoe", {kHit, kRight, ""}},
    {"ppmoe/table2/ppmoe-large/throughput", {kHit, kNone, ""}},
    {"ppmoe/table2/large/ppmoe-over-dpmoe", {kNotSimulated, kNone, kPpmoeLargeBaseline}},
    {"ppmoe/table3/moe-share", {kMiss, kNone, kPpmoeAllReduce}},
    {"ppmoe/table3/gate-share", {kMiss, kNone, kPpmoeGate}},
    {"ppmoe/table3/expert-share", {kMiss, kNone, kPpmoeAllReduce}},
    {"ppmoe/table3/moe-all-reduce-share", {kMiss, kNone, kPpmoeAllReduce}},
    {"ppmoe/table3/dense-ffn-share", {kMiss, kNone, kPpmoeAllReduce}},
    {"ppmoe/table3/dense-ffn-all-reduce-share", {kMiss, kNone, kPpmoeAllReduce}},
    {"ppmoe/sec4.4/moe-share", {kHit, kNone, ""}},
    {"ppmoe/sec4.4/all-to-all-share", {kCalibration, kNone, kPpmoeCalibration}},
    {"ppmoe/sec4.4/all-to-all-share-of-moe", {kHit, kNone, ""}},
    // mpipemoe
    {"mpipemoe/sec5c/pipemoe-over-fastermoe-mean", {kHit, kRight, ""}},
    {"mpipemoe/sec5c/pipemoe-over-fastermoe-max", {kHit, kRight, ""}},
    {"mpipemoe/sec5d/mpipemoe-over-fastermoe-max", {kHit, kRight, ""}},
    {"mpipemoe/sec5d/memory-vs-fastermoe-mean", {kHit, kRight, ""}},
    {"mpipemoe/sec5d/memory-vs-fastermoe-max", {kHit, kRight, ""}},
    {"mpipemoe/sec5d/memory-vs-fastmoe-mean", {kMiss, kRight, kMpipemoeFastMoeMemory}},
    {"mpipemoe/sec5d/memory-vs-fastmoe-max", {kMiss, kRight, kMpipemoeFastMoeMemory}},
    // pro-prophet
    {"pro-prophet/fig16/k1/gpt-m/rb-ratio-max", {kMiss, kRight, kProProphetPlannerEarly}},
    {"pro-prophet/fig16/k2/gpt-m/rb-ratio-max", {kMiss, kRight, kProProphetPlannerEarly}},
};

// pipemoe: "pipemoe/pipemoe-2080ti-ib100/" + row (the solver's constants),
// then "pipemoe/pipemoe-fig6/" + row (the Fig. 6 fits).
constexpr TwoOutcomes kPipemoe[] = {
    {"table6/p16/r1", {kHit, kRight, ""}, {kMiss, kRight, kPipemoeOverlapR1}},
    {"table6/p16/r2", {kHit, kWrong, kPipemoeRanking}, {kHit, kRight, ""}},
    {"table6/p16/r4", {kHit, kWrong, kPipemoeRanking}, {kHit, kWrong, kPipemoeRanking}},
    {"table6/p16/r8", {kHit, kWrong, kPipemoeRanking}, {kHit, kWrong, kPipemoeRanking}},
    {"table6/p16/best-r", {kMiss, kWrong, kPipemoeRanking}, {kMiss, kWrong, kPipemoeRanking}},
    {"table6/p32/r1", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table6/p32/r2", {kHit, kWrong, kPipemoeRanking}, {kHit, kWrong, kPipemoeRanking}},
    {"table6/p32/r4", {kMiss, kWrong, kPipemoeTie}, {kMiss, kWrong, kPipemoeTie}},
    {"table6/p32/r8", {kHit, kRight, ""}, {kHit, kWrong, kPipemoeRanking}},
    {"table6/p32/best-r", {kMiss, kWrong, kPipemoeRanking}, {kMiss, kWrong, kPipemoeRanking}},
    {"table6/p64/r1", {kHit, kWrong, kPipemoeRanking}, {kHit, kWrong, kPipemoeRanking}},
    {"table6/p64/r2", {kMiss, kRight, kPipemoeTie}, {kMiss, kRight, kPipemoeTie}},
    {"table6/p64/r4", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table6/p64/r8", {kHit, kWrong, kPipemoeRanking}, {kHit, kWrong, kPipemoeRanking}},
    {"table6/p64/best-r", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"fig4/r2-best-share", {kHit, kRight, ""}, {kMiss, kRight, kPipemoeR2Share}},
    {"fig4/best-over-worst", {kHit, kNone, ""}, {kMiss, kNone, kPipemoeBestOverWorst}},
    {"sec5c/r-at-least-best-share", {kMiss, kNone, kPipemoeForwardOnly}, {kMiss, kNone, kPipemoeForwardOnly}},
    {"sec5c/mean-speedup", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table7/p16/tm1/s1", {kMiss, kWrong, kPipemoeR1}, {kHit, kRight, ""}},
    {"table7/p16/tm1/s2", {kHit, kWrong, kPipemoeFasterOverlap}, {kMiss, kWrong, kPipemoeFasterOverlap}},
    {"table7/p16/tm2/s1", {kMiss, kWrong, kPipemoeR1}, {kHit, kRight, ""}},
    {"table7/p16/tm2/s2", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table7/p16/rm1/s1", {kMiss, kWrong, kPipemoeR1}, {kHit, kRight, ""}},
    {"table7/p16/rm1/s2", {kMiss, kRight, kPipemoeFasterRoberta}, {kMiss, kRight, kPipemoeFasterRoberta}},
    {"table7/p16/rm2/s1", {kMiss, kWrong, kPipemoeR1}, {kHit, kRight, ""}},
    {"table7/p16/rm2/s2", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table7/p32/tm1/s1", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table7/p32/tm1/s2", {kHit, kRight, ""}, {kHit, kWrong, kPipemoeFasterOverlap}},
    {"table7/p32/tm2/s1", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table7/p32/tm2/s2", {kMiss, kRight, kPipemoeFasterSteps}, {kHit, kRight, ""}},
    {"table7/p32/rm1/s1", {kMiss, kWrong, kPipemoeR1}, {kMiss, kWrong, kPipemoeR1}},
    {"table7/p32/rm1/s2", {kMiss, kRight, kPipemoeFasterSteps}, {kMiss, kRight, kPipemoeFasterRoberta}},
    {"table7/p32/rm2/s1", {kMiss, kWrong, kPipemoeR1}, {kMiss, kWrong, kPipemoeR1}},
    {"table7/p32/rm2/s2", {kMiss, kRight, kPipemoeFasterSteps}, {kMiss, kRight, kPipemoeFasterSteps}},
    {"table7/p64/tm1/s1", {kMiss, kWrong, kPipemoeR1}, {kMiss, kWrong, kPipemoeR1}},
    {"table7/p64/tm1/s2", {kMiss, kRight, kPipemoeFasterSteps}, {kHit, kRight, ""}},
    {"table7/p64/tm2/s1", {kMiss, kWrong, kPipemoeR1}, {kMiss, kWrong, kPipemoeR1}},
    {"table7/p64/tm2/s2", {kMiss, kRight, kPipemoeFasterSteps}, {kHit, kRight, ""}},
    {"table7/p64/rm1/s1", {kMiss, kWrong, kPipemoeR1}, {kMiss, kWrong, kPipemoeR1}},
    {"table7/p64/rm1/s2", {kMiss, kRight, kPipemoeFasterSteps}, {kHit, kRight, ""}},
    {"table7/p64/rm2/s1", {kMiss, kWrong, kPipemoeR1}, {kMiss, kWrong, kPipemoeR1}},
    {"table7/p64/rm2/s2", {kMiss, kRight, kPipemoeFasterSteps}, {kMiss, kRight, kPipemoeFasterSteps}},
};

// Pro-Prophet's Fig. 10: "pro-prophet/" + row + "/over-deepspeed", then
// + "/over-best".
constexpr TwoOutcomes kProProphetFig10[] = {
    {"fig10a/gpt-s", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"fig10a/gpt-m", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"fig10a/gpt-l", {kHit, kRight, ""}, {kMiss, kRight, kProProphetAboveBest}},
    {"fig10a/gpt-ds", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"fig10a/gpt-dm", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"fig10b/gpt-s", {kHit, kRight, ""}, {kMiss, kRight, kProProphetSmallTie}},
    {"fig10b/gpt-m", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"fig10b/gpt-l", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"fig10b/gpt-ds", {kHit, kRight, ""}, {kMiss, kRight, kProProphetSmallTie}},
    {"fig10b/gpt-dm", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"fig10c/gpt-s", {kMiss, kRight, kProProphetPaddingTopTwo}, {kMiss, kRight, kProProphetSmallTie}},
    {"fig10c/gpt-m", {kHit, kRight, ""}, {kMiss, kRight, kProProphetOverFaster}},
    {"fig10c/gpt-l", {kHit, kRight, ""}, {kMiss, kRight, kProProphetOverFaster}},
    {"fig10c/gpt-ds", {kMiss, kRight, kProProphetPaddingTopTwo}, {kMiss, kRight, kProProphetSmallTie}},
    {"fig10c/gpt-dm", {kHit, kRight, ""}, {kMiss, kRight, kProProphetOverFaster}},
    {"fig10d/gpt-s", {kMiss, kRight, kProProphetPadding32}, {kMiss, kRight, kProProphetSmallTie}},
    {"fig10d/gpt-m", {kMiss, kRight, kProProphetPadding32}, {kHit, kRight, ""}},
    {"fig10d/gpt-l", {kMiss, kRight, kProProphetPadding32}, {kHit, kRight, ""}},
    {"fig10d/gpt-ds", {kMiss, kRight, kProProphetPadding32}, {kMiss, kRight, kProProphetSmallTie}},
    {"fig10d/gpt-dm", {kMiss, kRight, kProProphetPadding32}, {kHit, kRight, ""}},
};

// Pro-Prophet's Tables IV and V: "pro-prophet/" + row +
// "/fastermoe-over-deepspeed", then + "/pro-prophet-over-deepspeed".
constexpr TwoOutcomes kProProphetTables[] = {
    {"table4/k1/gpt-s", {kMiss, kRight, kProProphetHpnv}, {kHit, kRight, ""}},
    {"table4/k1/gpt-m", {kMiss, kRight, kProProphetHpnv}, {kHit, kRight, ""}},
    {"table4/k1/gpt-l", {kMiss, kRight, kProProphetHpnv}, {kHit, kRight, ""}},
    {"table4/k1/gpt-ds", {kMiss, kRight, kProProphetHpnv}, {kMiss, kRight, kProProphetHpnv}},
    {"table4/k1/gpt-dm", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table4/k2/gpt-s", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table4/k2/gpt-m", {kMiss, kRight, kProProphetHpnv}, {kHit, kRight, ""}},
    {"table4/k2/gpt-l", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table4/k2/gpt-ds", {kMiss, kRight, kProProphetHpnv}, {kMiss, kRight, kProProphetHpnv}},
    {"table4/k2/gpt-dm", {kMiss, kRight, kProProphetHpnv}, {kHit, kRight, ""}},
    {"table5/k1/gpt-s", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table5/k1/gpt-m", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table5/k1/gpt-ds", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table5/k1/gpt-dm", {kMiss, kWrong, kProProphetFasterBroadcast}, {kHit, kRight, ""}},
    {"table5/k2/gpt-s", {kHit, kRight, ""}, {kMiss, kRight, kProProphetTopTwoLpwnv}},
    {"table5/k2/gpt-m", {kHit, kRight, ""}, {kMiss, kRight, kProProphetTopTwoLpwnv}},
    {"table5/k2/gpt-ds", {kHit, kRight, ""}, {kHit, kRight, ""}},
    {"table5/k2/gpt-dm", {kHit, kRight, ""}, {kHit, kRight, ""}},
};

std::string_view hit_name(Hit h) {
  return h == kHit ? "hit" : h == kMiss ? "miss" : h == kCalibration ? "calibration input" : "not simulated";
}
std::string_view order_name(Order o) { return o == kRight ? "right" : o == kWrong ? "wrong" : "none"; }

Hit hit_of(const Row& r) {
  return !r.simulated ? kNotSimulated : r.calibration ? kCalibration : r.within() ? kHit : kMiss;
}
Order order_of(const Row& r) { return !r.simulated || !r.ordering ? kNone : *r.ordering ? kRight : kWrong; }

// Every entry of the tables above, under its row's id.
std::vector<std::pair<std::string, Outcome>> all_expected() {
  std::vector<std::pair<std::string, Outcome>> all;
  for (const auto& e : kExpected) all.emplace_back(e.id, e.outcome);
  const auto add = [&](const auto& table, std::string_view first_prefix, std::string_view first_suffix,
                       std::string_view second_prefix, std::string_view second_suffix) {
    for (const TwoOutcomes& t : table) {
      all.emplace_back(std::string(first_prefix) + t.row + std::string(first_suffix), t.first);
      all.emplace_back(std::string(second_prefix) + t.row + std::string(second_suffix), t.second);
    }
  };
  add(kPipemoe, "pipemoe/pipemoe-2080ti-ib100/", "", "pipemoe/pipemoe-fig6/", "");
  add(kProProphetFig10, "pro-prophet/", "/over-deepspeed", "pro-prophet/", "/over-best");
  add(kProProphetTables, "pro-prophet/", "/fastermoe-over-deepspeed", "pro-prophet/", "/pro-prophet-over-deepspeed");
  return all;
}

// Every row whose id starts with `prefix`, against the tables above: each
// has an entry, each entry with the prefix has its row, outcomes as expected.
void expect_rows(const std::vector<Row>& rows, std::string_view prefix) {
  const auto all = all_expected();
  std::map<std::string_view, const Outcome*> expected;
  for (const auto& [id, e] : all)
    if (std::string_view(id).starts_with(prefix)) {
      EXPECT_TRUE(expected.emplace(id, &e).second) << "the tables list " << id << " twice";
      const bool needs_cause = e.hit != kHit || e.order == kWrong;
      EXPECT_EQ(needs_cause, std::string_view(e.cause).size() > 0)
          << id << ": a miss (or a wrong ordering) needs its cause, a hit none";
    }
  std::set<std::string_view> seen;
  for (const auto& r : rows) {
    ASSERT_TRUE(std::string_view(r.id).starts_with(prefix)) << r.id;
    EXPECT_TRUE(seen.insert(r.id).second) << "two rows with id " << r.id;
    const auto it = expected.find(r.id);
    if (it == expected.end()) {
      ADD_FAILURE() << "row " << r.id << " (" << hit_name(hit_of(r)) << ", ordering " << order_name(order_of(r))
                    << ") has no entry in the tables";
      continue;
    }
    const Outcome& e = *it->second;
    const std::string values = r.range() ? std::to_string(r.paper_lo) + "-" + std::to_string(r.paper_hi)
                                         : std::to_string(r.paper_lo);
    const std::string what = std::string(r.id) + ": simulated " + std::to_string(r.sim) + ", paper " + values +
                             (e.cause[0] ? std::string(" (known: ") + e.cause + ")" : std::string());
    if (e.hit == kMiss && hit_of(r) == kHit)
      ADD_FAILURE() << "a known miss is now a hit; make it a hit in its table. " << what;
    else if (e.hit == kHit && hit_of(r) != kHit)
      ADD_FAILURE() << "a hit is now a miss. " << what;
    else
      EXPECT_EQ(hit_of(r), e.hit) << what;
    if (e.order == kWrong && order_of(r) == kRight)
      ADD_FAILURE() << "a wrong ordering is now right; update its table. " << what;
    else if (e.order == kRight && order_of(r) == kWrong)
      ADD_FAILURE() << "the paper's ordering no longer holds. " << what;
    else
      EXPECT_EQ(order_of(r), e.order) << what;
  }
  for (const auto& [id, e] : expected) EXPECT_TRUE(seen.contains(id)) << "the tables list " << id << ", no row has it";
}

// The counting rules themselves, on hand-made rows.
TEST(PaperFidelityCounting, NullEffectAgainstAMeasuredEffectIsAMiss) {
  Row r;
  r.paper_lo = r.paper_hi = 1.12;  // a speedup of 12 %
  r.speedup = true;
  r.sim = 1.0;  // ratio 0.89: within 15 %, but no effect
  EXPECT_TRUE(r.null_effect());
  EXPECT_FALSE(r.within());
  r.sim = 1.03;  // an effect, within 15 %
  EXPECT_FALSE(r.null_effect());
  EXPECT_TRUE(r.within());
  r.paper_lo = r.paper_hi = 1.04;  // the paper's own effect under 5 %: no null-effect rule
  r.sim = 1.0;
  EXPECT_FALSE(r.null_effect());
  EXPECT_TRUE(r.within());
  r.speedup = false;  // a share or a count is no speedup
  r.paper_lo = r.paper_hi = 1.12;
  EXPECT_FALSE(r.null_effect());
}

TEST(PaperFidelityCounting, RangeRowsHitOnlyInsideThePapersRange) {
  Row r;
  r.paper_lo = 1.47;  // pro-prophet Sec. VI-A: 1.47-2.66x
  r.paper_hi = 2.66;
  r.speedup = true;
  r.sim = 2.0;
  EXPECT_TRUE(r.within());
  EXPECT_DOUBLE_EQ(r.ratio(), 1.0);
  r.sim = 2.70;  // within 15 % of the upper end, outside the range
  EXPECT_FALSE(r.within());
  r.sim = 1.40;
  EXPECT_FALSE(r.within());
  const Summary s = summarize({r});
  EXPECT_EQ(s.ranges, 1);
  EXPECT_EQ(s.points, 0);
}

TEST(PaperFidelityCounting, CalibrationInputsAreNotCounted) {
  Row r;
  r.paper_lo = r.paper_hi = 0.655;  // ppmoe Table 1's all-to-all share
  r.sim = 0.655;
  r.calibration = true;
  EXPECT_EQ(r.hit_text(), "calibration input");
  const Summary s = summarize({r});
  EXPECT_EQ(s.points, 0);
  EXPECT_EQ(s.points_within, 0);
  EXPECT_EQ(s.calibration, 1);
}

// The PPMoE rows rest on the micro-batch count the paper does not give
// (ppmoe Sec. 4.1's 80 % rule read as the GPU's busy share); each is also
// run at the count assumed before.
TEST(PaperFidelity, Ppmoe) {
  const auto rows = ppmoe_rows();
  expect_rows(rows, "ppmoe/");
  int assumed = 0;
  for (const auto& r : rows) {
    EXPECT_EQ(r.alternates.size(), r.assumptions.size()) << r.id;
    assumed += r.assumptions.empty() ? 0 : 1;
  }
  // PPMoE small and large throughput, PPMoE / DPMoE, Table 3's six shares.
  EXPECT_EQ(assumed, 9);
}
TEST(PaperFidelity, PipemoeSolverConstants) {
  expect_rows(pipemoe_rows("pipemoe-2080ti-ib100"), "pipemoe/pipemoe-2080ti-ib100/");
}
TEST(PaperFidelity, PipemoeFig6Fits) { expect_rows(pipemoe_rows("pipemoe-fig6"), "pipemoe/pipemoe-fig6/"); }
TEST(PaperFidelity, Mpipemoe) { expect_rows(mpipemoe_rows(), "mpipemoe/"); }

// Every Pro-Prophet row rests on assumptions about the paper's DeepSpeed-MoE
// and its load; each is labelled and also run at its other setting.
TEST(PaperFidelity, ProProphet) {
  const auto rows = pro_prophet_rows();
  expect_rows(rows, "pro-prophet/");
  for (const auto& r : rows) {
    EXPECT_FALSE(r.assumptions.empty()) << r.id;
    EXPECT_EQ(r.alternates.size(), r.assumptions.size()) << r.id;
  }
}

}  // namespace
}  // namespace moetrace::fidelity
