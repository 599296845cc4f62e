// Checks of the fields a test names. A test that expects only some fields of
// a record writes them in a struct of optionals (designated initialisers,
// e.g. {.window = 500, .idle = 150}); a field it leaves out (nullopt) is not
// checked.
#pragma once

#include <optional>

#include <gtest/gtest.h>

namespace moetrace::testing {

// `got` equals `want` where the test named a value; `field` names it in a
// failure.
template <class T, class U>
void expect_named(const std::optional<T>& want, const U& got, const char* field) {
  if (want) {
    EXPECT_EQ(got, *want) << field;
  }
}

}  // namespace moetrace::testing
