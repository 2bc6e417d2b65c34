// cuBLAS as the library GEMM engine, with the hand sgemm's row-major signature
// (kernels::cuda::SgemmFn) so the linear layers run unchanged on either.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dpcore::kernels::cuda_libraries::cublas {

// C[M,N] = alpha * op(A) op(B) + beta * C on row-major matrices (see kernels::cuda::sgemm).
// FP32 compute, or TF32 tensor cores when engine_config().tf32 is on.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream);

}  // namespace dpcore::kernels::cuda_libraries::cublas
