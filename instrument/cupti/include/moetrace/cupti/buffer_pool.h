// Recycled activity buffers for CUPTI: CUPTI asks for a buffer whenever it
// needs one (cuptiActivityRegisterCallbacks' request callback) and hands it
// back full; allocating 8 MiB each time would put malloc on the traced
// process's critical path, so full buffers return to a free list. The pool is
// bounded: past max_buffers in flight it refuses, CUPTI drops the records it
// could not store, and the collector counts them as dropped records. No CUDA.
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

  std::uint8_t* acquire();
  void release(std::uint8_t* buffer);  // a buffer from acquire(); nullptr is ignored
  std::size_t buffer_bytes() const { return buffer_bytes_; }
  PoolStats stats() const;

 private:
  const std::size_t buffer_bytes_;
  const std::size_t max_buffers_;
  mutable std::mutex mu_;
  std::vector<std::uint8_t*> free_;
  PoolStats stats_;
};

}  // namespace moetrace::cupti
