// bfloat16 GEMM on AVX512-BF16: C[M,N] = alpha * op(A) op(B) + beta * C, float32 out.
//
// vdpbf16ps (_mm512_dpbf16_ps) takes 16 float32 lanes and two vectors of 32 bfloat16, and
// adds to lane i the two products a[2i] b[2i] and a[2i+1] b[2i+1]: exact products (8 + 8
// significant bits fit a float32), each added in float32, round to nearest even, with
// subnormal inputs and results flushed to zero. So one instruction does 32 multiply-adds if
// the operands are laid out in pairs along k:
//   * A is packed into blocks of kRows rows, [k pair][row] as 32-bit words holding
//     (A[r, 2p], A[r, 2p+1]); one word broadcast to all lanes feeds a row;
//   * B is packed into panels of 32 columns, [k pair][column] as 32-bit words holding
//     (B[2p, c], B[2p+1, c]); two 64-byte loads per pair cover the panel.
// Odd K is padded with a zero pair half, partial row blocks and panels with zeros, so the
// inner loop has no edge cases; the store writes only the real elements. Packing costs a
// pass over both operands per call, which on a convolution's small GEMMs (16 output
// channels: two row blocks) is as much work as the products, so it moves whole vectors:
// where the pairs lie in two rows of storage, 32 values of each are interleaved in
// registers; where they lie along a row (a transposed operand), 16 x 16 tiles of pair words
// are transposed in registers (docs/benchmarks.md, "16-bit convolutions on the CPU").
// The micro-kernel keeps kRows x 32 float32 sums in 2 * kRows zmm registers (16 for
// kRows = 8, plus two of B and one broadcast: 19 of the 32), and walks all of K: each
// element of C is one fixed sequence of additions, whichever thread computes it.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

namespace {

constexpr int64_t kRows = 8;     // rows of C per micro-kernel call
constexpr int64_t kPanel = 32;   // columns of C per micro-kernel call (two zmm of float32)

#define DPCORE_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// The pair (lo at k, hi at k + 1) as vdpbf16ps reads it from one 32-bit word.
inline uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }
// The two adjacent 16-bit values at p as one such word (lo first in memory: little-endian).
inline uint32_t word_at(const BFloat16* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// A packed: out[(blk * pairs + p) * kRows + r] holds op(A)[row, 2p] and [row, 2p + 1] for
// row = blk * kRows + r, zeros past the matrix. trans_a false: a row of op(A) is a row of
// storage, its pairs already adjacent, copied word by word; trans_a true: rows 2p and
// 2p + 1 of storage hold the block's 8 rows side by side, interleaved in registers (masked
// loads past row M).
DPCORE_AVX512_BF16 void pack_a(bool trans, int64_t M, int64_t K, const BFloat16* A, int64_t lda, int64_t blocks,
                               uint32_t* out) {
  const int64_t pairs = (K + 1) / 2, full = K / 2;
  if (trans) {
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t row = blk * kRows, rows = std::min(kRows, M - row);
      const __mmask8 mask = __mmask8((1u << rows) - 1);
      for (int64_t p = 0; p < pairs; ++p) {
        const __m128i lo_row = _mm_maskz_loadu_epi16(mask, A + 2 * p * lda + row);
        const __m128i hi_row = 2 * p + 1 < K ? _mm_maskz_loadu_epi16(mask, A + (2 * p + 1) * lda + row)
                                             : _mm_setzero_si128();
        uint32_t* dst = out + (blk * pairs + p) * kRows;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi16(lo_row, hi_row));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 4), _mm_unpackhi_epi16(lo_row, hi_row));
      }
    }
    return;
  }
#pragma omp for schedule(static)
  for (int64_t row = 0; row < blocks * kRows; ++row) {
    uint32_t* dst = out + (row / kRows) * pairs * kRows + row % kRows;
    if (row >= M) {
      for (int64_t p = 0; p < pairs; ++p) dst[p * kRows] = 0;
      continue;
    }
    const BFloat16* src = A + row * lda;
    for (int64_t p = 0; p < full; ++p) dst[p * kRows] = word_at(src + 2 * p);
    if (K % 2) dst[full * kRows] = pair(src[K - 1].bits, 0);
  }
}

