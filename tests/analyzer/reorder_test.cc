#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "moetrace/analyzer/move_to_places.h"
#include "moetrace/analyzer/sort_runs.h"

namespace moetrace::analyzer {
namespace {

// Every element of each array lands at its place, whatever the size (none,
// one, fewer than the 16 blocks, not a multiple of them, many), with arrays
// of several element types moved alike, and an element that owns memory
// moved whole.
TEST(MoveToPlaces, EveryElementOfEveryArrayLandsAtItsPlace) {
  std::mt19937 rng(7);
  for (const std::size_t n : {0u, 1u, 2u, 15u, 16u, 17u, 100u, 1001u, 65537u}) {
    std::vector<std::uint32_t> to(n);
    std::iota(to.begin(), to.end(), 0u);
    std::shuffle(to.begin(), to.end(), rng);
    const auto places = to;
    std::vector<std::int64_t> a(n);
    std::vector<std::uint8_t> b(n);
    std::vector<std::string> c(n);
    for (std::size_t k = 0; k < n; ++k) {
      a[k] = static_cast<std::int64_t>(k) * 3 - 7;
      b[k] = static_cast<std::uint8_t>(k * 5);
      c[k] = "element " + std::to_string(k) + std::string(k % 40, 'x');  // past the small-string buffer too
    }
    move_to_places(to, a, b, c);
    ASSERT_EQ(a.size(), n);
    for (std::size_t k = 0; k < n; ++k) {
      const auto at = places[k];
      EXPECT_EQ(a[at], static_cast<std::int64_t>(k) * 3 - 7) << n << " " << k;
      EXPECT_EQ(b[at], static_cast<std::uint8_t>(k * 5)) << n << " " << k;
      EXPECT_EQ(c[at], "element " + std::to_string(k) + std::string(k % 40, 'x')) << n << " " << k;
    }
  }
}

// The places a stable partition by track gives (the loader's case: tracks
// interleaved, each in order): each track's elements together, in their
// order, against std::stable_sort by track.
TEST(MoveToPlaces, InterleavedTracksComeOutAsAStableSortByTrack) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> track_of(0, 6);
  const std::size_t n = 5000;
  std::vector<int> track(n), id(n);
  for (std::size_t k = 0; k < n; ++k) {
    track[k] = track_of(rng);
    id[k] = static_cast<int>(k);
  }
  std::vector<std::uint32_t> begin(8, 0);
  for (const auto t : track) ++begin[static_cast<std::size_t>(t) + 1];
  for (std::size_t t = 0; t + 1 < begin.size(); ++t) begin[t + 1] += begin[t];
  std::vector<std::uint32_t> to(n);
  for (std::size_t k = 0; k < n; ++k) to[k] = begin[static_cast<std::size_t>(track[k])]++;
  std::vector<std::pair<int, int>> want(n);
  for (std::size_t k = 0; k < n; ++k) want[k] = {track[k], id[k]};
  std::stable_sort(want.begin(), want.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  move_to_places(to, track, id);
  for (std::size_t k = 0; k < n; ++k) {
    EXPECT_EQ(track[k], want[k].first) << k;
    EXPECT_EQ(id[k], want[k].second) << k;
  }
}

// Runs merged (up to 64) and the sort it falls back to past them give what
// std::sort gives.
TEST(SortRuns, AgreesWithASortWhateverTheRuns) {
  std::mt19937 rng(3);
  for (const int runs : {1, 2, 3, 64, 65, 300}) {
    std::vector<std::pair<std::int64_t, std::uint32_t>> v;
    for (int r = 0; r < runs; ++r) {
      std::int64_t t = static_cast<std::int64_t>(rng() % 100);
      for (int i = 0; i < 50; ++i) {
        t += static_cast<std::int64_t>(rng() % 3);  // ties within and across runs
        v.push_back({t, static_cast<std::uint32_t>(v.size())});
      }
    }
    auto want = v;
    std::sort(want.begin(), want.end());
    sort_runs(v, std::less<std::pair<std::int64_t, std::uint32_t>>());
    EXPECT_EQ(v, want) << runs;
  }
}

}  // namespace
}  // namespace moetrace::analyzer
