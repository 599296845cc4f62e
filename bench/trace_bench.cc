// Benchmark of the trace pipeline (issue #2): writes synthetic traces of the
// given event counts through the trace writer, then runs `moetrace report` on
// each in a child process and reports its wall time and peak RSS.
//
//   trace_bench [--events N ...] [--dir DIR] [--keep] [--integrity both|on|off]
//
// --integrity both: each size twice, with the writer's integrity record
// (the default; `report` checks every row against it) and without.
//
// Targets on a 2-core CI machine: writer >= 1 M events/s; report on 1 M
// events within 2 s; peak memory <= 150 bytes per event.
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "moetrace/synthetic/synthetic_trace.h"

namespace {

struct ChildResult {
  double seconds = 0;
  long max_rss_kib = 0;
  int status = 0;
};

ChildResult run_child(const std::vector<std::string>& argv) {
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (!freopen("/dev/null", "w", stdout)) _exit(126);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  const auto t1 = std::chrono::steady_clock::now();
  return {std::chrono::duration<double>(t1 - t0).count(), ru.ru_maxrss, status};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> sizes;
  std::string dir = std::filesystem::temp_directory_path().string();
  bool keep = false;
  std::string integrity = "on";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--events") && i + 1 < argc) sizes.push_back(std::stoll(argv[++i]));
    else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!std::strcmp(argv[i], "--keep")) keep = true;
    else if (!std::strcmp(argv[i], "--integrity") && i + 1 < argc) integrity = argv[++i];
    else {
      std::fprintf(stderr, "usage: trace_bench [--events N ...] [--dir DIR] [--keep] [--integrity both|on|off]\n");
      return 2;
    }
  }
  if (sizes.empty()) sizes = {1'000'000, 10'000'000};

  // write ev/s: events over the whole writer life, closing included;
  // sustained ev/s: until every event is flushed to disk (the rate the writer
  // keeps up with while tracing); close s: then indexes and WAL checkpoint.
  fmt::print("{:>10} {:>6} {:>9} {:>9} {:>12} {:>14} {:>9} {:>9} {:>12} {:>12}\n", "events", "record",
             "write s", "close s", "write ev/s", "sustained ev/s", "trace MB", "report s", "peak RSS MB",
             "bytes/event");
  std::vector<std::pair<std::int64_t, bool>> runs;  // (events, integrity record)
  for (const auto target : sizes) {
    if (integrity != "off") runs.emplace_back(target, true);
    if (integrity != "on") runs.emplace_back(target, false);
  }
  for (const auto& [target, record] : runs) {
    moetrace::synthetic::SyntheticConfig c;
    c.integrity_record = record;
    c.ranks = 8;
    c.layers = 8;
    c.chunks = 4;
    c.iterations = moetrace::synthetic::iterations_for_events(c, target);
    const auto path = fmt::format("{}/trace_bench_{}.db", dir, target);
    const auto w = moetrace::synthetic::write_synthetic_trace(path, c);
    const auto mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
    // The CLI beside this program (both in the build's bin folder).
    static const auto cli = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "moetrace").string();
    const auto r = run_child({cli, "report", path});
    if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
      std::fprintf(stderr, "moetrace report failed on %s\n", path.c_str());
      return 1;
    }
    fmt::print("{:>10} {:>6} {:>9.2f} {:>9.2f} {:>12.0f} {:>14.0f} {:>9.1f} {:>9.2f} {:>12.1f} {:>12.1f}\n",
               w.events, record ? "yes" : "no", w.seconds, w.close_seconds, static_cast<double>(w.events) / w.seconds,
               static_cast<double>(w.events) / (w.seconds - w.close_seconds), mb, r.seconds,
               static_cast<double>(r.max_rss_kib) / 1024.0,
               static_cast<double>(r.max_rss_kib) * 1024.0 / static_cast<double>(w.events));
    std::fflush(stdout);
    if (!keep) std::filesystem::remove(path);
  }
  return 0;
}
