// Runs the `moetrace` executable as a user would, for the tests of its
// command line (their target defines MOETRACE_CLI, the executable's path).
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
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

// `moetrace import INPUT -o DB` into a fresh file: `db` is removed first.
inline CliResult run_import(const std::string& input, const std::string& db) {
  std::filesystem::remove(db);
  return run_cli("import " + input + " -o " + db);
}

// `moetrace ARGS` with its output discarded: its exit code and its peak
// resident memory (ru_maxrss of wait4, bytes).
struct CliPeak {
  int exit_code;
  std::int64_t peak_rss_bytes;
};
inline CliPeak run_cli_peak(const std::string& args) {
  const auto cmd = "exec " + std::string(MOETRACE_CLI) + " " + args + " >/dev/null 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  if (pid < 0 || ::wait4(pid, &status, 0, &usage) != pid) return {-1, 0};
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), std::int64_t{usage.ru_maxrss} * 1024};
}

}  // namespace moetrace::testing
