// Inflating gzip-compressed fixtures (tests/data/gpu/*.db.gz) for the tests.
#pragma once

#include <string>

namespace moetrace::testing {

// Inflates a .gz file to `to`; the error, or "" on success.
std::string gunzip(const std::string& from, const std::string& to);

// Inflates `from` to a fresh temporary file named `name` (temp_path) and
// returns its path; a failure is a test failure (ADD_FAILURE) and "".
std::string inflated(const std::string& from, const std::string& name);

}  // namespace moetrace::testing