// rows[i] (i < 16) transposed in place: afterwards rows[j] holds element j of every input
// row, as 32-bit words (three rounds of unpacks and lane shuffles, 64 instructions).
// (GCC 12 warns that the intrinsics' own undefined pass-through operand "may be used
// uninitialized", its bug 105593; every value here is defined.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
DPCORE_AVX512_BF16 void transpose_16x16(__m512i rows[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // lane L: (a[4L], b[4L], a[4L+1], b[4L+1]) and the next two
    t[2 * i] = _mm512_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  for (int j = 0; j < 4; ++j) {  // u[4j + m], lane L: element 4L + m of rows 4j..4j+3
    u[4 * j] = _mm512_unpacklo_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 1] = _mm512_unpackhi_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 2] = _mm512_unpacklo_epi64(t[4 * j + 1], t[4 * j + 3]);
    u[4 * j + 3] = _mm512_unpackhi_epi64(t[4 * j + 1], t[4 * j + 3]);
  }
  for (int m = 0; m < 4; ++m) {  // element q = 4L + m gathers lane L of u[m], u[4+m], u[8+m], u[12+m]
    const __m512i even_lo = _mm512_shuffle_i32x4(u[m], u[4 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i even_hi = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i odd_lo = _mm512_shuffle_i32x4(u[m], u[4 + m], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i odd_hi = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(3, 1, 3, 1));
    rows[m] = _mm512_shuffle_i32x4(even_lo, even_hi, _MM_SHUFFLE(2, 0, 2, 0));       // lane 0
    rows[8 + m] = _mm512_shuffle_i32x4(even_lo, even_hi, _MM_SHUFFLE(3, 1, 3, 1));   // lane 2
    rows[4 + m] = _mm512_shuffle_i32x4(odd_lo, odd_hi, _MM_SHUFFLE(2, 0, 2, 0));     // lane 1
    rows[12 + m] = _mm512_shuffle_i32x4(odd_lo, odd_hi, _MM_SHUFFLE(3, 1, 3, 1));    // lane 3
  }
}
#pragma GCC diagnostic pop

// B packed: out[(pnl * pairs + p) * kPanel + c] holds op(B)[2p, col] and [2p + 1, col] for
// col = pnl * kPanel + c, zeros past the matrix. trans_b false: rows 2p and 2p + 1 of B
// are 32 contiguous values each, interleaved in registers (masked loads past column N);
// trans_b true: a column of op(B) is a row of storage, its pairs already adjacent.
DPCORE_AVX512_BF16 void pack_b(bool trans, int64_t N, int64_t K, const BFloat16* B, int64_t ldb, int64_t panels,
                               uint32_t* out) {
  const int64_t pairs = (K + 1) / 2, full = K / 2;
  if (!trans) {
    // unpacklo/hi interleave within 128-bit lanes: lo holds columns 8j..8j+3 of lane j, hi
    // 8j+4..8j+7; these quad indices put columns 0..15, then 16..31, in order.
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
#pragma omp for schedule(static)
    for (int64_t pnl = 0; pnl < panels; ++pnl) {
      const int64_t col = pnl * kPanel, cols = std::min(kPanel, N - col);
      const __mmask32 mask = cols == kPanel ? ~__mmask32(0) : __mmask32((uint64_t(1) << cols) - 1);
      for (int64_t p = 0; p < pairs; ++p) {
        const __m512i lo_row = _mm512_maskz_loadu_epi16(mask, B + 2 * p * ldb + col);
        const __m512i hi_row = 2 * p + 1 < K ? _mm512_maskz_loadu_epi16(mask, B + (2 * p + 1) * ldb + col)
                                             : _mm512_setzero_si512();
        const __m512i lo = _mm512_unpacklo_epi16(lo_row, hi_row), hi = _mm512_unpackhi_epi16(lo_row, hi_row);
        uint32_t* dst = out + (pnl * pairs + p) * kPanel;
        _mm512_storeu_si512(dst, _mm512_permutex2var_epi64(lo, first, hi));
        _mm512_storeu_si512(dst + 16, _mm512_permutex2var_epi64(lo, second, hi));
      }
    }
    return;
  }
  // Tiles of 16 columns x 16 pairs: 16 rows of storage (columns past N read as zeros)
  // transposed in registers into 16 stores of one pair's 16 columns; the pairs left after
  // the last whole tile (and an odd K's last, half-zero pair) word by word.
  const int64_t tiled = full / 16 * 16;
#pragma omp for schedule(static)
  for (int64_t group = 0; group < panels * 2; ++group) {
    const int64_t c0 = group * 16;  // the group's first column; its panel and place in it:
    uint32_t* dst = out + (c0 / kPanel) * pairs * kPanel + c0 % kPanel;
    __m512i rows[16];
    for (int64_t p0 = 0; p0 < tiled; p0 += 16) {
      for (int64_t i = 0; i < 16; ++i)
        rows[i] = c0 + i < N ? _mm512_loadu_si512(B + (c0 + i) * ldb + 2 * p0) : _mm512_setzero_si512();
      transpose_16x16(rows);
      for (int64_t j = 0; j < 16; ++j) _mm512_storeu_si512(dst + (p0 + j) * kPanel, rows[j]);
    }
    for (int64_t i = 0; i < 16; ++i) {
      const BFloat16* src = B + (c0 + i) * ldb;
      for (int64_t p = tiled; p < pairs; ++p)
        dst[p * kPanel + i] = c0 + i >= N ? 0 : p < full ? word_at(src + 2 * p) : pair(src[K - 1].bits, 0);
    }
  }
}

// Packing space kept per calling thread between calls (a training step asks for the same
// sizes every time; every word is written before it is read).
uint32_t* packing_scratch(size_t n, int slot) {
  thread_local std::vector<uint32_t> buffers[2];
  std::vector<uint32_t>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// sums[r][j] over rows r < kRows, columns j < 32 of one block of A and one panel of B.
DPCORE_AVX512_BF16 void micro_kernel(int64_t pairs, const uint32_t* a, const uint32_t* b, float* sums) {
  __m512 acc[kRows][2];
  for (int64_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kPanel);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * kPanel + 16);
    for (int64_t r = 0; r < kRows; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(int(a[p * kRows + r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    _mm512_storeu_ps(sums + r * kPanel, acc[r][0]);
    _mm512_storeu_ps(sums + r * kPanel + 16, acc[r][1]);
  }
}

// c[j] = alpha * s[j] + beta * c[j] for one row of a tile, j < cols: float32 C as is; a
// bfloat16 C rounded once, here, with the old value added first when beta is 1. Built for
// AVX-512 (the target of this file's kernels), so that GCC vectorises the rounding's
// integer arithmetic (kernels/half_types.h) 16 lanes at a time.
DPCORE_AVX512_BF16 void store_row(int64_t cols, float alpha, const float* s, float beta, float* c) {
  if (beta == 0.f) {
    for (int64_t j = 0; j < cols; ++j) c[j] = alpha * s[j];
  } else {
    for (int64_t j = 0; j < cols; ++j) c[j] = alpha * s[j] + beta * c[j];
  }
}
DPCORE_AVX512_BF16 void store_row(int64_t cols, float alpha, const float* s, float beta, BFloat16* c) {
  if (beta == 0.f) {
    for (int64_t j = 0; j < cols; ++j) c[j] = float_to_bfloat16(alpha * s[j]);
  } else {
    for (int64_t j = 0; j < cols; ++j) c[j] = float_to_bfloat16(alpha * s[j] + bfloat16_to_float(c[j]));
  }
}

}  // namespace

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

template <class Out>
void gemm_bf16_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A,
                      int64_t lda, const BFloat16* B, int64_t ldb, float beta, Out* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const int64_t pairs = (K + 1) / 2, blocks = (M + kRows - 1) / kRows, panels = (N + kPanel - 1) / kPanel;
  // Packed operands (see the top of the file); a missing k + 1 or row or column reads 0.
  uint32_t* a = packing_scratch(size_t(blocks * pairs * kRows), 0);
  uint32_t* b = packing_scratch(size_t(panels * pairs * kPanel), 1);
  const int threads = omp_in_parallel() ? 1 : kernel_threads();
  const bool parallel = threads > 1 && double(M) * N * K >= double(1 << 20);
#pragma omp parallel num_threads(threads) if (parallel)
  {
    pack_a(trans_a, M, K, A, lda, blocks, a);
    pack_b(trans_b, N, K, B, ldb, panels, b);  // (its omp for's barrier: both packed before any tile)
    // Tiles panel by panel, so that a thread's consecutive tiles share one panel of B.
    float sums[kRows * kPanel];
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < blocks * panels; ++tile) {
      const int64_t pnl = tile / blocks, blk = tile % blocks;
      micro_kernel(pairs, a + blk * pairs * kRows, b + pnl * pairs * kPanel, sums);
      const int64_t rows = std::min(kRows, M - blk * kRows), cols = std::min(kPanel, N - pnl * kPanel);
      for (int64_t r = 0; r < rows; ++r)
        store_row(cols, alpha, sums + r * kPanel, beta, C + (blk * kRows + r) * ldc + pnl * kPanel);
    }
  }
}

template void gemm_bf16_avx512<float>(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t,
                                       const BFloat16*, int64_t, float, float*, int64_t);
template void gemm_bf16_avx512<BFloat16>(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t,
                                          const BFloat16*, int64_t, float, BFloat16*, int64_t);

}  // namespace dpcore::kernels::cpu
