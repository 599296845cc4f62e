// heap_on_huge_pages and huge_pages_for_new_blocks (heap.h), in a test
// program of its own: they set up the whole process's malloc and operator
// new, once, before any thread.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "moetrace/analyzer/heap.h"
#include "moetrace/analyzer/huge_pages.h"

namespace {

// The advice asked for whatever the system (huge_pages_wanted decides once
// a process, from the environment first). ctest runs each test in a process
// of its own; run together, the first test's choice holds for the rest.
bool chosen_in_this_process = false;
void want_huge_pages() {
  ::setenv("MOETRACE_HUGE_PAGES", "on", 1);
  chosen_in_this_process = true;
}

struct Range {
  std::uintptr_t begin = 0, end = 0;
  std::string flags;  // VmFlags
};

// The process's mappings, read from /proc/self/smaps: the [heap] ones, or
// every one.
std::vector<Range> mappings(bool heap_only = true) {
  std::vector<Range> out;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_heap = false;
  while (std::getline(smaps, line)) {
    if (line.find("VmFlags:") == 0) {
      if (in_heap) out.back().flags = line;
      continue;
    }
    const auto dash = line.find('-');
    const auto space = line.find(' ');
    if (dash == std::string::npos || space == std::string::npos || dash > space) continue;
    const bool hex = line.find_first_not_of("0123456789abcdef") == dash;
    if (!hex) continue;  // a field line of the mapping above
    in_heap = !heap_only || line.find("[heap]") != std::string::npos;
    if (in_heap)
      out.push_back({std::stoull(line.substr(0, dash), nullptr, 16),
                     std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16), {}});
  }
  return out;
}
std::vector<Range> heap_mappings() { return mappings(true); }

const Range* mapping_of(const void* p, const std::vector<Range>& in) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const auto& r : in)
    if (a >= r.begin && a < r.end) return &r;
  return nullptr;
}
bool in_heap(const void* p, const std::vector<Range>& heap) { return mapping_of(p, heap) != nullptr; }
// Advised for huge pages (MADV_HUGEPAGE): "hg" in its VmFlags.
bool advised(const Range& r) { return r.flags.find(" hg") != std::string::npos; }
bool advised(const void* p) {
  const auto all = mappings(false);
  const auto* r = mapping_of(p, all);
  return r != nullptr && advised(*r);
}

// Whether the kernel gives transparent huge pages on request: its mode is
// "always" or "madvise" (a kernel built without them has no such file, and
// there madvise(MADV_HUGEPAGE) fails).
bool thp_on_request() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::stringstream s;
  s << f.rdbuf();
  const auto mode = s.str();
  return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
}

}  // namespace

TEST(Heap, AdvisedForHugePagesAndHoldingEveryThreadsBlocks) {
  want_huge_pages();
  const bool set_up = moetrace::analyzer::heap_on_huge_pages();
  if (!moetrace::analyzer::glibc_heap()) GTEST_SKIP() << "not glibc's malloc (another libc or a sanitizer's)";
  ASSERT_TRUE(set_up) << "glibc's heap did not grow by the block meant to grow it";
  const auto heap = heap_mappings();
  ASSERT_FALSE(heap.empty());

  // Advised: one of the heap's mappings carries "hg" (MADV_HUGEPAGE), where
  // the system has transparent huge pages at all.
  if (thp_on_request()) {
    bool any_advised = false;
    for (const auto& r : heap) any_advised = any_advised || advised(r);
    EXPECT_TRUE(any_advised) << "no [heap] mapping advised for huge pages";
  }

  // A block of 1 MiB comes from the heap: glibc's default would map it apart
  // (its threshold starts at 128 KiB).
  void* volatile big = std::malloc(std::size_t{1} << 20);
  EXPECT_TRUE(in_heap(big, heap_mappings()));
  std::free(big);

  // Another thread's blocks come from the same heap, not an arena of its own
  // (glibc's default gives a new thread one).
  void* volatile other = nullptr;
  std::thread([&] { other = std::malloc(4096); }).join();
  EXPECT_TRUE(in_heap(other, heap_mappings()));
  std::free(other);
}

