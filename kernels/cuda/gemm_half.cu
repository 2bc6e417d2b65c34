// GEMM on tensor cores for mixed precision (issue 27): 16-bit A and B (bfloat16 or
// float16), products accumulated in float32 by WMMA m16n16k16, C float or 16-bit.
// sgemm_strided_batched's contract (row-major, batched by strides), llm.c-style simple:
//   * a block computes a 64 x 64 tile of C with 4 warps, each warp a 32 x 32 quarter as
//     2 x 2 accumulator fragments;
//   * K is walked 32 at a time: the block copies op(A)'s 64 x 32 and op(B)'s 32 x 64 slices
//     to shared memory (zeros past the matrix edges, so any M, N, K, lda, ldb work with no
//     alignment asked of the caller), then each warp does 2 k-steps of 2 x 2 mma_sync;
//   * a transposed operand is copied as it lies in memory (reads coalesced along its
//     contiguous dimension) and loaded as a col_major fragment, so no transpose in shared;
//   * the epilogue stores the accumulators to shared memory and writes C element by element,
//     which handles partial tiles, alpha, beta and the one rounding to 16 bits uniformly.
// No split-K, no double buffering: the 16-bit GEMMs of a training step are large enough to
// fill the GPU with 64 x 64 tiles, and what matters first is one clear, tested kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "kernels/error.h"
#include "kernels/half_types.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

using namespace nvcuda;

constexpr int kBM = 64, kBN = 64, kBK = 32;  // block tile and K slice
constexpr int kWarps = 4, kThreads = kWarps * 32;
// Shared rows padded by 8 16-bit elements (16 bytes): rows no longer start in the same
// bank, and a fragment's pointer stays 256-bit aligned (every 16th row is at a multiple of
// 32 bytes) with ldm a multiple of 8, as WMMA requires.
constexpr int kPad = 8;
constexpr int kCPad = 4;  // the float staging tile's: ldm a multiple of 4 floats

// The WMMA element type of each storage type, and its value from the stored bits.
template <class In>
struct Wmma;
template <>
struct Wmma<BFloat16> {
  using type = __nv_bfloat16;
  static __device__ type from(BFloat16 v) { return __ushort_as_bfloat16(v.bits); }
};
template <>
struct Wmma<Float16> {
  using type = __half;
  static __device__ type from(Float16 v) { return __ushort_as_half(v.bits); }
};

// The C element from the float32 result: float with beta (beta == 0 never reads C), or
// 16-bit rounded once to nearest even, the old value added first when beta is 1 (the
// caller has checked beta is 0 or 1): a linear layer's bias rows, an accumulated gradient.
__device__ inline void write_out(float v, float beta, float* c) { *c = beta != 0.f ? v + beta * *c : v; }
__device__ inline void write_out(float v, float beta, BFloat16* c) {
  *c = float_to_bfloat16(beta != 0.f ? v + bfloat16_to_float(*c) : v);
}
__device__ inline void write_out(float v, float beta, Float16* c) {
  *c = float_to_float16(beta != 0.f ? v + float16_to_float(*c) : v);
}

template <class In, class Out>
struct Args {
  const In* A;
  const In* B;
  Out* C;
  int64_t lda, ldb, ldc, stride_a, stride_b, stride_c;
  int M, N, K;
  float alpha, beta;
};

// Copies the ROWS x COLS block at (row0, col0) of a row-major matrix with `rows` x `cols`
// elements and leading dimension `ld` into shared memory (row stride COLS + kPad), zeros
// outside the matrix. Consecutive threads take consecutive columns: coalesced reads.
template <int ROWS, int COLS, class In, class T>
__device__ void copy_tile(T* tile, const In* g, int64_t ld, int row0, int col0, int rows, int cols) {
  for (int e = threadIdx.x; e < ROWS * COLS; e += kThreads) {
    const int r = e / COLS, c = e % COLS, gr = row0 + r, gc = col0 + c;
    tile[r * (COLS + kPad) + c] = gr < rows && gc < cols ? Wmma<In>::from(g[gr * ld + gc]) : Wmma<In>::from(In{0});
  }
}

