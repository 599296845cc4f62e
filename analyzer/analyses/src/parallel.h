// Independent pieces of work run on a few threads: the analyses of one trace
// (analyses.cc) and the critical paths of its ranks (critical_path.cc). Each
// piece writes only its own result, so a run on any number of threads gives
// the same results as one on the calling thread. The first exception (in
// the pieces' order, then one from `done`) is rethrown on the calling thread
// once every piece has ended.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moetrace::analyzer::detail {

// Set on a thread while a BackgroundAnalyses (analyses.h) lives there, and
// on the workers parallel_for starts from it: those run at a lower priority.
inline thread_local bool background_workers = false;

// The calling thread's scheduling priority lowered (Linux: nice + 10, at
// most 19; a thread's own, inherited by the threads it starts). Nothing
// where the system has no such per-thread priority.
void lower_thread_priority();

// Threads to use: `requested` where positive, else the machine's cores.
inline int worker_count(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Runs piece(i) for i in [0, n) on up to `threads` threads (0: the machine's
// cores), in index order of starting. `done(i)` is called on the calling
// thread as each piece ends (for progress), in the order they end.
inline void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& piece,
                         const std::function<void(std::size_t)>& done = {}) {
  const auto workers = std::min<std::size_t>(n, static_cast<std::size_t>(worker_count(threads)));
  std::vector<std::exception_ptr> errors(n);
  std::exception_ptr done_error;  // from `done`, on the calling thread
  if (workers <= 1) {
    for (std::size_t i = 0; i < n; ++i) {
      try {
        piece(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      if (done && !done_error) {
        try {
          done(i);
        } catch (...) {
          done_error = std::current_exception();
        }
      }
    }
  } else {
    std::atomic<std::size_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::size_t> ended;  // guarded by mu
    std::vector<std::thread> pool;
    pool.reserve(workers);
    const bool background = background_workers;
    for (std::size_t w = 0; w < workers; ++w)
      pool.emplace_back([&, background] {
        if (background) {
          background_workers = true;
          lower_thread_priority();
        }
        for (std::size_t i; (i = next.fetch_add(1)) < n;) {
          try {
            piece(i);
          } catch (...) {
            errors[i] = std::current_exception();
          }
          {
            std::lock_guard lock(mu);
            ended.push_back(i);
          }
          cv.notify_one();
        }
      });
    for (std::size_t reported = 0; reported < n;) {
      std::vector<std::size_t> batch;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return ended.size() > reported; });
        batch.assign(ended.begin() + static_cast<std::ptrdiff_t>(reported), ended.end());
      }
      for (std::size_t i : batch) {
        if (!done || done_error) continue;
        try {
          done(i);
        } catch (...) {
          done_error = std::current_exception();  // rethrown once the workers have ended
        }
      }
      reported += batch.size();
    }
    for (auto& t : pool) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  if (done_error) std::rethrow_exception(done_error);
}

}  // namespace moetrace::analyzer::detail
