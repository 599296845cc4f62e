// Reordering arrays in place by a permutation: the loader's events into
// their tracks, the critical path's edges by source.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace moetrace::analyzer {

// Moves element k of every array to place to[k] (`to` a permutation of 0 ..
// n - 1, n the arrays' common size; it is left scrambled). In place but for
// a buffer of a sixteenth of an array: first every element is moved into
// its block of places (block b: places [b * block, (b + 1) * block)) by an
// American-flag pass, each swap putting one element in its block for good
// and the next free place of each block moving forward, so that the swaps
// walk 16 forward streams (following each element's cycle instead walks
// the array at random, a cache miss or two an element, one after the
// other: 0.4-1.3 s of CPU more to load a 10 M-event trace's 3.9 M
// activities); then each block is put in order through the buffer, one
// array at a time.
template <class... T>
void move_to_places(std::vector<std::uint32_t>& to, std::vector<T>&... arrays) {
  const std::size_t n = to.size();
  if (n == 0) return;
  constexpr std::size_t kBlocks = 16;
  const std::size_t block = std::max<std::size_t>((n + kBlocks - 1) / kBlocks, 1);
  const std::size_t blocks = (n + block - 1) / block;
  std::vector<std::size_t> next(blocks);
  for (std::size_t b = 0; b < blocks; ++b) next[b] = b * block;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t last = std::min(n, (b + 1) * block);
    while (next[b] < last) {
      const std::size_t k = next[b];
      const std::size_t d = to[k] / block;
      if (d == b) {
        ++next[b];
        continue;
      }
      const std::size_t j = next[d]++;
      std::swap(to[k], to[j]);
      (std::swap(arrays[k], arrays[j]), ...);
    }
  }
  // Each block in order, one array at a time through a buffer.
  auto order_blocks = [&](auto& array) {
    using Element = typename std::remove_reference_t<decltype(array)>::value_type;
    std::vector<Element> buffer(std::min(block, n));
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t first = b * block, last = std::min(n, first + block);
      for (std::size_t k = first; k < last; ++k) buffer[to[k] - first] = std::move(array[k]);
      std::move(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(last - first),
                array.begin() + static_cast<std::ptrdiff_t>(first));
    }
  };
  (order_blocks(arrays), ...);
}

}  // namespace moetrace::analyzer
