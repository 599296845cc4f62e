// Transparent huge pages for the big arrays of a trace, where the system
// gives them only on request (Linux's "madvise" mode, Debian's default): an
// array of hundreds of MB filled at once then takes 512 times fewer page
// faults (a 10 M-event trace: about a sixth of its loading time went to them).
#pragma once

#include <cstddef>
#include <vector>

namespace moetrace::analyzer {

// The size of a transparent huge page on x86-64 (and arm64 with 4 KiB pages).
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Asks for huge pages over the whole 2 MiB pages inside [p, p + bytes); a
// hint, nothing where the system or the range does not allow them.
void advise_huge_pages(void* p, std::size_t bytes);

// v.reserve(n), the reserved memory advised as above.
template <class T>
void reserve_huge(std::vector<T>& v, std::size_t n) {
  v.reserve(n);
  advise_huge_pages(v.data(), v.capacity() * sizeof(T));
}

// Memory mapped apart and given back to the system when freed, whatever its
// size: for an analysis's arrays of a few MiB to a few tens that live while
// the analysis runs. From the heap (under glibc's 32 MiB mmap threshold)
// they would stay there once freed, in holes other threads' later blocks
// fill only in part, while the critical path's large arrays, mapped apart,
// cannot use them. Advised for huge pages as reserve_huge's.
void* map_apart(std::size_t bytes);
void unmap_apart(void* p, std::size_t bytes);

template <class T>
struct MappedAllocator {
  using value_type = T;
  MappedAllocator() = default;
  template <class U>
  MappedAllocator(const MappedAllocator<U>&) {}  // NOLINT: converting, as allocators are
  T* allocate(std::size_t n) { return static_cast<T*>(map_apart(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { unmap_apart(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const MappedAllocator<U>&) const {
    return true;
  }
};

template <class T>
using MappedVector = std::vector<T, MappedAllocator<T>>;

}  // namespace moetrace::analyzer
