// OpenBLAS calls behind a row-major, int64-sized interface, and a version of the product
// split across the OpenMP threads.
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>

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

static int64_t gemm_blocks(int64_t M, int64_t N, int64_t K) {
  const int64_t by_work = int64_t(double(M) * double(N) * double(K) / kMinParallelMacs);
  return std::max<int64_t>(1, std::min({kMaxGemmBlocks, std::max(M, N) / kMinBlockWidth, by_work}));
}

template <class T>
void gemm_parallel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
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
  // Inside a caller's parallel region (a thread's own image, say) the blocks run one after
  // another on the calling thread: the same calls, so the same bits.
  const int threads = omp_in_parallel() ? 1 : int(std::min<int64_t>(kernel_threads(), blocks));
#pragma omp parallel for num_threads(threads) if (threads > 1) schedule(static, 1)
  for (int64_t part = 0; part < blocks; ++part) block(part);
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
