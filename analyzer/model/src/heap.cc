#include "moetrace/analyzer/heap.h"

#include <cstddef>
#include <cstdlib>

#include "moetrace/analyzer/huge_pages.h"

#include "glibc_heap.h"

#if defined(MOETRACE_GLIBC_HEAP)
#include <malloc.h>
#include <unistd.h>
#endif

namespace moetrace::analyzer {

#if defined(MOETRACE_GLIBC_HEAP)
namespace {
constexpr int kMiB = 1 << 20;
constexpr int kStep = 16 * kMiB;      // the heap's growth
constexpr int kKeptFree = 64 * kMiB;  // free memory kept at its top
}  // namespace
#endif

bool heap_on_huge_pages() {
#if defined(MOETRACE_GLIBC_HEAP)
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 32 * kMiB);
  mallopt(M_TRIM_THRESHOLD, kKeptFree);
  mallopt(M_TOP_PAD, kStep);
  // One block of 16 MiB grows the heap by it and the pad: 32 MiB, advised
  // while nothing is in it yet, then freed into the heap's top, where the
  // next allocations come from. Untouched, it costs address space only.
  char* const before = static_cast<char*>(sbrk(0));
  void* volatile block = std::malloc(kStep);  // volatile: the compiler may drop a malloc whose block is only freed
  char* const after = static_cast<char*>(sbrk(0));
  const bool grew = before != reinterpret_cast<char*>(-1) && after > before;
  if (grew) advise_huge_pages(before, static_cast<std::size_t>(after - before));
  std::free(block);
  return grew;
#else
  return false;
#endif
}

bool glibc_heap() {
#if defined(MOETRACE_GLIBC_HEAP)
  return true;
#else
  return false;
#endif
}

void release_free_memory() {
#if defined(MOETRACE_GLIBC_HEAP)
  // Only where more is free than the heap may keep at its top anyway (the
  // trim threshold above): below that the next stage reuses it, and a trim
  // would split the huge pages it sits on.
  if (mallinfo2().fordblks > kKeptFree) malloc_trim(0);
#endif
}

}  // namespace moetrace::analyzer