// The CLI's set-up (ctest runs each test in a process of its own).
TEST(Heap, NewBlocksAndTheHeapsGrowthAdvisedForHugePages) {
  want_huge_pages();
  moetrace::analyzer::heap_on_huge_pages();
  moetrace::analyzer::huge_pages_for_new_blocks();
  if (!moetrace::analyzer::glibc_heap()) GTEST_SKIP() << "not glibc's malloc (another libc or a sanitizer's)";
  if (!thp_on_request()) GTEST_SKIP() << "no transparent huge pages on request on this system";

  // A block of 64 MiB, mapped apart by glibc, is advised where it is made.
  const std::size_t big = std::size_t{64} << 20;
  auto* const block = new char[big];
  EXPECT_TRUE(advised(block + big / 2)) << "a 64 MiB block from operator new not advised for huge pages";
  delete[] block;

  // The heap grown by 96 MiB of 1 MiB blocks (taken from the heap, its
  // first 32 MiB advised by heap_on_huge_pages): its new part is advised too.
  std::vector<std::unique_ptr<char[]>> blocks;
  for (int i = 0; i < 96; ++i) blocks.emplace_back(new char[std::size_t{1} << 20]);
  const auto* const last = blocks.back().get();
  ASSERT_TRUE(in_heap(last, heap_mappings())) << "the 1 MiB blocks did not come from the heap";
  EXPECT_TRUE(advised(last)) << "the heap's growth past its first 32 MiB not advised for huge pages";
}

// Asked off: nothing advised, neither the heap nor a block mapped apart.
TEST(Heap, NothingAdvisedWhereHugePagesAreNotWanted) {
  if (chosen_in_this_process) GTEST_SKIP() << "huge pages chosen by an earlier test of this process (ctest runs it alone)";
  ::setenv("MOETRACE_HUGE_PAGES", "off", 1);
  moetrace::analyzer::heap_on_huge_pages();
  moetrace::analyzer::huge_pages_for_new_blocks();
  if (!moetrace::analyzer::glibc_heap()) GTEST_SKIP() << "not glibc's malloc (another libc or a sanitizer's)";
  EXPECT_FALSE(moetrace::analyzer::huge_pages_wanted());
  for (const auto& r : heap_mappings()) EXPECT_FALSE(advised(r)) << "a [heap] mapping advised for huge pages";
  const std::size_t big = std::size_t{64} << 20;
  auto* const block = new char[big];
  EXPECT_FALSE(advised(block + big / 2));
  delete[] block;
  void* const apart = moetrace::analyzer::map_apart(big);
  EXPECT_FALSE(advised(static_cast<char*>(apart) + big / 2));
  moetrace::analyzer::unmap_apart(apart, big);
}

// The decision's parts (huge_pages.h), on inputs in the kernel's formats.
TEST(HugePages, SettingFromTheEnvironment) {
  using moetrace::analyzer::detail::HugePagesSetting;
  using moetrace::analyzer::detail::huge_pages_setting;
  EXPECT_EQ(huge_pages_setting(nullptr), HugePagesSetting::kAuto);
  EXPECT_EQ(huge_pages_setting("auto"), HugePagesSetting::kAuto);
  EXPECT_EQ(huge_pages_setting(""), HugePagesSetting::kAuto);
  EXPECT_EQ(huge_pages_setting("on"), HugePagesSetting::kOn);
  EXPECT_EQ(huge_pages_setting("1"), HugePagesSetting::kOn);
  EXPECT_EQ(huge_pages_setting("off"), HugePagesSetting::kOff);
  EXPECT_EQ(huge_pages_setting("0"), HugePagesSetting::kOff);
  EXPECT_FALSE(huge_pages_setting("yes").has_value());
  EXPECT_FALSE(huge_pages_setting("ON ").has_value());
}

