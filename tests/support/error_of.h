// What a call that should fail says: the one-line message of the error it
// throws, for tests that compare messages.
#pragma once

#include <string>

#include "moetrace/schema/error.h"

namespace moetrace::testing {

// The message of the `E` that `f()` throws, or `none` where it throws none
// (an exception of another type goes on to the test).
template <typename E = Error, typename F>
std::string error_of(F&& f, const std::string& none = "no error") {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return none;
}

}  // namespace moetrace::testing
