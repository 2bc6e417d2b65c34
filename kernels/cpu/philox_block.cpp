// Philox4x32-10 on 16 counters at once (philox_block.h).
//
// Why intrinsics: a round multiplies 32-bit words into 64-bit products. GCC vectorises the
// portable loop by widening the words into 64-bit lanes, multiplying those as full 64-bit
// numbers and packing the halves back, about three times the instructions of the one
// vpmuludq per 8 products the hardware has (the portable loop built for AVX-512 ran no
// faster than the baseline's SSE2). The AVX-512 version keeps word k of the 16 counters in
// one register, multiplies the even and the odd lanes with vpmuludq, and blends the high and
// low halves back into place: 4 products, 4 shifts and 4 blends a round.
#include "kernels/cpu/philox_block.h"

#include <immintrin.h>

#include "kernels/cpu/vector_variants.h"

namespace dpcore::kernels::cpu {

// The counters as arrays of each word (c[word][group]), one simd loop over the groups per
// round (philox_round on each lane), then written out in element order.
void philox_block_portable(const DropoutConfig& cfg, int64_t sample, int64_t first_group, uint32_t* words) {
  uint32_t c[4][kPhiloxBlockGroups];
  for (int64_t g = 0; g < kPhiloxBlockGroups; ++g) {
    const Philox4x32 counter = dropout_counter(cfg.step, sample, first_group + g);
    for (int k = 0; k < 4; ++k) c[k][g] = counter.v[k];
  }
  uint32_t k0 = uint32_t(cfg.seed), k1 = uint32_t(cfg.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += philox_detail::kWeyl0, k1 += philox_detail::kWeyl1;
#pragma omp simd
    for (int64_t g = 0; g < kPhiloxBlockGroups; ++g) philox_round(c[0][g], c[1][g], c[2][g], c[3][g], k0, k1);
  }
  for (int64_t g = 0; g < kPhiloxBlockGroups; ++g)
    for (int k = 0; k < 4; ++k) words[4 * g + k] = c[k][g];
}

void philox_block(const DropoutConfig& cfg, int64_t sample, int64_t first_group, uint32_t* words) {
  if (vector_width() == VectorWidth::Avx512) philox_block_avx512(cfg, sample, first_group, words);
  else philox_block_portable(cfg, sample, first_group, words);
}

// GCC 12 warns that the intrinsics' own undefined pass-through operand "is used
// uninitialized" (its bug 105593); every value here is defined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

constexpr __mmask16 kOddLanes = 0xAAAA;

// The 16 products word * multiplier as their high and low 32-bit halves, lane for lane.
__attribute__((target("avx512f"))) inline void multiply(__m512i word, __m512i multiplier, __m512i& high,
                                                         __m512i& low) {
  const __m512i even = _mm512_mul_epu32(word, multiplier);                         // lanes 0, 2, ... as 64 bits
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(word, 32), multiplier);  // lanes 1, 3, ...
  high = _mm512_mask_blend_epi32(kOddLanes, _mm512_srli_epi64(even, 32), odd);
  low = _mm512_mask_blend_epi32(kOddLanes, even, _mm512_slli_epi64(odd, 32));
}

}  // namespace

__attribute__((target("avx512f"))) void philox_block_avx512(const DropoutConfig& cfg, int64_t sample,
                                                            int64_t first_group, uint32_t* words) {
  using namespace philox_detail;
  // dropout_counter's words for groups first_group + 0..15 (the group wraps in 32 bits as it does there).
  __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(int(uint32_t(first_group))),
                                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i c1 = _mm512_set1_epi32(int(uint32_t(sample)));
  __m512i c2 = _mm512_set1_epi32(int(uint32_t(cfg.step)));
  __m512i c3 = _mm512_set1_epi32(int(uint32_t(cfg.step >> 32)));
  const __m512i m0 = _mm512_set1_epi32(int(kMultiplier0)), m1 = _mm512_set1_epi32(int(kMultiplier1));
  uint32_t k0 = uint32_t(cfg.seed), k1 = uint32_t(cfg.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += kWeyl0, k1 += kWeyl1;
    __m512i high0, low0, high1, low1;
    multiply(c0, m0, high0, low0);
    multiply(c2, m1, high1, low1);
    // philox_round: c0 = hi(M1 c2) ^ c1 ^ k0, c2 = hi(M0 c0) ^ c3 ^ k1 (0x96: a ^ b ^ c).
    c0 = _mm512_ternarylogic_epi32(high1, c1, _mm512_set1_epi32(int(k0)), 0x96);
    c2 = _mm512_ternarylogic_epi32(high0, c3, _mm512_set1_epi32(int(k1)), 0x96);
    c1 = low1;
    c3 = low0;
  }
  // Transpose the 4 x 16 words into element order: within each 128-bit lane, the four words
  // of one group side by side (groups 0, 4, 8, 12 in t0; 1, 5, 9, 13 in t1; ...), then the
  // lanes gathered so that each output register holds groups 4 j .. 4 j + 3.
  const __m512i c01_low = _mm512_unpacklo_epi32(c0, c1), c01_high = _mm512_unpackhi_epi32(c0, c1);
  const __m512i c23_low = _mm512_unpacklo_epi32(c2, c3), c23_high = _mm512_unpackhi_epi32(c2, c3);
  const __m512i t0 = _mm512_unpacklo_epi64(c01_low, c23_low), t1 = _mm512_unpackhi_epi64(c01_low, c23_low);
  const __m512i t2 = _mm512_unpacklo_epi64(c01_high, c23_high), t3 = _mm512_unpackhi_epi64(c01_high, c23_high);
  const __m512i t01_front = _mm512_shuffle_i32x4(t0, t1, 0x44), t23_front = _mm512_shuffle_i32x4(t2, t3, 0x44);
  const __m512i t01_back = _mm512_shuffle_i32x4(t0, t1, 0xEE), t23_back = _mm512_shuffle_i32x4(t2, t3, 0xEE);
  _mm512_storeu_si512(words, _mm512_shuffle_i32x4(t01_front, t23_front, 0x88));
  _mm512_storeu_si512(words + 16, _mm512_shuffle_i32x4(t01_front, t23_front, 0xDD));
  _mm512_storeu_si512(words + 32, _mm512_shuffle_i32x4(t01_back, t23_back, 0x88));
  _mm512_storeu_si512(words + 48, _mm512_shuffle_i32x4(t01_back, t23_back, 0xDD));
}

#pragma GCC diagnostic pop

}  // namespace dpcore::kernels::cpu
