// Runs the `moetrace` executable as a user would, for the tests of its
// command line (their target defines MOETRACE_CLI, the executable's path).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "text_trace.h"
#include "test_paths.h"

namespace moetrace::testing {

struct CliResult {
  int exit_code;
  std::string out, err;
};

// `moetrace ARGS` through the shell; stdout and stderr to per-process files.
inline CliResult run_cli(const std::string& args) {
  const auto out = temp_path("cli.out"), err = temp_path("cli.err");
  const auto cmd = std::string(MOETRACE_CLI) + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_text(out), read_text(err)};
}

}  // namespace moetrace::testing
