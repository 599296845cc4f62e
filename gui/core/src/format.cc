#include "moetrace/gui/format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace moetrace::gui {
namespace {

constexpr const char* kMicro = "\xC2\xB5s";  // "µs" in UTF-8

std::string printf_string(const char* fmt, double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}

// Three significant digits: 1.23, 12.3, 123.
std::string three_digits(double v, const char* unit) {
  const double a = std::fabs(v);
  const char* fmt = a >= 99.95 ? "%.0f %s" : a >= 9.995 ? "%.1f %s" : "%.2f %s";
  return printf_string(fmt, v, unit);
}

}  // namespace

std::string format_duration(double ns) {
  if (!std::isfinite(ns)) return "?";
  const double a = std::fabs(ns);
  if (a < 999.5) {
    if (ns == std::floor(ns)) return printf_string("%.0f %s", ns, "ns");
    return three_digits(ns, "ns");
  }
  if (a < 999.5e3) return three_digits(ns / 1e3, kMicro);
  if (a < 999.5e6) return three_digits(ns / 1e6, "ms");
  if (a < 999.5e9) return three_digits(ns / 1e9, "s");
  return printf_string("%.0f %s", ns / 1e9, "s");
}

std::string format_time(double ns, double step_ns) {
  struct Unit {
    double ns;
    const char* name;
  };
  static constexpr Unit kUnits[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, kMicro}, {1, "ns"}};
  const Unit* unit = &kUnits[3];
  for (const auto& u : kUnits)
    if (step_ns >= u.ns / 2) {
      unit = &u;
      break;
    }
  const double rel_step = step_ns / unit->ns;
  int decimals = rel_step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(rel_step) - 1e-9));
  decimals = decimals < 0 ? 0 : decimals > 9 ? 9 : decimals;
  double v = ns / unit->ns;
  if (std::fabs(v) < 0.5 * std::pow(10.0, -decimals)) v = 0;  // no "-0"
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, unit->name);
  return buf;
}

std::string format_bytes(double bytes) {
  if (!std::isfinite(bytes)) return "?";
  const double a = std::fabs(bytes);
  if (a < 1024) return printf_string("%.0f %s", bytes, "B");
  if (a < 1024.0 * 1024) return three_digits(bytes / 1024, "KiB");
  if (a < 1024.0 * 1024 * 1024) return three_digits(bytes / (1024.0 * 1024), "MiB");
  if (a < 1024.0 * 1024 * 1024 * 1024) return three_digits(bytes / (1024.0 * 1024 * 1024), "GiB");
  return three_digits(bytes / (1024.0 * 1024 * 1024 * 1024), "TiB");
}

std::string format_count(std::int64_t n) {
  const bool neg = n < 0;
  auto u = neg ? 0 - static_cast<std::uint64_t>(n) : static_cast<std::uint64_t>(n);
  std::string digits = std::to_string(u);
  std::string out;
  const auto len = digits.size();
  for (std::size_t i = 0; i < len; ++i) {
    if (i > 0 && (len - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return neg ? "-" + out : out;
}

std::string format_percent(double fraction) {
  if (!std::isfinite(fraction)) return "?";
  return printf_string("%.1f %s", fraction * 100, "%");
}

std::string format_change(double fraction) {
  if (!std::isfinite(fraction)) return "?";
  return printf_string("%+.2f %s", fraction * 100, "%");
}

std::optional<double> parse_duration(std::string_view text) {
  std::string t(text);
  auto trim = [](std::string& s) {
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
    std::size_t i = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
    s.erase(0, i);
  };
  trim(t);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || !std::isfinite(v)) return std::nullopt;
  std::string unit(end);
  trim(unit);
  if (unit.empty() || unit == "ns") return v;
  if (unit == "us" || unit == "\xC2\xB5s") return v * 1e3;
  if (unit == "ms") return v * 1e6;
  if (unit == "s") return v * 1e9;
  return std::nullopt;
}

}  // namespace moetrace::gui
