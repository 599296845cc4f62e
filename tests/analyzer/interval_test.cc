#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include "moetrace/analyzer/interval.h"

namespace moetrace::analyzer {
namespace {

std::vector<Interval> iv(std::initializer_list<Interval> l) { return l; }

TEST(IntervalSet, UnionMergesOverlappingAndTouching) {
  auto s = IntervalSet::from(iv({{5, 10}, {0, 3}, {3, 4}, {8, 12}, {20, 20}, {15, 14}}));
  EXPECT_EQ(std::vector<Interval>(s.intervals().begin(), s.intervals().end()),
            iv({{0, 4}, {5, 12}}));
  EXPECT_EQ(s.length(), 11);
}

TEST(IntervalSet, IntersectSubtractClip) {
  auto a = IntervalSet::from(iv({{0, 10}, {20, 30}}));
  auto b = IntervalSet::from(iv({{5, 25}}));
  EXPECT_EQ(a.intersect(b), IntervalSet::from(iv({{5, 10}, {20, 25}})));
  EXPECT_EQ(a.subtract(b), IntervalSet::from(iv({{0, 5}, {25, 30}})));
  EXPECT_EQ(b.subtract(a), IntervalSet::from(iv({{10, 20}})));
  EXPECT_EQ(a.unite(b), IntervalSet::from(iv({{0, 30}})));
  EXPECT_EQ(a.clip({8, 22}), IntervalSet::from(iv({{8, 10}, {20, 22}})));
  EXPECT_EQ(a.length_within({8, 22}), 4);
  EXPECT_TRUE(a.subtract(a).empty());
}

// Brute force on a small time domain: every unit cell covered or not.
std::vector<bool> cells(const IntervalSet& s, int n) {
  std::vector<bool> c(static_cast<std::size_t>(n), false);
  for (const auto& i : s.intervals())
    for (auto t = i.start; t < i.end; ++t) c[static_cast<std::size_t>(t)] = true;
  return c;
}

TEST(IntervalSet, AgreesWithBruteForceOnRandomSets) {
  std::mt19937 rng(42);
  constexpr int kDomain = 200;
  std::uniform_int_distribution<int> pos(0, kDomain), len(0, 30), count(0, 12);
  auto random_set = [&](std::vector<Interval>* raw) {
    const int n = count(rng);
    for (int i = 0; i < n; ++i) {
      const int s = pos(rng);
      raw->push_back({s, std::min(kDomain, s + len(rng))});
    }
    return IntervalSet::from(*raw);
  };
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<Interval> ra, rb;
    auto a = random_set(&ra), b = random_set(&rb);
    std::vector<bool> ca(kDomain, false), cb(kDomain, false);
    for (const auto& i : ra) for (auto t = i.start; t < i.end; ++t) ca[static_cast<std::size_t>(t)] = true;
    for (const auto& i : rb) for (auto t = i.start; t < i.end; ++t) cb[static_cast<std::size_t>(t)] = true;
    std::vector<bool> u(kDomain), x(kDomain), d(kDomain);
    for (std::size_t t = 0; t < kDomain; ++t) {
      u[t] = ca[t] || cb[t];
      x[t] = ca[t] && cb[t];
      d[t] = ca[t] && !cb[t];
    }
    ASSERT_EQ(cells(a, kDomain), ca);
    ASSERT_EQ(cells(a.unite(b), kDomain), u);
    ASSERT_EQ(cells(a.intersect(b), kDomain), x);
    ASSERT_EQ(cells(a.subtract(b), kDomain), d);
    // Sets stay sorted and disjoint with gaps between neighbours.
    for (const auto& s : {a.unite(b), a.intersect(b), a.subtract(b)}) {
      const auto v = s.intervals();
      for (std::size_t i = 1; i < v.size(); ++i) ASSERT_LT(v[i - 1].end, v[i].start);
    }
  }
}

// Intervals as profilers give them: several streams' work, each stream's in
// order, one stream after another (1 to 70 runs: past the 64 the runs are
// merged up to, they are sorted as they come). The union and each label's
// time, exclusive time and time of each set of labels equal a count of the
// unit cells each interval covers.
TEST(Coverage, StreamsInOrderOneAfterAnotherAgreeWithCountingCells) {
  std::mt19937 rng(7);
  constexpr int kDomain = 300;
  std::uniform_int_distribution<int> gap(0, 6), len(1, 12), label(0, 3);
  for (int runs = 1; runs <= 70; ++runs) {
    std::vector<LabelledInterval> in;
    for (int r = 0; r < runs; ++r)
      for (int t = gap(rng); t < kDomain; t += gap(rng)) {
        const int end = std::min(kDomain, t + len(rng));
        in.push_back({t, end, static_cast<std::uint32_t>(label(rng))});
        t = end;
      }
    std::vector<std::uint32_t> mask(kDomain, 0);
    for (const auto& i : in)
      for (auto t = i.start; t < i.end; ++t) mask[static_cast<std::size_t>(t)] |= 1u << i.label;
    std::vector<Interval> plain;
    for (const auto& i : in) plain.push_back({i.start, i.end});
    std::vector<bool> any(kDomain);
    for (std::size_t t = 0; t < kDomain; ++t) any[t] = mask[t] != 0;
    ASSERT_EQ(cells(IntervalSet::from(plain), kDomain), any) << runs << " runs";
    const auto c = Coverage::sweep(in);
    for (std::uint32_t m = 1; m < 16; ++m)
      ASSERT_EQ(c.time_with_mask(m), std::count(mask.begin(), mask.end(), m)) << runs << " runs, mask " << m;
    for (std::uint32_t l = 0; l < 4; ++l)
      ASSERT_EQ(c.active(l), std::count_if(mask.begin(), mask.end(), [l](std::uint32_t m) { return m >> l & 1u; }))
          << runs << " runs, label " << l;
  }
}

TEST(Coverage, SweepGivesUnionsExclusiveTimeAndOverlap) {
  // label 0: [0,10) [5,15) -> union 15; label 1: [10,20); label 2: [30,40)
  auto c = Coverage::sweep({{0, 10, 0}, {5, 15, 0}, {10, 20, 1}, {30, 40, 2}});
  EXPECT_EQ(c.active(0), 15);
  EXPECT_EQ(c.active(1), 10);
  EXPECT_EQ(c.active(2), 10);
  EXPECT_EQ(c.exclusive(0), 10);  // [0,10)
  EXPECT_EQ(c.exclusive(1), 5);   // [15,20)
  EXPECT_EQ(c.overlap(1u << 0, 1u << 1), 5);  // [10,15)
  EXPECT_EQ(c.time_with_mask(0b011), 5);
  EXPECT_EQ(c.any(~0u), 30);
}

// The stretches two or more labels share, by hand: label 0 [0, 10) and
// [10, 20) (one ends where the other starts), label 1 [5, 15), label 2
// [10, 12). Shared: [5, 10) {0, 1}, [10, 12) {0, 1, 2}, [12, 15) {0, 1};
// [15, 20) is label 0's alone. Label 0: 5 + 2 + 3 = 10, label 1: 10, label 2: 2.
TEST(SharedStretch, EachLabelsTimeBesideAnother) {
  std::vector<LabelEdge> starts, ends;
  for (const auto& [s, t, l] : {std::tuple{0, 10, 0}, {10, 20, 0}, {5, 15, 1}, {10, 12, 2}}) {
    starts.push_back({s, l});
    ends.push_back({t, l});
  }
  std::map<std::int32_t, std::int64_t> got;
  for_each_shared_stretch(starts, ends, [&](std::int32_t l, std::int64_t ns) { got[l] += ns; });
  EXPECT_EQ(got, (std::map<std::int32_t, std::int64_t>{{0, 10}, {1, 10}, {2, 2}}));
}

// Against a count of unit cells: streams' intervals one stream after
// another (1 to 70 runs), touching and equal times, labels from -1 to 39
// (more than a mask holds); each label's shared time is the number of cells
// where it and at least one other label are active.
TEST(SharedStretch, StreamsInOrderOneAfterAnotherAgreeWithCountingCells) {
  std::mt19937 rng(11);
  constexpr int kDomain = 200;
  std::uniform_int_distribution<int> gap(0, 4), len(1, 9), label(-1, 39), few(-1, 2);
  for (int runs = 1; runs <= 70; ++runs) {
    std::vector<LabelEdge> starts, ends;
    std::vector<std::map<std::int32_t, int>> cell(kDomain);
    for (int r = 0; r < runs; ++r)
      for (int t = gap(rng); t < kDomain; t += gap(rng)) {
        const int end = std::min(kDomain, t + len(rng));
        const int l = r % 2 ? label(rng) : few(rng);
        starts.push_back({t, l});
        ends.push_back({end, l});
        for (int c = t; c < end; ++c) ++cell[static_cast<std::size_t>(c)][l];
        t = end;
      }
    std::map<std::int32_t, std::int64_t> want, got;
    for (const auto& m : cell)
      if (m.size() >= 2)
        for (const auto& [l, n] : m) ++want[l];
    for_each_shared_stretch(starts, ends, [&](std::int32_t l, std::int64_t ns) { got[l] += ns; });
    ASSERT_EQ(got, want) << runs << " runs";
  }
}

}  // namespace
}  // namespace moetrace::analyzer
