// Philox4x32-10, the counter-based generator of Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3" (SC'11), as Random123 defines it: a 128-bit counter and a 64-bit key go
// through ten rounds of two 32x32->64 multiplications, and out come four 32-bit words that
// pass BigCrush. There is no state: the words for a counter are a pure function of
// (counter, key), so any thread can draw any element's numbers in any order and get the
// same bits. Usable from CPU and CUDA code; tests/kernels/philox_test.cpp holds it to
// Random123's known-answer vectors.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define DPCORE_PHILOX_FN __host__ __device__ inline
#else
#define DPCORE_PHILOX_FN inline
#endif

namespace dpcore::kernels {

struct Philox4x32 {
  uint32_t v[4];
};

namespace philox_detail {
constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;  // the paper's M0, M1
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;              // key increments: golden ratio, sqrt(3) - 1
}  // namespace philox_detail

// One round on the counter words (c0 the lowest) with that round's key: two 32x32->64
// products, their halves crossed and mixed with the other words and the key. On four
// scalars, so that a caller running many counters side by side (kernels/cpu/dropout.cpp)
// can apply it to each lane of its arrays.
DPCORE_PHILOX_FN void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
  using namespace philox_detail;
  const uint64_t p0 = uint64_t(kMultiplier0) * c0, p1 = uint64_t(kMultiplier1) * c2;
  const uint32_t next0 = uint32_t(p1 >> 32) ^ c1 ^ k0, next2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
  c1 = uint32_t(p1);
  c3 = uint32_t(p0);
  c0 = next0;
  c2 = next2;
}

// counter (c0 the lowest word) and key (k0, k1) -> four words. The key schedule bumps the
// key before every round but the first.
DPCORE_PHILOX_FN Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t k0, uint32_t k1) {
  using namespace philox_detail;
  uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += kWeyl0, k1 += kWeyl1;
    philox_round(c[0], c[1], c[2], c[3], k0, k1);
  }
  return counter;
}

}  // namespace dpcore::kernels
