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

// Products smaller than this many multiply-adds are not worth waking other threads for.
constexpr double kMinParallelMacs = 1 << 20;
// Blocks of C are multiples of this many rows or columns, the width of the BLAS micro-kernels.
constexpr int64_t kBlockAlign = 16;

template <class T>
void gemm_parallel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const bool split_rows = M > N;
  const int64_t units = ((split_rows ? M : N) + kBlockAlign - 1) / kBlockAlign;
  const int parts = int(std::min<int64_t>(kernel_threads(), units));
  if (parts <= 1 || omp_in_parallel() || double(M) * N * K < kMinParallelMacs) {
    gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int part = 0; part < parts; ++part) {
    Range r = split_range(units, parts, part);
    int64_t lo = r.begin * kBlockAlign, hi = std::min(r.end * kBlockAlign, split_rows ? M : N);
    if (split_rows) {
      const T* a = trans_a ? A + lo : A + lo * lda;
      gemm(trans_a, trans_b, hi - lo, N, K, alpha, a, lda, B, ldb, beta, C + lo * ldc, ldc);
    } else {
      const T* b = trans_b ? B + lo * ldb : B + lo;
      gemm(trans_a, trans_b, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
    }
  }
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
