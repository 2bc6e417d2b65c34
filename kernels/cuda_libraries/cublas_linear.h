// cuBLAS as the library GEMM engine, with the hand sgemm's row-major signature
// (kernels::cuda::SgemmFn) so the linear layers run unchanged on either.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/half_types.h"

namespace dpcore::kernels::cuda_libraries::cublas {

// C[M,N] = alpha * op(A) op(B) + beta * C on row-major matrices (see kernels::cuda::sgemm).
// FP32 compute, or TF32 tensor cores when engine_config().tf32 is on.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream);

// batched_matmul: sgemm on `batch` matrix triples at fixed strides (kernels::cuda::
// sgemm_strided_batched's signature), one cublasGemmStridedBatchedEx call, the
// cublasSgemmStridedBatched product with the same FP32/TF32 choice as sgemm.
void sgemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                           int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                           float* C, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream);

// The 16-bit GEMM (kernels::cuda::gemm_half_strided_batched's contract and signature, so
// the 16-bit linear layers and batched_matmul run on either): A and B bfloat16 or float16,
// products accumulated in float32 (CUBLAS_COMPUTE_32F, tensor cores), C float32 or the
// inputs' type, rounded once from the float32 result (the handles disallow cuBLAS's
// reduced-precision split-K reductions, kernels/cuda_runtime/library_handles.cu).
// Instantiated for the four (In, Out) pairs of the hand GEMM.
template <class In, class Out>
void gemm_half_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                               const In* A, int64_t lda, int64_t stride_a, const In* B, int64_t ldb, int64_t stride_b,
                               float beta, Out* C, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream);

}  // namespace dpcore::kernels::cuda_libraries::cublas
