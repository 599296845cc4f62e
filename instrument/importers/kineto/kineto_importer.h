// PyTorch-profiler (Kineto) Chrome-trace JSON (.json or .json.gz) -> moetrace.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace moetrace::importers {

class TraceBuilder;

namespace kineto {

// Thrown by import_files where a file's rows were written with the rank or
// time base that its last bytes suggested (read_tail), and the whole parse
// says otherwise (a key of that name in an event's args): the caller imports
// again with read_tails = false. Never seen with the files Kineto writes.
class TailGuessedWrong : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Imports every file (one rank each) into `builder`, each parsed on
// `threads` threads (0: the machine's cores, at most 4). With read_tails, a
// file is written while it is parsed, with the rank and time base read from
// its last bytes (Kineto writes baseTimeNanoseconds after the events; a gzip
// file is inflated twice for it); where they cannot be read, the file is
// parsed whole first. Without read_tails, every file is parsed whole, the
// next while one is written.
// Throws moetrace::Error naming the file for invalid or truncated JSON or
// gzip data and for JSON that is not a Chrome trace.
void import_files(const std::vector<std::string>& paths, TraceBuilder& builder, int threads = 0,
                  bool read_tails = true);

// A JSON number of microseconds ("1682725898236567", "4458676522690.655",
// "1.5e3") as integer nanoseconds, exactly where the text has at most three
// decimals, rounded otherwise; nullopt where it does not fit in 64 bits.
// Kineto timestamps need 19 significant digits in ns, more than a double holds.
std::optional<std::int64_t> micros_to_ns(std::string_view text);

}  // namespace kineto
}  // namespace moetrace::importers
