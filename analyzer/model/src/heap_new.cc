// The programs' operator new (heap.h, huge_pages_for_new_blocks): in an
// object library of its own (moetrace::heap_new), linked into the CLI and
// the GUI only. A library inside someone else's process (the Python module)
// must not replace its operator new.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "glibc_heap.h"
#include "moetrace/analyzer/heap.h"
#include "moetrace/analyzer/huge_pages.h"

#if defined(MOETRACE_GLIBC_HEAP)
#include <unistd.h>

namespace {

std::atomic<bool> advising{false};
// The heap's end (its break) up to which it has been advised, rounded down to
// a huge page (huge_pages_for_new_blocks sets it first).
std::atomic<std::uintptr_t> advised_to{0};
constexpr std::uintptr_t kHugePage = moetrace::analyzer::kHugePageBytes;

std::uintptr_t heap_end() { return reinterpret_cast<std::uintptr_t>(sbrk(0)); }
// glibc's highest mmap threshold on 64-bit systems: a block this large is
// mapped apart, fresh memory untouched until the caller writes it, unless
// the heap has that much free already (advising heap memory is harmless:
// its pages that are in use stay as they are).
constexpr std::size_t kMappedApart = std::size_t{32} << 20;

// The part of the heap grown since the last call (glibc grows it by brk; a
// mapping that grows is not advised by the advice given its older part).
// sbrk(0) reads glibc's copy of the break: no system call. A block the
// growth came with may have touched a page of it already: that 2 MiB stays
// in small pages. Where the heap shrank (glibc gives its free top back), the
// mark follows it down, so that growing again is advised again.
void advise_heap_growth() {
  const auto brk = heap_end();
  auto from = advised_to.load(std::memory_order_relaxed);
  const auto to = brk & ~(kHugePage - 1);
  if (to < from) {
    advised_to.compare_exchange_strong(from, to, std::memory_order_relaxed);
    return;
  }
  if (brk < from + kHugePage) return;
  if (!advised_to.compare_exchange_strong(from, to, std::memory_order_relaxed)) return;  // another thread does it
  moetrace::analyzer::advise_huge_pages(reinterpret_cast<void*>(from), brk - from);
}

}  // namespace

namespace moetrace::analyzer {

void huge_pages_for_new_blocks() {
  // Decided here, before operator new asks (deciding allocates); where no
  // huge pages are wanted, operator new is left as it is.
  if (!huge_pages_wanted()) return;
  advised_to.store(heap_end() & ~(kHugePage - 1), std::memory_order_relaxed);  // the growth from here on
  advising.store(true, std::memory_order_relaxed);
}

}  // namespace moetrace::analyzer

// Every other form of operator new (array, nothrow) calls this one in
// libstdc++; the aligned forms keep theirs.
void* operator new(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  if (advising.load(std::memory_order_relaxed)) {
    if (n >= kMappedApart) moetrace::analyzer::advise_huge_pages(p, n);
    else advise_heap_growth();
  }
  return p;
}

#else  // the allocator's own operator new

namespace moetrace::analyzer {
void huge_pages_for_new_blocks() {}
}  // namespace moetrace::analyzer

#endif
