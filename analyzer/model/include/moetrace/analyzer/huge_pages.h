// Transparent huge pages for the big arrays of a trace, where the system
// gives them only on request (Linux's "madvise" mode, Debian's default): an
// array of hundreds of MB filled at once then takes 512 times fewer page
// faults (a 10 M-event trace: about a sixth of its loading time went to them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moetrace::analyzer {

// The size of a transparent huge page on x86-64 (and arm64 with 4 KiB pages).
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Asks for huge pages over the whole 2 MiB pages inside [p, p + bytes); a
// hint, nothing where the system or the range does not allow them, or where
// this process does not want them (huge_pages_wanted).
void advise_huge_pages(void* p, std::size_t bytes);

// Whether this process asks for huge pages at all, decided once, at the
// first call. MOETRACE_HUGE_PAGES=on or off decides; else (unset or "auto")
// yes, unless a VM's memory balloon reports free memory to its host while
// plenty of free memory lies in blocks too small to be reported (over
// 1 GiB) and a small page's first touch is cheap there (under
// kDearSmallPageMicros, timed on 16 fresh pages, twice). There a fresh huge
// page needs a free 2 MiB block, which the host has taken back and must
// fault in again 4 KiB at a time, while a small page comes from memory the
// host still backs. Measured on such VMs (BENCHMARKS.md, "Huge pages where
// the host takes free memory back"): on one, fresh memory at 0.29-0.40 GB/s
// in huge pages, 1.6-1.9 GB/s in small ones (0.24-0.27 once the small
// blocks are used up); memory freed and touched again within a second or
// two, before it is reported, 10 GB/s in huge pages. On another, whose
// every fault is a trip to its hypervisor, small pages cost 10-25 us each
// and cold huge pages 7-8 us per 4 KiB: huge pages opened a 10 M-event
// trace 0.6-0.7 s sooner (of 3.3 s).
bool huge_pages_wanted();

// Why huge_pages_wanted() decided as it did, in a few words (for benchmark
// programs to print beside their figures).
std::string huge_pages_reason();

namespace detail {
// The parts of huge_pages_wanted(), apart for tests.
enum class HugePagesSetting { kAuto, kOn, kOff };
// MOETRACE_HUGE_PAGES's value (nullptr: unset); nullopt where it is none of
// on/1/off/0/auto.
std::optional<HugePagesSetting> huge_pages_setting(const char* value);
// A virtio device's `features` file (one character per feature bit, '0' or
// '1'): whether a balloon device has free page reporting
// (VIRTIO_BALLOON_F_REPORTING, bit 5).
bool balloon_reports_free_pages(std::string_view features);
// /proc/buddyinfo's text: the bytes free in blocks of orders below `order`
// (pages of `page_bytes`), over every zone.
std::uint64_t free_bytes_below_order(std::string_view buddyinfo, unsigned order, std::uint64_t page_bytes);
// Free memory in small blocks that makes small pages the cheaper ones where
// the host takes large free blocks back.
inline constexpr std::uint64_t kSmallFreeEnough = std::uint64_t{1} << 30;
// A small page's first touch this slow (microseconds) makes huge pages the
// cheaper ones even where the host takes free memory back: between the two
// VMs measured (small pages 2.2-2.6 us on the one where they won, 10-25 us
// on the one where huge pages won), below the 7-14 us per 4 KiB that a cold
// huge page cost on either; memory reused within a second or two, most of
// what a run's stages allocate, is 20-40 times cheaper in huge pages.
inline constexpr double kDearSmallPageMicros = 5.0;
// small_page_micros: a small page's first touch, measured where the first
// two conditions hold (huge_pages_wanted), else unused.
bool want_huge_pages(HugePagesSetting setting, bool host_takes_free_memory, std::uint64_t small_free_bytes,
                     double small_page_micros);
}  // namespace detail

// v.reserve(n), the reserved memory advised as above.
template <class T>
void reserve_huge(std::vector<T>& v, std::size_t n) {
  v.reserve(n);
  advise_huge_pages(v.data(), v.capacity() * sizeof(T));
}

// Room for n in v, emptied: the array v has where it is large enough (its
// pages already faulted in, reused by each pass of a loop or search), else
// a new one reserved as above (its old contents never copied, as a growing
// reserve would).
template <class T>
void reserve_huge_or_reuse(std::vector<T>& v, std::size_t n) {
  if (v.capacity() < n) {
    std::vector<T>().swap(v);
    reserve_huge(v, n);
  }
  v.clear();
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
