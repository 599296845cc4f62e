// Byte buffers that are written before they are read (the JSON splitter's
// chunks and batches, a small gzip file's inflated text): resize() leaves
// the new bytes unset, where std::vector<char> would zero them first, a
// pass over fresh pages for nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace moetrace::importers::kineto {

template <class T>
struct UninitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using Bytes = std::vector<char, UninitAllocator<char>>;

// Readable bytes a JSON piece handed to simdjson must have after it (its
// SIMDJSON_PADDING, 64).
inline constexpr std::size_t kBytesPadding = 64;

inline std::string_view view(const Bytes& b) { return {b.data(), b.size()}; }

}  // namespace moetrace::importers::kineto
