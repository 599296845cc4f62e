#include "fatal_signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace moetrace::cli {

namespace {

void on_sigbus(int) {
  // Only async-signal-safe calls here: write(2) and _exit(2).
  static constexpr char kMessage[] =
      "moetrace: a file being read was truncated or changed by another program (SIGBUS); "
      "run again once it is complete\n";
  [[maybe_unused]] const auto n = ::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
  ::_exit(1);
}

}  // namespace

void report_truncated_files() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_sigbus;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

}  // namespace moetrace::cli
