// Human-readable numbers for labels, tooltips and details: durations with
// units (ns, us, ms, s), byte sizes (KiB, MiB, GiB) and counts with digit
// grouping. Plain functions so tests pin their exact output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moetrace::gui {

// "850 ns", "12.5 us", "3.21 ms", "1.50 s": three significant digits.
std::string format_duration(double ns);
// A time on the ruler with the precision a step of step_ns needs, in the
// largest unit that is at most twice the step:
// format_time(1'500'000, 500'000) == "1.5 ms", format_time(300, 100) == "300 ns".
std::string format_time(double ns, double step_ns);
// "512 B", "1.5 KiB", "3.00 GiB".
std::string format_bytes(double bytes);
// "12,345,678".
std::string format_count(std::int64_t n);
// "12.3 %" from a fraction.
std::string format_percent(double fraction);
// A signed relative difference, as `moetrace replay` prints its errors:
// "+2.29 %", "-0.66 %".
std::string format_change(double fraction);
// A duration typed by a user: "1500", "250ns", "12.5us", "12.5\u00B5s", "3ms",
// "1.5 s" (no unit: ns). nullopt where it is not one.
std::optional<double> parse_duration(std::string_view text);

}  // namespace moetrace::gui
