// Batched matmul (attention's Q K^T and P V) as ONE strided-batched GEMM on any
// BatchedSgemmFn: the hand tiled kernel (sgemm.cu, the matrix index in blockIdx.z) or
// cuBLAS, so both engines share the data flow. The transposes are the GEMM's own flags:
// nothing is copied.
#include <algorithm>

#include "kernels/cuda/kernels.h"

namespace dpcore::kernels::cuda {

void batched_matmul(const BatchedMatmulShape& s, const float* a, const float* b, float* c, cudaStream_t stream,
                    BatchedSgemmFn gemm) {
  // BLAS wants leading dimensions of at least 1 even where K = 0 leaves nothing to read
  // (the row length of a, or of a transposed b, is then 0).
  const int64_t lda = std::max<int64_t>(s.lda(), 1), ldb = std::max<int64_t>(s.ldb(), 1);
  gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.f, a, lda, s.M * s.K, b, ldb, s.K * s.N, 0.f, c, s.N, s.M * s.N, s.batch,
       stream);
}

}  // namespace dpcore::kernels::cuda
