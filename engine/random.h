// Random numbers whose values are fixed by this file rather than by the standard library,
// so that initialisation, the data order and the synthetic data are identical on every
// platform. std::mt19937_64's output sequence is fixed by the C++ standard; its
// distributions (uniform_int_distribution, std::shuffle, ...) are not, so the few we need
// are written out here.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace dpcore {

// SplitMix64's finaliser: nearby inputs (seed, seed + 1) give unrelated outputs.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The seed of sub-stream `stream` of `seed`, e.g. the shuffle of epoch e of a loader.
inline uint64_t derive_seed(uint64_t seed, uint64_t stream) { return mix64(mix64(seed) ^ stream); }

// The seed of one sample's draws at one epoch in sub-stream `stream` (augmentation,
// transforms, masked-LM masks): a function of these four alone, so the draws never depend on
// the batch a sample lands in, the replicas, the threads or a resume.
inline uint64_t sample_seed(uint64_t seed, uint64_t stream, uint64_t epoch, uint64_t sample) {
  return derive_seed(derive_seed(derive_seed(seed, stream), epoch), sample);
}

// Uniform integer in [0, n), n >= 1. Rejection sampling: draws below 2^64 mod n are
// redrawn, so the accepted range is a whole number of copies of [0, n) and x % n is unbiased.
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t reject_below = (0 - n) % n;  // 2^64 mod n
  uint64_t x = rng();
  while (x < reject_below) x = rng();
  return x % n;
}

// Uniform double in [0, 1) from the top 53 bits of one draw.
inline double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

// Fisher-Yates (Durstenfeld): for i = n-1 down to 1, swap v[i] with v[j], j uniform in [0, i].
template <class T>
void fisher_yates(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    size_t j = size_t(uniform_below(rng, i));
    std::swap(v[i - 1], v[j]);
  }
}

// A seeded stream of the above (model initialisation, test sampling).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  double uniform() { return uniform01(engine_); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  uint64_t below(uint64_t n) { return uniform_below(engine_, n); }
  // Standard normal N(0, 1) by Box-Muller from two draws (the cosine branch only, so each
  // value costs two draws and the stream never depends on a cached second value).
  double normal() {
    const double u1 = 1.0 - uniform();  // in (0, 1]: the logarithm stays finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace dpcore
