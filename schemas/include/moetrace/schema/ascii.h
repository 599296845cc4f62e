// ASCII case and letters, the same under every locale: names in traces
// (kernels, operators, process groups, dtypes, categories) are matched as
// bytes, while std::tolower and std::isalnum read the C locale on every
// byte (slower, and in a program that sets the user's locale, as a Qt
// application does, other bytes than A-Z may change case).
#pragma once

#include <string>
#include <string_view>

namespace moetrace {

constexpr char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

constexpr bool ascii_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// s in lower case.
inline std::string to_ascii_lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = ascii_lower(c);
  return out;
}

}  // namespace moetrace
