// Wall and CPU seconds of this process, for the timings that the benchmarks
// and the GUI's load summary print. On a shared machine the wall time depends
// on the neighbours; the process's CPU time (all its threads) does not.
#pragma once

#include <chrono>
#include <ctime>

namespace moetrace {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

}  // namespace moetrace
