// OpenBLAS calls behind a row-major, int64-sized interface, and a version of the product
// split across the OpenMP threads.
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <memory>

#include "kernels/error.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

// Every BLAS call in the kernels is made from inside an OpenMP loop (one call per thread),
// so OpenBLAS's own pool would only oversubscribe the cores; its pthread build also
// serialises concurrent multi-threaded calls. Pin it to one thread, once.
static void pin_blas_to_one_thread() {
  static const bool pinned = (openblas_set_num_threads(1), true);
  (void)pinned;
}

static blasint blas_int(int64_t v, const char* what) {
  DPCORE_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " = ", v, " does not fit the 32-bit BLAS interface");
  return blasint(v);
}

static void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint M, blasint N, blasint K, float alpha,
                      const float* A, blasint lda, const float* B, blasint ldb, float beta, float* C, blasint ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
static void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint M, blasint N, blasint K, double alpha,
                      const double* A, blasint lda, const double* B, blasint ldb, double beta, double* C,
                      blasint ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  pin_blas_to_one_thread();
  // BLAS rejects a leading dimension of 0 even when K = 0 makes it irrelevant.
  blas_gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blas_int(M, "M"),
            blas_int(N, "N"), blas_int(K, "K"), alpha, A, blas_int(std::max<int64_t>(lda, 1), "lda"), B,
            blas_int(std::max<int64_t>(ldb, 1), "ldb"), beta, C, blas_int(ldc, "ldc"));
}

// How C is cut into blocks, each one BLAS call: by the product's shape alone, never by the
// thread count or by whether the caller is already inside a parallel region. OpenBLAS picks
// its kernel, and with it the order of each dot product's sums, by a call's sizes (a small
// call may take its small-matrix kernel), so an element of C is the same bits only if it
// comes out of the same call: with blocks fixed by the shape, the product is the same bits
// on 1 thread, 2 or 16. At most kMaxGemmBlocks blocks of rows or of columns (the longer
// side), each at least kMinBlockWidth wide and worth kMinParallelMacs multiply-adds.
constexpr double kMinParallelMacs = 1 << 20;
constexpr int64_t kMinBlockWidth = 64;
constexpr int64_t kMaxGemmBlocks = 16;
// Blocks of C are multiples of this many rows or columns, the width of the BLAS micro-kernels.
constexpr int64_t kBlockAlign = 16;

// The threads that share out `pieces` independent BLAS calls: one inside a caller's parallel
// region (a thread's own image, say), where the pieces run one after another on the calling
// thread: the same calls, so the same bits.
static int gemm_team(int64_t pieces) {
  return omp_in_parallel() ? 1 : int(std::min<int64_t>(kernel_threads(), pieces));
}

static int64_t gemm_blocks(int64_t M, int64_t N, int64_t K) {
  const int64_t by_work = int64_t(double(M) * double(N) * double(K) / kMinParallelMacs);
  return std::max<int64_t>(1, std::min({kMaxGemmBlocks, std::max(M, N) / kMinBlockWidth, by_work}));
}

// A product summed over more terms than its output has rows or columns (a weight gradient:
// dW = dy^T x sums over the batch's tokens) is cut along K instead, into chunks of at least
// kMinChunkDepth: cutting its small output into blocks has every block pack the whole of the
// other operand again (bert-mini's dW of 256 x 1024 over 4096 tokens, 16 blocks of 64
// columns: 78-83 GFLOP/s on one thread against 95 for one call), while each chunk packs only
// its own share of both. The first chunk's call applies beta to C; the others write partial
// products that are then added to C in chunk order, so each element is the same sum on any
// thread count. Chunks of 2048 keep one thread within 0-4% of a single call at K = 4096.
constexpr int64_t kMinChunkDepth = 2048;

static int64_t gemm_depth_chunks(int64_t M, int64_t N, int64_t K) {
  if (K <= std::max(M, N) || double(M) * double(N) * double(K) < 2 * kMinParallelMacs) return 1;
  return std::max<int64_t>(1, std::min(kMaxGemmBlocks, K / kMinChunkDepth));
}

template <class T>
static void gemm_depth_split(int64_t chunks, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                             const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const std::unique_ptr<T[]> partials(new T[size_t(chunks - 1) * size_t(M) * size_t(N)]);  // each written whole
  auto chunk = [&](int64_t c) {
    const Range k = split_range(K, int(chunks), int(c));
    const T* a = trans_a ? A + k.begin * lda : A + k.begin;  // op(A)'s columns k.begin..
    const T* b = trans_b ? B + k.begin : B + k.begin * ldb;  // op(B)'s rows k.begin..
    if (c == 0) {
      gemm(trans_a, trans_b, M, N, k.end - k.begin, alpha, a, lda, b, ldb, beta, C, ldc);
    } else {
      gemm(trans_a, trans_b, M, N, k.end - k.begin, alpha, a, lda, b, ldb, T(0), &partials[size_t(c - 1) * M * N], N);
    }
  };
  parallel_for_each(chunks, gemm_team(chunks), chunk);
  const int row_threads = gemm_team(M);
#pragma omp parallel for num_threads(row_threads) if (row_threads > 1 && M * N >= kMinParallelElements) schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    T* row = C + m * ldc;
    for (int64_t c = 1; c < chunks; ++c) {
      const T* part = &partials[(size_t(c - 1) * M + m) * N];
      for (int64_t n = 0; n < N; ++n) row[n] += part[n];
    }
  }
}

template <class T>
void gemm_parallel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const int64_t chunks = gemm_depth_chunks(M, N, K);
  if (chunks > 1) {
    gemm_depth_split(chunks, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const int64_t blocks = gemm_blocks(M, N, K);
  if (blocks == 1) {
    gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool split_rows = M > N;
  const int64_t units = ((split_rows ? M : N) + kBlockAlign - 1) / kBlockAlign;
  auto block = [&](int64_t part) {
    const Range r = split_range(units, int(blocks), int(part));
    const int64_t lo = r.begin * kBlockAlign, hi = std::min(r.end * kBlockAlign, split_rows ? M : N);
    if (split_rows) {
      const T* a = trans_a ? A + lo : A + lo * lda;
      gemm(trans_a, trans_b, hi - lo, N, K, alpha, a, lda, B, ldb, beta, C + lo * ldc, ldc);
    } else {
      const T* b = trans_b ? B + lo * ldb : B + lo;
      gemm(trans_a, trans_b, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
    }
  };
  parallel_for_each(blocks, gemm_team(blocks), block);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t);
template void gemm_parallel<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                                   int64_t, float, float*, int64_t);
template void gemm_parallel<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                    const double*, int64_t, double, double*, int64_t);

}  // namespace dpcore::kernels::cpu