// One 64 x 64 tile of C for matrix blockIdx.z of the batch. op(A)[m][k] is A[m * lda + k],
// or A[k * lda + m] when TRANS_A; op(B)[k][n] is B[k * ldb + n], or B[n * ldb + k] when TRANS_B.
template <class In, class Out, bool TRANS_A, bool TRANS_B>
__global__ void __launch_bounds__(kThreads) gemm_half_kernel(Args<In, Out> g) {
  using T = typename Wmma<In>::type;
  using LayoutA = std::conditional_t<TRANS_A, wmma::col_major, wmma::row_major>;
  using LayoutB = std::conditional_t<TRANS_B, wmma::col_major, wmma::row_major>;
  // op(A)'s slice as it lies in memory: [m][k] (ld kBK + kPad) or, transposed, [k][m]
  // (ld kBM + kPad); op(B)'s as [k][n] or, transposed, [n][k].
  constexpr int kLdA = TRANS_A ? kBM + kPad : kBK + kPad, kLdB = TRANS_B ? kBK + kPad : kBN + kPad;
  __shared__ __align__(32) T a_tile[TRANS_A ? kBK * (kBM + kPad) : kBM * (kBK + kPad)];
  __shared__ __align__(32) T b_tile[TRANS_B ? kBN * (kBK + kPad) : kBK * (kBN + kPad)];
  __shared__ __align__(32) float c_tile[kBM * (kBN + kCPad)];

  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * kBN, matrix = blockIdx.z;
  const In* A = g.A + matrix * g.stride_a;
  const In* B = g.B + matrix * g.stride_b;
  const int warp = threadIdx.x / 32, wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's quarter

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  for (int k0 = 0; k0 < g.K; k0 += kBK) {
    if (TRANS_A) copy_tile<kBK, kBM>(a_tile, A, g.lda, k0, m0, g.K, g.M);
    else copy_tile<kBM, kBK>(a_tile, A, g.lda, m0, k0, g.M, g.K);
    if (TRANS_B) copy_tile<kBN, kBK>(b_tile, B, g.ldb, n0, k0, g.N, g.K);
    else copy_tile<kBK, kBN>(b_tile, B, g.ldb, k0, n0, g.K, g.N);
    __syncthreads();
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> b[2];
      for (int i = 0; i < 2; ++i) {
        const int m = wm + 16 * i, n = wn + 16 * i;  // a's rows, b's columns
        wmma::load_matrix_sync(a[i], a_tile + (TRANS_A ? kk * kLdA + m : m * kLdA + kk), kLdA);
        wmma::load_matrix_sync(b[i], b_tile + (TRANS_B ? n * kLdB + kk : kk * kLdB + n), kLdB);
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();  // the slices are overwritten next
  }

  // Epilogue: accumulators to shared memory, then each element of the tile inside C once.
  constexpr int kLdC = kBN + kCPad;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(c_tile + (wm + 16 * i) * kLdC + wn + 16 * j, acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();
  Out* C = g.C + matrix * g.stride_c;
  for (int e = threadIdx.x; e < kBM * kBN; e += kThreads) {
    const int r = e / kBN, c = e % kBN, m = m0 + r, n = n0 + c;
    if (m < g.M && n < g.N) write_out(g.alpha * c_tile[r * kLdC + c], g.beta, C + m * g.ldc + n);
  }
}

template <class In, class Out, bool TRANS_A, bool TRANS_B>
void launch_gemm_half(const Args<In, Out>& g, dim3 grid, cudaStream_t stream) {
  launch("gemm_half_kernel", gemm_half_kernel<In, Out, TRANS_A, TRANS_B>, grid, kThreads, stream, g);
}

}  // namespace

template <class In, class Out>
void gemm_half_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                               const In* A, int64_t lda, int64_t stride_a, const In* B, int64_t ldb, int64_t stride_b,
                               float beta, Out* C, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream) {
  DPCORE_CHECK(batch >= 0 && stride_a >= 0 && stride_b >= 0 && stride_c >= 0, "gemm_half: batch ", batch,
               ", strides ", stride_a, ", ", stride_b, ", ", stride_c, " must not be negative");
  check_int32("gemm_half", "M", M);
  check_int32("gemm_half", "N", N);
  check_int32("gemm_half", "K", K);
  DPCORE_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K) && ldb >= std::max<int64_t>(1, trans_b ? K : N) &&
                   ldc >= std::max<int64_t>(1, N),
               "gemm_half: leading dimensions lda ", lda, ", ldb ", ldb, ", ldc ", ldc, " too small for M ", M, ", N ",
               N, ", K ", K, (trans_a ? " (A transposed)" : ""), (trans_b ? " (B transposed)" : ""));
  DPCORE_CHECK((std::is_same_v<Out, float> || beta == 0.f || beta == 1.f), "gemm_half: beta = ", beta,
               " with a 16-bit C (which is rounded once, from the float32 result plus the old C: beta must be 0 or 1)");
  if (M == 0 || N == 0 || batch == 0) return;
  const dim3 grid(unsigned((M + kBM - 1) / kBM), unsigned((N + kBN - 1) / kBN), unsigned(batch));
  DPCORE_CHECK(grid.y <= 65535, "gemm_half: N = ", N, " needs more than 65535 column tiles");
  DPCORE_CHECK(batch <= 65535, "gemm_half: a batch of ", batch, " matrices exceeds the grid's 65535");
  // K == 0 runs the kernel too: its accumulators stay 0, so C = beta * C (or 0), as sgemm.
  const Args<In, Out> g{A, B, C, lda, ldb, ldc, stride_a, stride_b, stride_c, int(M), int(N), int(K), alpha, beta};
  if (!trans_a && !trans_b) launch_gemm_half<In, Out, false, false>(g, grid, stream);
  if (!trans_a && trans_b) launch_gemm_half<In, Out, false, true>(g, grid, stream);
  if (trans_a && !trans_b) launch_gemm_half<In, Out, true, false>(g, grid, stream);
  if (trans_a && trans_b) launch_gemm_half<In, Out, true, true>(g, grid, stream);
}

#define DPCORE_GEMM_HALF(In, Out)                                                                                   \
  template void gemm_half_strided_batched<In, Out>(bool, bool, int64_t, int64_t, int64_t, float, const In*, int64_t, \
                                                   int64_t, const In*, int64_t, int64_t, float, Out*, int64_t,      \
                                                   int64_t, int64_t, cudaStream_t);
DPCORE_GEMM_HALF(BFloat16, float)
DPCORE_GEMM_HALF(BFloat16, BFloat16)
DPCORE_GEMM_HALF(Float16, float)
DPCORE_GEMM_HALF(Float16, Float16)
#undef DPCORE_GEMM_HALF

}  // namespace dpcore::kernels::cuda
