// The one error type of the library layers. Its message is a complete,
// user-facing sentence fragment ("trace.db: not a SQLite database"); the CLI
// prints it on one line and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace moetrace {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad user-supplied configuration; the message names the field.
class ConfigError : public Error {
 public:
  using Error::Error;
};

}  // namespace moetrace
