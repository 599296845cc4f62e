#include "moetrace/analyzer/format.h"

#include <fmt/format.h>

#include <cmath>

namespace moetrace::analyzer {

std::string format_duration(std::int64_t ns) {
  const double v = static_cast<double>(ns);
  const double a = std::fabs(v);
  if (a >= 1e9) return fmt::format("{:.3g} s", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g} ms", v / 1e6);
  if (a >= 1e3) return fmt::format("{:.3g} us", v / 1e3);
  return fmt::format("{} ns", ns);
}

std::string format_bytes(std::int64_t bytes) {
  const double v = static_cast<double>(bytes);
  if (std::fabs(v) >= 1024.0 * 1024 * 1024) return fmt::format("{:.3g} GiB", v / (1024.0 * 1024 * 1024));
  if (std::fabs(v) >= 1024.0 * 1024) return fmt::format("{:.3g} MiB", v / (1024.0 * 1024));
  if (std::fabs(v) >= 1024.0) return fmt::format("{:.3g} KiB", v / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string format_gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024)); }

std::string format_percent(double fraction) { return fmt::format("{:.1f}%", fraction * 100.0); }

std::string format_bytes_ms(double bytes_ns) {
  const double v = bytes_ns / 1e6;  // byte-milliseconds
  const double a = std::fabs(v);
  if (a >= 1024.0 * 1024 * 1024) return fmt::format("{:.3g} GiB*ms", v / (1024.0 * 1024 * 1024));
  if (a >= 1024.0 * 1024) return fmt::format("{:.3g} MiB*ms", v / (1024.0 * 1024));
  if (a >= 1024.0) return fmt::format("{:.3g} KiB*ms", v / 1024.0);
  return fmt::format("{:.3g} B*ms", v);
}

}  // namespace moetrace::analyzer
