// Batched matmul (attention's Q K^T and P V) as ONE strided-batched GEMM on any
// BatchedSgemmFn: the hand tiled kernel (sgemm.cu, the matrix index in blockIdx.z) or
// cuBLAS, so both engines share the data flow. The transposes are the GEMM's own flags:
// nothing is copied.
#include "kernels/cuda/kernels.h"

namespace dpcore::kernels::cuda {

void batched_matmul(const BatchedMatmulShape& s, const float* a, const float* b, float* c, cudaStream_t stream,
                    BatchedSgemmFn gemm) {
  gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.f, a, s.lda(), s.M * s.K, b, s.ldb(), s.K * s.N, 0.f, c, s.N, s.M * s.N,
       s.batch, stream);
}

}  // namespace dpcore::kernels::cuda
