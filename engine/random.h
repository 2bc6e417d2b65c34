// A seeded random generator whose stream is the same on every platform: std::mt19937_64
// is fully specified by the C++ standard, while the std:: distributions are not, so the
// distributions here are written out.
#pragma once

#include <cstdint>
#include <random>

namespace dpcore {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  uint64_t next_u64() { return engine_(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n), without modulo bias (rejection sampling).
  uint64_t below(uint64_t n);

 private:
  std::mt19937_64 engine_;
};

}  // namespace dpcore
