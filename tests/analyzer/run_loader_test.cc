// Runs of several rank files (run_loader.h): merged as one run, ranks
// identified, a missing or damaged file left out and named, a rank of
// another run refused, clocks aligned from the collectives (clock_align.h)
// and the waiting at collectives (rank_waits.h), on hand-built rank files
// whose answers are derived by hand, and on a simulated run with synthetic
// clock offsets of +-5 ms and drifts of +-10 ppm.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/clock_align.h"
#include "moetrace/analyzer/rank_waits.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/run_loader.h"
#include "moetrace/schema/error.h"
#include "moetrace/sim/run_spec.h"
#include "moetrace/sim/simulator.h"
#include "moetrace/sim/trace_output.h"
#include "json_schema.h"
#include "text_trace.h"
#include "test_paths.h"

namespace moetrace::analyzer {
namespace {

constexpr std::int64_t kBase = 1'000'000'000;  // 1 s: times far from zero, as real clocks are
constexpr std::int64_t kSkew = 5'000'000;      // rank 1's clock runs 5 ms ahead

// One rank's file. Per (layer, iteration) a gate then a dispatch all-to-all
// that depends on it; rank 0's gate takes 100 ns, rank 1's 200 ns, both
// all-to-alls end at 300 ns (participants leave together). Rank 1's clock
// reads kSkew more. Op and stream ids are the same in both files.
std::string rank_file(int rank, int world_size, std::int64_t skew, const std::string& name) {
  std::string t = "run world_size=" + std::to_string(world_size) + " backend=test variant=dpmoe\n";
  t += "stream id=0 rank=" + std::to_string(rank) + " role=compute\n";
  t += "stream id=1 rank=" + std::to_string(rank) + " role=comm\n";
  const std::int64_t gate = rank == 0 ? 100 : 200;
  int id = 1;
  int n = 0;
  for (auto [layer, iteration] : {std::pair{0, 0}, std::pair{1, 0}, std::pair{0, 1}}) {
    const std::int64_t t0 = kBase + skew + 1000 * n++;
    const auto coords = " layer=" + std::to_string(layer) + " iteration=" + std::to_string(iteration) + " phase=fwd";
    t += "op id=" + std::to_string(id) + " rank=" + std::to_string(rank) + " stream=0 kind=gate" + coords +
         " start=" + std::to_string(t0) + " end=" + std::to_string(t0 + gate) + "\n";
    t += "op id=" + std::to_string(id + 1) + " rank=" + std::to_string(rank) + " stream=1 kind=dispatch_all_to_all" +
         coords + " start=" + std::to_string(t0 + gate) + " end=" + std::to_string(t0 + 300) + "\n";
    t += "dep op=" + std::to_string(id + 1) + " on=" + std::to_string(id) + "\n";
    id += 2;
  }
  const auto path = testing::temp_path(name);
  testing::write_text_trace(path, t);
  return path;
}

const RankClock& clock_of(const Trace& t, int rank) {
  for (const auto& c : t.files->clocks.ranks)
    if (c.rank == rank) return c;
  throw Error("no clock");
}

TEST(RunLoader, TwoRankFilesAreOneRunOnOneClock) {
  const auto r0 = rank_file(0, 2, 0, "r0.db"), r1 = rank_file(1, 2, kSkew, "r1.db");
  const Trace t = load_run({r0, r1});
  ASSERT_TRUE(t.files);
  EXPECT_EQ(t.files->files.size(), 2u);
  EXPECT_EQ(t.files->world_size, 2);
  EXPECT_TRUE(t.files->missing_ranks.empty());
  EXPECT_TRUE(t.files->left_out.empty());
  EXPECT_EQ(t.rank_ids().size(), 2u);
  EXPECT_EQ(t.ops.size(), 12u);
  EXPECT_EQ(t.streams.size(), 4u);  // ids clashed: renumbered, one per (rank, stream)
  EXPECT_EQ(t.op_deps.size(), 6u);
  // Three all-to-alls end exactly kSkew apart: offset kSkew, no drift, no spread.
  const auto& c = clock_of(t, 1);
  EXPECT_TRUE(c.estimated);
  EXPECT_EQ(c.collectives, 3);
  EXPECT_DOUBLE_EQ(c.offset_ns, static_cast<double>(kSkew));
  EXPECT_DOUBLE_EQ(c.drift_ppm, 0.0);
  EXPECT_DOUBLE_EQ(c.uncertainty_ns, 0.0);
  EXPECT_TRUE(t.files->aligned());
  for (const auto& op : t.ops)  // rank 1's times now read as rank 0's
    EXPECT_LT(op.end_ns, kBase + 3000) << op.rank.value;
  // Waits: rank 0 is ready at 100 ns, rank 1 at 200 ns: rank 0 waits
  // 100 ns at each of the 3 all-to-alls, rank 1 holds each up by 100 ns.
  const auto w = compute_rank_waits(t);
  ASSERT_TRUE(w.has_collectives);
  ASSERT_EQ(w.ranks.size(), 2u);
  EXPECT_EQ(w.ranks[0].wait_ns, 300);
  EXPECT_EQ(w.ranks[1].wait_ns, 0);
  EXPECT_EQ(w.ranks[1].last, 3);
  EXPECT_EQ(w.ranks[1].held_up_ns, 300);
  ASSERT_EQ(w.layers.size(), 2u);
  EXPECT_EQ(w.layers[0].layer, 0);
  EXPECT_EQ(w.layers[0].instances, 2);
  EXPECT_EQ(w.layers[0].wait_ns, 200);
  EXPECT_EQ(w.layers[0].holding_rank, 1);
  EXPECT_EQ(w.layers[0].holding_ns, 200);
  EXPECT_EQ(w.layers[1].holding_last, 1);
  // The report's JSON carries both under "ranks", as its schema says.
  const auto j = report_json(t, analyze(t), {});
  EXPECT_EQ(j["ranks"]["waits"]["layers"][0]["holding_rank"], 1);
  EXPECT_EQ(j["ranks"]["run"]["clock_alignment"]["ranks"][1]["offset_ns"], static_cast<double>(kSkew));
  EXPECT_EQ(testing::schema_errors(j, std::string(MOETRACE_SOURCE_DIR) + "/schemas/report.schema.json"),
            std::vector<std::string>{});
}

TEST(RunLoader, WithoutAlignmentTheSkewBecomesWaiting) {
  RunLoadOptions o;
  o.align = false;
  const Trace t = load_run({rank_file(0, 2, 0, "n0.db"), rank_file(1, 2, kSkew, "n1.db")}, o);
  EXPECT_FALSE(t.files->aligned());
  EXPECT_DOUBLE_EQ(clock_of(t, 1).offset_ns, static_cast<double>(kSkew));  // still estimated, shown
  const auto w = compute_rank_waits(t);
  EXPECT_EQ(w.ranks[0].wait_ns, 3 * (kSkew + 100));
}

TEST(RunLoader, MissingAndDamagedFilesAreNamedAndTheRestAnalysed) {
  const auto damaged = testing::temp_path("r2.db");
  std::ofstream(damaged) << "not a database at all\n";
  const auto r0 = rank_file(0, 4, 0, "m0.db"), r1 = rank_file(1, 4, 0, "m1.db");
  const Trace t = load_run({r0, "/nonexistent/m3.db", r1, damaged});
  ASSERT_EQ(t.files->left_out.size(), 2u);
  EXPECT_EQ(t.files->left_out[0].second, "/nonexistent/m3.db: no such file");
  EXPECT_EQ(t.files->left_out[1].first, damaged);
  EXPECT_EQ(t.files->missing_ranks, (std::vector<std::int32_t>{2, 3}));
  const auto warnings = t.files->warnings();
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[0], "/nonexistent/m3.db: no such file; left out, the other files are analysed");
  EXPECT_EQ(warnings[2], "ranks 2-3 of 4 missing: no file given holds them");
  EXPECT_EQ(t.rank_ids().size(), 2u);
}

TEST(RunLoader, NoReadableFileIsTheFirstFilesError) {
  try {
    load_run({"/nonexistent/a.db", "/nonexistent/b.db"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/a.db: no such file");
  }
}

TEST(RunLoader, ARankOfAnotherRunIsRefusedByName) {
  const auto r0 = rank_file(0, 2, 0, "o0.db"), r1 = rank_file(1, 2, 0, "o1.db");
  const auto other = rank_file(1, 3, 0, "other.db");
  try {
    load_run({r0, other, r1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              other + ": a rank of another run (world size 3, not 2 as in " + r0 + "); give the files of one run");
  }
}

TEST(RunLoader, ADuplicateRankLeavesTheLaterFileOut) {
  const auto r0 = rank_file(0, 2, 0, "d0.db"), again = rank_file(0, 2, 0, "d0again.db");
  const auto r1 = rank_file(1, 2, 0, "d1.db");
  const Trace t = load_run({r0, r1, again});
  EXPECT_EQ(t.files->duplicate_ranks, (std::vector<std::int32_t>{0}));
  ASSERT_EQ(t.files->left_out.size(), 1u);
  EXPECT_EQ(t.files->left_out[0].second, again + ": holds rank 0, which " + r0 + " holds too");
  EXPECT_EQ(t.ops.size(), 12u);
}

TEST(RunLoader, ExpandsDirectoriesAndPatternsInRankOrder) {
  const auto dir = testing::temp_path("ranks");
  std::filesystem::create_directories(dir);
  for (int r : {10, 2, 1}) std::ofstream(dir + "/run.rank" + std::to_string(r) + ".db") << "x";
  std::ofstream(dir + "/notes.txt") << "x";
  const std::vector<std::string> want{dir + "/run.rank1.db", dir + "/run.rank2.db", dir + "/run.rank10.db"};
  EXPECT_EQ(expand_trace_paths({dir}), want);
  EXPECT_EQ(expand_trace_paths({dir + "/run.rank*.db"}), want);
  EXPECT_THROW(expand_trace_paths({dir + "/none*.db"}), Error);
}

// The simulator's collectives end together on every rank. Skew each rank's
// clock by an offset of +-5 ms and a drift of +-10 ppm (rank 0, the
// reference, keeps its own); the alignment must put every op back within
// 5 us of its simulated time.
TEST(ClockAlign, RecoversOffsetsAndDriftsOfASimulatedRun) {
  sim::RunSpec spec = sim::run_preset("dpmoe");
  spec.common.ranks = 8;
  spec.common.iterations = 4;
  const auto model = spec.resolved_cost_model();
  const auto plan = sim::build_plan(spec);
  const auto path = testing::temp_path("skew_sim.db");
  sim::write_trace(path, plan, model, sim::simulate(plan, model));
  const Trace truth = load_trace(path);
  Trace t = load_trace(path);
  const std::int64_t origin = t.ops.front().start_ns;
  auto skew = [&](RankId rank, std::int64_t& v) {
    const double sign = rank.value % 2 == 1 ? 1 : -1, offset = rank.value == 0 ? 0 : sign * 5e6;
    const double drift = rank.value == 0 ? 0 : (rank.value % 4 < 2 ? 1 : -1) * 10e-6;
    v += kBase + std::llround(offset + drift * static_cast<double>(v - origin));
  };
  for (auto& op : t.ops) skew(op.rank, op.start_ns), skew(op.rank, op.end_ns);
  for (auto& a : t.activities) skew(a.rank, a.start_ns), skew(a.rank, a.end_ns);
  auto a = estimate_clock_alignment(t);
  ASSERT_EQ(a.ranks.size(), 8u);
  for (const auto& c : a.ranks) {
    EXPECT_TRUE(c.usable()) << c.rank;
    if (c.rank == 0) continue;
    EXPECT_NEAR(c.drift_ppm, (c.rank % 4 < 2 ? 1 : -1) * 10.0, 0.5) << c.rank;
  }
  apply_clock_alignment(t, a);
  ASSERT_EQ(t.ops.size(), truth.ops.size());
  std::int64_t worst = 0;
  for (std::size_t i = 0; i < t.ops.size(); ++i) {
    worst = std::max(worst, std::abs(t.ops[i].start_ns - kBase - truth.ops[i].start_ns));
    worst = std::max(worst, std::abs(t.ops[i].end_ns - kBase - truth.ops[i].end_ns));
  }
  EXPECT_LE(worst, 5000) << "ns";
}

// Collectives described as Kineto records them (one NCCL kernel and its
// collectives row per call), on clocks with known offsets; golden values come
// from the construction. Each call: its rank, true end, duration, name, group
// (process group name and ranks), element count and sequence number (-1: the
// trace lacks it).
struct Call {
  int rank = 0;
  std::int64_t end = 0, dur = 20'000;
  std::string name = "all_reduce", pg = "0", ranks = "[0,1]";
  std::int64_t nelems = 1024, seq = -1;
};

// A deterministic jitter in [-amp, amp].
std::int64_t jitter(std::uint64_t k, std::int64_t amp) {
  k = (k + 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL;
  k ^= k >> 31;
  return static_cast<std::int64_t>(k % static_cast<std::uint64_t>(2 * amp + 1)) - amp;
}

// The trace of `calls`, each rank's times on its clock (true time + offsets[rank]).
Trace collective_trace(const std::vector<Call>& calls, const std::vector<std::int64_t>& offsets) {
  std::string text = fmt::format("run world_size={} backend=test\n", offsets.size());
  for (std::size_t r = 0; r < offsets.size(); ++r) text += fmt::format("stream id={0} rank={0} role=comm\n", r);
  int corr = 0;
  for (const auto& c : calls) {
    const std::int64_t end = kBase + c.end + offsets[static_cast<std::size_t>(c.rank)], start = end - c.dur;
    ++corr;
    text += fmt::format("kernel rank={0} stream={0} start={1} end={2} name=ncclDevKernel_{3} corr={4}\n", c.rank,
                        start, end, c.name, corr);
    text += fmt::format(
        "collective rank={} start={} end={} corr={} name={} process_group={} group_ranks={} in_nelems={}{}\n", c.rank,
        start, end, corr, c.name, c.pg, c.ranks, c.nelems, c.seq >= 0 ? fmt::format(" seq={}", c.seq) : "");
  }
  const auto path = testing::temp_path("collectives.db");
  testing::write_text_trace(path, text);
  return load_trace(path);  // the sequence numbers as Kineto's "Seq" import writes them
}

const RankClock& clock_of_rank(const ClockAlignment& a, int rank) {
  return *std::find_if(a.ranks.begin(), a.ranks.end(), [&](const RankClock& c) { return c.rank == rank; });
}

// Irregular gaps (30 ms +- up to 10 ms): no period that a pairing one off
// would fit.
std::int64_t irregular_end(int k) {
  return 10'000'000 + k * 30'000'000LL + jitter(977 * static_cast<std::uint64_t>(k), 5'000'000);
}

// NCCL all-reduces end within microseconds of each other, not together:
// end jitter of +-30 us on both ranks; 40 calls paired by sequence number.
TEST(ClockPairing, EndJitter) {
  std::vector<Call> calls;
  for (int k = 0; k < 40; ++k)
    for (int r : {0, 1})
      calls.push_back({.rank = r, .end = irregular_end(k) + jitter(2 * k + r, 30'000), .seq = k});
  const Trace t = collective_trace(calls, {0, 3'700'000});
  const auto a = estimate_clock_alignment(t);
  const auto& c = clock_of_rank(a, 1);
  EXPECT_TRUE(c.usable()) << c.refused;
  EXPECT_EQ(c.pairing, "sequence");
  EXPECT_NEAR(c.offset_ns, 3'700'000, 15'000);  // 40 differences of RMS ~24 us: ~4 us standard error
  EXPECT_GT(c.spread_ns, 5'000);
  EXPECT_LT(c.spread_ns, 60'000);
}

// An uneven all-to-allv: the rank with less to receive leaves up to 200 us
// early (which rank varies per call), between all-reduces that end together.
// The element counts differ per rank, so only the sequence number pairs them.
TEST(ClockPairing, PerRankEndBiasOfUnevenAllToAllv) {
  std::vector<Call> calls;
  for (int k = 0; k < 30; ++k) {
    const std::int64_t bias = 50'000 + (jitter(k, 75'000) + 75'000);  // 50-200 us
    const int early = k % 3 == 0 ? 1 : 0;  // rank 0 leaves early twice as often as rank 1
    for (int r : {0, 1})
      calls.push_back({.rank = r, .end = irregular_end(k) - (r == early ? bias : 0), .name = "all_to_allv",
                       .nelems = 1000 + 100 * r + k, .seq = 2 * k});
    for (int r : {0, 1}) calls.push_back({.rank = r, .end = irregular_end(k) + 5'000'000, .seq = 2 * k + 1});
  }
  const Trace t = collective_trace(calls, {0, -2'500'000});
  const auto a = estimate_clock_alignment(t);
  const auto& c = clock_of_rank(a, 1);
  EXPECT_TRUE(c.usable()) << c.refused;
  // The all-reduces (half the calls) agree exactly; the biased calls are
  // rejected or pull the fit by at most their mean bias (~125 us / 2).
  EXPECT_NEAR(c.offset_ns, -2'500'000, 70'000);
}

// Sub-groups {0,1} and {2,3} run all-reduces of the same name and size at
// their own times, the world group a few at irregular times: ranks 2 and 3
// share only the world's calls with rank 0 and are aligned by those alone.
TEST(ClockPairing, SubGroupCollectives) {
  std::vector<Call> calls;
  for (int k = 0; k < 20; ++k) {
    for (int r : {0, 1}) calls.push_back({.rank = r, .end = irregular_end(k), .pg = "1", .ranks = "[0,1]"});
    for (int r : {2, 3})
      calls.push_back({.rank = r, .end = irregular_end(k) + 7'000'000, .pg = "2", .ranks = "[2,3]"});
    if (k % 4 == 1)
      for (int r : {0, 1, 2, 3})
        calls.push_back({.rank = r, .end = irregular_end(k) + 12'000'000, .pg = "0", .ranks = "[0,1,2,3]"});
  }
  const std::vector<std::int64_t> offsets{0, 1'000'000, -2'000'000, 500'000};
  const Trace t = collective_trace(calls, offsets);
  const auto a = estimate_clock_alignment(t);
  for (int r : {1, 2, 3}) {
    const auto& c = clock_of_rank(a, r);
    EXPECT_TRUE(c.usable()) << r << ": " << c.refused;
    EXPECT_NEAR(c.offset_ns, offsets[static_cast<std::size_t>(r)], 1'000) << r;
    EXPECT_EQ(c.collectives, r == 1 ? 25 : 5) << r;
  }
}

// Rank 1 lacks call 7 of 20. Paired by sequence number, nothing is lost but
// that call; paired by order, the calls after it pair one off and must not
// yield a confidently wrong offset.
TEST(ClockPairing, CollectiveMissingOnOneRank) {
  for (bool with_seq : {true, false}) {
    std::vector<Call> calls;
    for (int k = 0; k < 20; ++k)
      for (int r : {0, 1})
        if (r == 0 || k != 7)
          calls.push_back({.rank = r, .end = irregular_end(k) + jitter(3 * k + r, 5'000), .seq = with_seq ? k : -1});
    const Trace t = collective_trace(calls, {0, 800'000});
    const auto a = estimate_clock_alignment(t);
    const auto& c = clock_of_rank(a, 1);
    if (with_seq) {
      EXPECT_TRUE(c.usable()) << c.refused;
      EXPECT_EQ(c.collectives, 19);
      EXPECT_NEAR(c.offset_ns, 800'000, 5'000);
    } else {
      EXPECT_TRUE(!c.usable() || std::abs(c.offset_ns - 800'000) < 10'000) << c.offset_ns;
      EXPECT_FALSE(c.usable()) << "7 of 19 pairs agree: " << c.offset_ns;
    }
  }
}

// Periodic all-reduces (every 50 ms exactly, +-10 us jitter); rank 1's
// profile starts one period later, so its first call is rank 0's second.
// Paired by order, every pair is one off and agrees (offset + 50 ms, small
// spread): the pairing one earlier fits as well, so the offset is refused.
// With sequence numbers the pairs are right.
TEST(ClockPairing, OffByOnePairingOfPeriodicCollectives) {
  for (bool with_seq : {false, true}) {
    std::vector<Call> calls;
    for (int k = 0; k < 20; ++k)
      for (int r : {0, 1})
        if (r == 0 || k > 0)
          calls.push_back({.rank = r, .end = 10'000'000 + k * 50'000'000LL + jitter(5 * k + r, 10'000),
                           .seq = with_seq ? 100 + k : -1});
    const Trace t = collective_trace(calls, {0, 1'200'000});
    const auto a = estimate_clock_alignment(t);
    const auto& c = clock_of_rank(a, 1);
    if (with_seq) {
      EXPECT_TRUE(c.usable()) << c.refused;
      EXPECT_NEAR(c.offset_ns, 1'200'000, 10'000);
    } else {
      EXPECT_FALSE(c.usable()) << c.offset_ns;
      EXPECT_NE(c.refused.find("ambiguous"), std::string::npos) << c.refused;
    }
  }
}

// HTA's two sampled ranks (tests/data README: hta-sampled_rank-{0,1}.json.gz
// of ../shared/data): the end times of their NCCL collectives as the
// PyTorch profiler recorded them (us since 1682725898 s), without process
// group or sequence, so paired by (name, size, order). 7 pair; 4 of them end
// within a few hundred us on both ranks (-55, +332, -189, +8 us), 3 lie
// 600 ms apart. Mean of the 4: +24 us; their standard deviation 221.156 us,
// so the mean's standard error is 221.156 / sqrt(4) = 110.578 us. An offset
// smaller than its own uncertainty is not applied, and the reason says so.
TEST(ClockAlign, AnOffsetSmallerThanItsUncertaintyIsNotApplied) {
  struct End {
    int rank;
    std::int64_t end_us;
    const char* name;
    std::int64_t nelems;
  };
  const End ends[] = {
      {0, 125046, "all_to_all", 384},         {0, 187835, "all_to_all", 419430400},
      {0, 307389, "all_reduce", 19618307},    {0, 396148, "all_reduce", 26955536},
      {0, 627817, "_all_gather_base", 16777216}, {0, 808923, "all_to_all", 419430400},
      {0, 875808, "all_to_all", 2846720},     {0, 1143185, "all_reduce", 26258430},
      {0, 1182485, "all_reduce", 5716654},    {0, 1249534, "_all_gather_base", 16777216},
      {1, 187835, "all_to_all", 339738624},   {1, 275717, "all_to_all", 2846720},
      {1, 307334, "all_reduce", 19618307},    {1, 530301, "all_reduce", 26258430},
      {1, 628149, "_all_gather_base", 16777216}, {1, 741081, "all_to_all", 384},
      {1, 904616, "all_reduce", 19618307},    {1, 1129316, "all_to_all", 394073856},
      {1, 1182493, "all_reduce", 5716654},    {1, 1249345, "_all_gather_base", 16777216},
  };
  std::vector<Call> calls;
  for (const auto& e : ends)
    calls.push_back({.rank = e.rank, .end = e.end_us * 1000, .dur = 1000, .name = e.name, .pg = "", .ranks = "",
                     .nelems = e.nelems});
  Trace t = collective_trace(calls, {0, 0});
  auto a = estimate_clock_alignment(t);
  const auto& c = clock_of_rank(a, 1);
  EXPECT_TRUE(c.estimated);
  EXPECT_EQ(c.pairing, "order");
  EXPECT_EQ(c.collectives, 4);
  EXPECT_EQ(c.rejected, 3);
  EXPECT_DOUBLE_EQ(c.offset_ns, 24'000.0);
  EXPECT_NEAR(c.spread_ns, 221'156, 1);
  EXPECT_NEAR(c.uncertainty_ns, 110'578, 1);
  EXPECT_FALSE(c.usable());
  EXPECT_EQ(c.refused,
            "the offset found, +24.000 us, is smaller than its uncertainty (110.578 us, from 4 collectives): the "
            "clocks agree as far as the collectives tell, so nothing is corrected");
  const auto before = t.activities;
  apply_clock_alignment(t, a);
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_EQ(t.activities[i].end_ns, before[i].end_ns);
}

// Two collectives that agree exactly are still too few: one straggler
// between them could not be told from an offset.
TEST(ClockAlign, TwoCollectivesAreTooFewToCorrectAClock) {
  std::vector<Call> calls;
  for (int k = 0; k < 2; ++k)
    for (int r : {0, 1}) calls.push_back({.rank = r, .end = irregular_end(k), .seq = k});
  const auto a = estimate_clock_alignment(collective_trace(calls, {0, 3'000'000}));
  const auto& c = clock_of_rank(a, 1);
  EXPECT_EQ(c.collectives, 2);
  EXPECT_DOUBLE_EQ(c.offset_ns, 3'000'000.0);
  EXPECT_FALSE(c.usable());
  EXPECT_EQ(c.refused, "only 2 shared collectives agree on a clock offset, fewer than the 3 a correction needs");
}

// Ranks without any collective: each rank but the reference is named as
// not aligned; the reference is never in its own warning.
TEST(ClockAlign, TheReferenceRankIsNotInItsOwnWarning) {
  std::vector<std::string> paths;
  for (int r = 0; r < 3; ++r) {
    std::string one = "run world_size=3 backend=test\n";
    one += fmt::format("stream id={0} rank={0} role=compute\nkernel rank={0} stream={0} start={1} end={2} name=gemm\n",
                       r, kBase, kBase + 100);
    paths.push_back(testing::temp_path(fmt::format("lone{}.db", r)));
    testing::write_text_trace(paths.back(), one);
  }
  const Trace t = load_run(paths);
  const auto w = t.files->warnings();
  EXPECT_NE(std::find(w.begin(), w.end(), "ranks 1-2: no collective shared with rank 0; clock not aligned"), w.end())
      << fmt::format("{}", fmt::join(w, "\n"));
  for (const auto& line : w) EXPECT_EQ(line.find("ranks 0"), std::string::npos) << line;
}

}  // namespace
}  // namespace moetrace::analyzer
