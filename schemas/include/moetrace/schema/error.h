// The one error type of the library layers. Its message is a complete,
// user-facing sentence fragment ("trace.db: not a SQLite database"); the CLI
// prints it on one line and exits non-zero.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace moetrace {

// `text` with control characters written as escapes ("\n", "\x01"). Messages
// quote what a file held (a JSON key, a rule's label, SQLite's complaint about
// a damaged schema); escaped, they stay the one line the CLI prints.
inline std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(one_line(what)) {}
  explicit Error(const char* what) : Error(std::string(what)) {}
};

// A bad user-supplied configuration; the message names the field.
class ConfigError : public Error {
 public:
  using Error::Error;
};

}  // namespace moetrace
