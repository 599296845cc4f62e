#include "moetrace/analyzer/huge_pages.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <new>
#include <sstream>
#include <string>
#include <system_error>

#include <fmt/format.h>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace moetrace::analyzer {

namespace detail {

std::optional<HugePagesSetting> huge_pages_setting(const char* value) {
  if (value == nullptr) return HugePagesSetting::kAuto;
  const std::string_view v(value);
  if (v == "auto" || v.empty()) return HugePagesSetting::kAuto;
  if (v == "on" || v == "1") return HugePagesSetting::kOn;
  if (v == "off" || v == "0") return HugePagesSetting::kOff;
  return std::nullopt;
}

bool balloon_reports_free_pages(std::string_view features) {
  constexpr std::size_t kReportingBit = 5;  // VIRTIO_BALLOON_F_REPORTING (virtio 1.2, 5.5.3)
  return features.size() > kReportingBit && features[kReportingBit] == '1';
}

std::uint64_t free_bytes_below_order(std::string_view buddyinfo, unsigned order, std::uint64_t page_bytes) {
  // "Node 0, zone   Normal  14176  11096 ...": the count of free blocks of
  // order 0, 1, ... after the zone's name.
  std::uint64_t bytes = 0;
  std::istringstream lines{std::string(buddyinfo)};
  std::string line;
  while (std::getline(lines, line)) {
    const auto zone = line.find("zone");
    if (zone == std::string::npos) continue;
    std::istringstream fields(line.substr(zone + 4));
    std::string name;
    fields >> name;
    std::uint64_t count = 0;
    for (unsigned k = 0; k < order && fields >> count; ++k) bytes += count * (page_bytes << k);
  }
  return bytes;
}

bool want_huge_pages(HugePagesSetting setting, bool host_takes_free_memory, std::uint64_t small_free_bytes,
                     double small_page_micros) {
  switch (setting) {
    case HugePagesSetting::kOn: return true;
    case HugePagesSetting::kOff: return false;
    case HugePagesSetting::kAuto: break;
  }
  return !(host_takes_free_memory && small_free_bytes >= kSmallFreeEnough &&
           small_page_micros < kDearSmallPageMicros);
}

}  // namespace detail

namespace {

#if defined(__linux__)
std::string file_text(const std::filesystem::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A bound virtio balloon with free page reporting: the host takes free
// memory back.
bool host_takes_free_memory() {
  std::error_code ec;
  const std::filesystem::path driver = "/sys/bus/virtio/drivers/virtio_balloon";
  for (std::filesystem::directory_iterator it(driver, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind("virtio", 0) == 0 &&
        detail::balloon_reports_free_pages(file_text(it->path() / "features")))
      return true;
  return false;
}

// The free memory in blocks under the order the kernel reports to the host
// (page_reporting_order; the huge page's order where unreadable).
std::uint64_t small_free_bytes() {
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  unsigned order = 0;
  for (auto b = kHugePageBytes / page; b > 1; b /= 2) ++order;
  std::istringstream reported(file_text("/sys/module/page_reporting/parameters/page_reporting_order"));
  if (unsigned o = 0; reported >> o && o > 0 && o < 64) order = o;
  return detail::free_bytes_below_order(file_text("/proc/buddyinfo"), order, page);
}

// A small page's first touch, in microseconds: the cheaper of two runs over
// 16 fresh 4 KiB pages (a run the scheduler interrupted counts less). About
// 0.1 ms where a fault costs 2-3 us, 0.4-0.8 ms where it costs 10-25.
double small_page_micros() {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  constexpr std::size_t kPages = 16;
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 2; ++run) {
    void* p = mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) break;
#if defined(MADV_NOHUGEPAGE)
    madvise(p, kPages * page, MADV_NOHUGEPAGE);
#endif
    auto* bytes = static_cast<volatile char*>(p);
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < kPages; ++i) bytes[i * page] = 1;
    const auto end = std::chrono::steady_clock::now();
    munmap(p, kPages * page);
    best = std::min(best, std::chrono::duration<double, std::micro>(end - start).count() / kPages);
  }
  return std::isfinite(best) ? best : 0.0;
}
#endif

struct Decision {
  bool wanted = true;
  std::string reason;
};

Decision decide_huge_pages() {
  const char* value = std::getenv("MOETRACE_HUGE_PAGES");
  auto setting = detail::huge_pages_setting(value);
  if (!setting) {
    std::fprintf(stderr, "moetrace: MOETRACE_HUGE_PAGES=%s is none of on, off, auto: taken as auto\n", value);
    setting = detail::HugePagesSetting::kAuto;
  }
  if (*setting != detail::HugePagesSetting::kAuto)
    return {detail::want_huge_pages(*setting, false, 0, 0),
            *setting == detail::HugePagesSetting::kOn ? "MOETRACE_HUGE_PAGES=on" : "MOETRACE_HUGE_PAGES=off"};
#if defined(__linux__)
  if (!host_takes_free_memory()) return {true, "no memory balloon takes free memory back"};
  const auto small = small_free_bytes();
  const double gib = static_cast<double>(small) / static_cast<double>(std::uint64_t{1} << 30);
  if (small < detail::kSmallFreeEnough)
    return {true, fmt::format("the host takes free memory back, but only {:.1f} GiB lies free in small blocks", gib)};
  const double micros = small_page_micros();
  const bool wanted = detail::want_huge_pages(*setting, true, small, micros);
  return {wanted, fmt::format("the host takes free memory back, {:.1f} GiB lies free in small blocks, and a small "
                              "page's first touch costs {:.1f} us here",
                              gib, micros)};
#else
  return {true, "not Linux"};
#endif
}

const Decision& decision() {
  static const Decision d = decide_huge_pages();
  return d;
}

}  // namespace

bool huge_pages_wanted() { return decision().wanted; }

std::string huge_pages_reason() { return decision().reason; }

void advise_huge_pages([[maybe_unused]] void* p, [[maybe_unused]] std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (!huge_pages_wanted()) return;
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