TEST(HugePages, BalloonFeatureBits) {
  using moetrace::analyzer::detail::balloon_reports_free_pages;
  // A balloon with STATS_VQ (1), DEFLATE_ON_OOM (2), REPORTING (5) and bit 7,
  // as sysfs prints its 128 feature bits.
  EXPECT_TRUE(balloon_reports_free_pages("0110010100000000000000000000000010000000000000000000000000000000"));
  // The same without bit 5; a short or empty file.
  EXPECT_FALSE(balloon_reports_free_pages("0110000100000000000000000000000010000000000000000000000000000000"));
  EXPECT_FALSE(balloon_reports_free_pages("01100"));
  EXPECT_FALSE(balloon_reports_free_pages(""));
}

TEST(HugePages, FreeMemoryInSmallBlocks) {
  using moetrace::analyzer::detail::free_bytes_below_order;
  const std::string buddyinfo =
      "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n"
      "Node 0, zone    DMA32      3      6      3      4      3      3      1      6      5      4    749 \n"
      "Node 0, zone   Normal     10      2      0      0      0      0      0      0      0      7      9 \n";
  // Orders 0-8 (4 KiB pages): DMA 1*1024 KiB; DMA32 3*4 + 6*8 + 3*16 + 4*32 +
  // 3*64 + 3*128 + 1*256 + 6*512 + 5*1024 = 9260 KiB; Normal 10*4 + 2*8 = 56
  // KiB. Orders 9 and 10 (2 and 4 MiB) left out.
  EXPECT_EQ(free_bytes_below_order(buddyinfo, 9, 4096), std::uint64_t{(1024 + 9260 + 56) * 1024});
  // Orders 0-1 only.
  EXPECT_EQ(free_bytes_below_order(buddyinfo, 2, 4096), std::uint64_t{(3 * 4 + 6 * 8 + 10 * 4 + 2 * 8) * 1024});
  EXPECT_EQ(free_bytes_below_order("", 9, 4096), 0u);
  EXPECT_EQ(free_bytes_below_order("no zones here\n", 9, 4096), 0u);
}

TEST(HugePages, WantedUnlessTheHostTakesFreeMemoryAndSmallPagesAreCheap) {
  using moetrace::analyzer::detail::HugePagesSetting;
  using moetrace::analyzer::detail::kDearSmallPageMicros;
  using moetrace::analyzer::detail::kSmallFreeEnough;
  using moetrace::analyzer::detail::want_huge_pages;
  const double cheap = 2.4;  // a small page's first touch on the VM where small pages won (us)
  const double dear = 11.3;  // on the VM where huge pages won
  EXPECT_TRUE(want_huge_pages(HugePagesSetting::kAuto, false, 8 * kSmallFreeEnough, cheap));
  EXPECT_TRUE(want_huge_pages(HugePagesSetting::kAuto, true, kSmallFreeEnough - 1, cheap));
  EXPECT_FALSE(want_huge_pages(HugePagesSetting::kAuto, true, kSmallFreeEnough, cheap));
  EXPECT_TRUE(want_huge_pages(HugePagesSetting::kAuto, true, kSmallFreeEnough, dear));
  EXPECT_TRUE(want_huge_pages(HugePagesSetting::kAuto, true, kSmallFreeEnough, kDearSmallPageMicros));
  EXPECT_TRUE(want_huge_pages(HugePagesSetting::kOn, true, 8 * kSmallFreeEnough, cheap));
  EXPECT_FALSE(want_huge_pages(HugePagesSetting::kOff, false, 0, dear));
}

TEST(HugePages, TheReasonNamesWhatDecided) {
  if (chosen_in_this_process) GTEST_SKIP() << "another test of this process decided first";
  ::setenv("MOETRACE_HUGE_PAGES", "off", 1);
  chosen_in_this_process = true;
  EXPECT_FALSE(moetrace::analyzer::huge_pages_wanted());
  EXPECT_EQ(moetrace::analyzer::huge_pages_reason(), "MOETRACE_HUGE_PAGES=off");
}
