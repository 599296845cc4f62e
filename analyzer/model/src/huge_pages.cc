#include "moetrace/analyzer/huge_pages.h"

#include <cstdint>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace moetrace::analyzer {

void advise_huge_pages([[maybe_unused]] void* p, [[maybe_unused]] std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = kHugePageBytes;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (p != nullptr && end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

void* map_apart(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
#if defined(__linux__)
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  advise_huge_pages(p, bytes);
  return p;
#else
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
#endif
}

void unmap_apart(void* p, [[maybe_unused]] std::size_t bytes) {
  if (p == nullptr) return;
#if defined(__linux__)
  munmap(p, bytes == 0 ? 1 : bytes);
#else
  std::free(p);
#endif
}

}  // namespace moetrace::analyzer
