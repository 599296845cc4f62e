#include "moetrace/cupti/buffer_pool.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace moetrace::cupti {

ActivityBufferPool::ActivityBufferPool(std::size_t buffer_bytes, std::size_t max_buffers)
    : buffer_bytes_((std::max<std::size_t>(buffer_bytes, 1024) + kAlignment - 1) / kAlignment *
                    kAlignment),
      max_buffers_(std::max<std::size_t>(max_buffers, 1)) {}

ActivityBufferPool::~ActivityBufferPool() {
  for (std::uint8_t* b : free_) ::operator delete[](b, std::align_val_t(kAlignment));
}

std::uint8_t* ActivityBufferPool::allocate_locked() {
  auto* b = static_cast<std::uint8_t*>(::operator new[](buffer_bytes_, std::align_val_t(kAlignment), std::nothrow));
  if (b != nullptr) ++stats_.allocated;
  return b;
}

void ActivityBufferPool::reserve(std::size_t count) {
  std::lock_guard lock(mu_);
  while (stats_.allocated < std::min(count, max_buffers_)) {
    std::uint8_t* b = allocate_locked();
    if (b == nullptr) return;
    std::memset(b, 0, buffer_bytes_);  // the pages are faulted in here, not on the issuing thread
    free_.push_back(b);
  }
}

std::uint8_t* ActivityBufferPool::acquire() {
  std::lock_guard lock(mu_);
  std::uint8_t* b = nullptr;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (stats_.allocated < max_buffers_) {
    b = allocate_locked();
    if (b != nullptr) ++stats_.allocated_on_demand;
  }
  if (b == nullptr) {
    ++stats_.refused;
    return nullptr;
  }
  ++stats_.acquired;
  ++stats_.in_use;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return b;
}

void ActivityBufferPool::release(std::uint8_t* buffer) {
  if (buffer == nullptr) return;
  std::lock_guard lock(mu_);
  free_.push_back(buffer);
  if (stats_.in_use > 0) --stats_.in_use;
}

PoolStats ActivityBufferPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace moetrace::cupti
