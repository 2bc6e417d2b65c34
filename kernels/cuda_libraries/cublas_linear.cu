#include "kernels/cuda_libraries/cublas_linear.h"

#include <cublas_v2.h>

#include <type_traits>

#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_libraries/engine_config.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_runtime/library_handles.h"

namespace dpcore::kernels::cuda_libraries::cublas {

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream) {
  for (int64_t v : {M, N, K, lda, ldb, ldc}) kernels::cuda::check_int32("cublas sgemm", "a dimension", v);
  if (M == 0 || N == 0) return;
  cublasHandle_t handle = cuda_runtime::cublas_handle(cuda_runtime::current_device(), stream);
  // cuBLAS is column-major: the row-major C[M,N] is the column-major C^T[N,M] = op(B)^T op(A)^T,
  // and a row-major matrix read column-major is its transpose. So swap A and B and keep
  // each one's transpose flag.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasComputeType_t compute = engine_config().tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, int(N), int(M), int(K), &alpha, B, CUDA_R_32F, int(ldb), A, CUDA_R_32F,
                            int(lda), &beta, C, CUDA_R_32F, int(ldc), compute, CUBLAS_GEMM_DEFAULT));
}

// batched_matmul
void sgemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                           int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                           float* C, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream) {
  for (int64_t v : {M, N, K, lda, ldb, ldc, batch}) kernels::cuda::check_int32("cublas batched sgemm", "a dimension", v);
  if (M == 0 || N == 0 || batch == 0) return;
  cublasHandle_t handle = cuda_runtime::cublas_handle(cuda_runtime::current_device(), stream);
  // Row-major to column-major as in sgemm: A and B swap places, each keeps its flag and stride.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasComputeType_t compute = engine_config().tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op_b, op_a, int(N), int(M), int(K), &alpha, B, CUDA_R_32F, int(ldb),
                                          stride_b, A, CUDA_R_32F, int(lda), stride_a, &beta, C, CUDA_R_32F, int(ldc),
                                          stride_c, int(batch), compute, CUBLAS_GEMM_DEFAULT));
}

namespace {
template <class T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, kernels::BFloat16>) return CUDA_R_16BF;
  else if constexpr (std::is_same_v<T, kernels::Float16>) return CUDA_R_16F;
  else return CUDA_R_32F;
}
}  // namespace

template <class In, class Out>
void gemm_half_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                               const In* A, int64_t lda, int64_t stride_a, const In* B, int64_t ldb, int64_t stride_b,
                               float beta, Out* C, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream) {
  for (int64_t v : {M, N, K, lda, ldb, ldc, batch}) kernels::cuda::check_int32("cublas 16-bit gemm", "a dimension", v);
  if (M == 0 || N == 0 || batch == 0) return;
  cublasHandle_t handle = cuda_runtime::cublas_handle(cuda_runtime::current_device(), stream);
  // Row-major to column-major as in sgemm: A and B swap places, each keeps its flag and stride.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, op_b, op_a, int(N), int(M), int(K), &alpha, B, data_type<In>(),
                                          int(ldb), stride_b, A, data_type<In>(), int(lda), stride_a, &beta, C,
                                          data_type<Out>(), int(ldc), stride_c, int(batch), CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
}

#define DPCORE_CUBLAS_GEMM_HALF(In, Out)                                                                                \
  template void gemm_half_strided_batched<In, Out>(bool, bool, int64_t, int64_t, int64_t, float, const In*, int64_t, \
                                                   int64_t, const In*, int64_t, int64_t, float, Out*, int64_t,       \
                                                   int64_t, int64_t, cudaStream_t);
DPCORE_CUBLAS_GEMM_HALF(kernels::BFloat16, float)
DPCORE_CUBLAS_GEMM_HALF(kernels::BFloat16, kernels::BFloat16)
DPCORE_CUBLAS_GEMM_HALF(kernels::Float16, float)
DPCORE_CUBLAS_GEMM_HALF(kernels::Float16, kernels::Float16)
#undef DPCORE_CUBLAS_GEMM_HALF

}  // namespace dpcore::kernels::cuda_libraries::cublas
