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
// inner loop has no edge cases; the store writes only the real elements.
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

// Element (row, k) of op(A), and (k, col) of op(B), as 16-bit patterns.
inline uint16_t a_at(const BFloat16* A, int64_t lda, bool trans, int64_t row, int64_t k) {
  return (trans ? A[k * lda + row] : A[row * lda + k]).bits;
}
inline uint16_t b_at(const BFloat16* B, int64_t ldb, bool trans, int64_t k, int64_t col) {
  return (trans ? B[col * ldb + k] : B[k * ldb + col]).bits;
}
// The pair (lo at k, hi at k + 1) as vdpbf16ps reads it from one 32-bit word.
inline uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

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
  std::vector<uint32_t> a(size_t(blocks * pairs * kRows)), b(size_t(panels * pairs * kPanel));
  const int threads = omp_in_parallel() ? 1 : kernel_threads();
  const bool parallel = threads > 1 && double(M) * N * K >= double(1 << 20);
#pragma omp parallel num_threads(threads) if (parallel)
  {
#pragma omp for schedule(static) nowait
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t p = 0; p < pairs; ++p)
        for (int64_t r = 0; r < kRows; ++r) {
          const int64_t row = blk * kRows + r, k = 2 * p;
          uint16_t lo = 0, hi = 0;
          if (row < M) {
            lo = a_at(A, lda, trans_a, row, k);
            if (k + 1 < K) hi = a_at(A, lda, trans_a, row, k + 1);
          }
          a[size_t((blk * pairs + p) * kRows + r)] = pair(lo, hi);
        }
#pragma omp for schedule(static)
    for (int64_t pnl = 0; pnl < panels; ++pnl)
      for (int64_t p = 0; p < pairs; ++p)
        for (int64_t c = 0; c < kPanel; ++c) {
          const int64_t col = pnl * kPanel + c, k = 2 * p;
          uint16_t lo = 0, hi = 0;
          if (col < N) {
            lo = b_at(B, ldb, trans_b, k, col);
            if (k + 1 < K) hi = b_at(B, ldb, trans_b, k + 1, col);
          }
          b[size_t((pnl * pairs + p) * kPanel + c)] = pair(lo, hi);
        }
    // Tiles panel by panel, so that a thread's consecutive tiles share one panel of B.
    float sums[kRows * kPanel];
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < blocks * panels; ++tile) {
      const int64_t pnl = tile / blocks, blk = tile % blocks;
      micro_kernel(pairs, &a[size_t(blk * pairs * kRows)], &b[size_t(pnl * pairs * kPanel)], sums);
      const int64_t rows = std::min(kRows, M - blk * kRows), cols = std::min(kPanel, N - pnl * kPanel);
      for (int64_t r = 0; r < rows; ++r) {
        Out* c = C + (blk * kRows + r) * ldc + pnl * kPanel;
        const float* s = sums + r * kPanel;
        if constexpr (std::is_same_v<Out, float>) {
          if (beta == 0.f) {
            for (int64_t j = 0; j < cols; ++j) c[j] = alpha * s[j];
          } else {
            for (int64_t j = 0; j < cols; ++j) c[j] = alpha * s[j] + beta * c[j];
          }
        } else {  // rounded once, here, with the old value added first when beta is 1
          for (int64_t j = 0; j < cols; ++j)
            c[j] = float_to_bfloat16(alpha * s[j] + (beta == 0.f ? 0.f : bfloat16_to_float(c[j])));
        }
      }
    }
  }
}

template void gemm_bf16_avx512<float>(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t,
                                       const BFloat16*, int64_t, float, float*, int64_t);
template void gemm_bf16_avx512<BFloat16>(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t,
                                          const BFloat16*, int64_t, float, BFloat16*, int64_t);

}  // namespace dpcore::kernels::cpu
