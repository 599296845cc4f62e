// Recycled activity buffers for CUPTI: CUPTI asks for a buffer whenever it
// needs one (cuptiActivityRegisterCallbacks' request callback) and hands it
// back full; allocating 8 MiB each time would put malloc on the traced
// process's critical path, so full buffers return to a free list. The pool is
// bounded: past max_buffers in flight it refuses, CUPTI drops the records it
// could not store, and the collector counts them as dropped records. No CUDA.
//
// The first buffers are made before tracing starts (reserve()), their pages
// written once: CUPTI asks for a buffer on the thread that issues the work,
// and a fresh 8 MiB buffer's page faults stalled that thread for 4.5-5.2 ms
// a request (CUPTI's own overhead records, 8 emulated ranks on an H200),
// which made the collector's overhead 3-18 % instead of about 2 %.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace moetrace::cupti {

struct PoolStats {
  std::size_t allocated = 0;    // buffers ever allocated (free list + in flight)
  std::size_t in_use = 0;
  std::size_t peak_in_use = 0;
  std::size_t acquired = 0;     // successful acquire() calls
  std::size_t allocated_on_demand = 0;  // allocated by acquire(), not reserve()
  std::size_t refused = 0;      // acquire() calls answered with nullptr
};

class ActivityBufferPool {
 public:
  // CUPTI needs 8-byte alignment; buffers are 64-byte aligned.
  static constexpr std::size_t kAlignment = 64;

  ActivityBufferPool(std::size_t buffer_bytes, std::size_t max_buffers);
  ~ActivityBufferPool();
  ActivityBufferPool(const ActivityBufferPool&) = delete;
  ActivityBufferPool& operator=(const ActivityBufferPool&) = delete;

  // Allocates buffers up to `count` in all (within max_buffers) and writes
  // every page of each, so that acquire() hands them out without a fault.
  void reserve(std::size_t count);
  std::uint8_t* acquire();
  void release(std::uint8_t* buffer);  // a buffer from acquire(); nullptr is ignored
  std::size_t buffer_bytes() const { return buffer_bytes_; }
  PoolStats stats() const;

 private:
  std::uint8_t* allocate_locked();  // a new buffer counted in `allocated`, or nullptr (mu_ held)
  const std::size_t buffer_bytes_;
  const std::size_t max_buffers_;
  mutable std::mutex mu_;
  std::vector<std::uint8_t*> free_;
  PoolStats stats_;
};

}  // namespace moetrace::cupti
