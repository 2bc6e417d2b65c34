// Row-major matrix products through OpenBLAS. Internal to kernels/cpu.
#pragma once

#include <cstdint>

namespace dpcore::kernels::cpu {

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major, op = transpose when the
// flag is set. Runs on the calling thread: the kernels call it from inside their own
// OpenMP loops, so OpenBLAS is kept single-threaded (see threads.cpp).
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// The same product with C cut into blocks of rows or columns (whichever dimension is
// longer) by its shape alone, the blocks shared out over the OpenMP threads (or run one
// after another inside a parallel region); a product deeper than its output is wide (K
// above M and N: a weight gradient) is cut along K instead, its partial products added in
// a fixed order. Each element of C comes out of the same BLAS calls and sums whatever the
// thread count, so the result depends neither on timing nor on the number of threads.
template <class T>
void gemm_parallel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

}  // namespace dpcore::kernels::cpu
