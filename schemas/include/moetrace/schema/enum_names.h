// An enum's values and their names as one table: the name of a value, and
// the value of a name (a configuration error listing the names otherwise).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "moetrace/schema/error.h"

namespace moetrace {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

// The name of `value` (the table's first name where `value` is missing).
template <class E, std::size_t N>
constexpr std::string_view enum_name(const EnumName<E> (&table)[N], E value) {
  for (const auto& e : table)
    if (e.value == value) return e.name;
  return table[0].name;
}

// The value named `name`; a ConfigError `KEY "name" is not one of a, b, c` otherwise.
template <class E, std::size_t N>
E parse_enum(const EnumName<E> (&table)[N], std::string_view name, std::string_view key) {
  std::string names;
  for (const auto& e : table) {
    if (e.name == name) return e.value;
    names += (names.empty() ? "" : ", ") + std::string(e.name);
  }
  throw ConfigError(std::string(key) + " \"" + std::string(name) + "\" is not one of " + names);
}

}  // namespace moetrace
