// Quantities for people, as every report format, `diff` and `replay` print
// them: durations, bytes, shares and byte-times.
#pragma once

#include <cstdint>
#include <string>

namespace moetrace::analyzer {

// "1.23 ms", "456 us", "12.0 s": durations for people.
std::string format_duration(std::int64_t ns);
// "1.5 GiB", "12 KiB", "100 B".
std::string format_bytes(std::int64_t bytes);
// bytes as "1.75 GiB" (two decimals, 2^30 bytes).
std::string format_gib(double bytes);
// A fraction as "12.3%".
std::string format_percent(double fraction);
// bytes x ns as "1.2 GiB*ms": bytes scaled, time in ms.
std::string format_bytes_ms(double bytes_ns);

}  // namespace moetrace::analyzer
