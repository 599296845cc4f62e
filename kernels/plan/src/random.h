// A seeded generator whose streams are the same on every platform (the
// standard distributions are not), so synthetic loads and test tensors are
// reproducible from their seed.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace moetrace::plan {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in (-1, 1) scaled.
  double symmetric(double scale) { return (2.0 * uniform() - 1.0) * scale; }
  // Standard normal (Box-Muller).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
  // Skips n draws of next() (the state is a counter: O(1)); normal() is two.
  void discard(std::uint64_t n) { state_ += n * 0x9E3779B97F4A7C15ull; }
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  std::uint64_t state_;
};

}  // namespace moetrace::plan
