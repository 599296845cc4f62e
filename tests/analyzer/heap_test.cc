// heap_on_huge_pages (heap.h), in a test program of its own: it sets up the
// whole process's malloc, once, before any thread.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "moetrace/analyzer/heap.h"

namespace {

struct Range {
  std::uintptr_t begin = 0, end = 0;
  std::string flags;  // VmFlags
};

// The process's [heap] mappings, read from /proc/self/smaps.
std::vector<Range> heap_mappings() {
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
    in_heap = line.find("[heap]") != std::string::npos;
    if (in_heap)
      out.push_back({std::stoull(line.substr(0, dash), nullptr, 16),
                     std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16), {}});
  }
  return out;
}

bool in_heap(const void* p, const std::vector<Range>& heap) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const auto& r : heap)
    if (a >= r.begin && a < r.end) return true;
  return false;
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
  const bool set_up = moetrace::analyzer::heap_on_huge_pages();
  if (!moetrace::analyzer::glibc_heap()) GTEST_SKIP() << "not glibc's malloc (another libc or a sanitizer's)";
  ASSERT_TRUE(set_up) << "glibc's heap did not grow by the block meant to grow it";
  const auto heap = heap_mappings();
  ASSERT_FALSE(heap.empty());

  // Advised: one of the heap's mappings carries "hg" (MADV_HUGEPAGE), where
  // the system has transparent huge pages at all.
  if (thp_on_request()) {
    bool advised = false;
    for (const auto& r : heap) advised = advised || r.flags.find(" hg") != std::string::npos;
    EXPECT_TRUE(advised) << "no [heap] mapping advised for huge pages";
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
