// linear and batched_matmul with 16-bit tensors (issue 27) on a 16-bit GEMM (the
// tensor-core kernel of gemm_half.cu, or cuBLAS's through the engine dispatch), the CPU's data flow (kernels/cpu/half/matmul_half.cpp): every output
// 16-bit, each rounded once from its float32 result. The bias rows are copied into y
// first and the product added to them (beta 1); the bias gradient is each column of dy
// summed in float32, in row order (no atomics: the same bits every run).
#include "kernels/half_types.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

// y[r, c] = bias[c], grid-stride over the rows x cols elements.
template <class H>
__global__ void broadcast_rows_half_kernel(int64_t rows, int64_t cols, const H* bias, H* y) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bias[i % cols];
}

// dbias[c] (+)= the sum of column c of dy[rows, cols]: a thread per column, walking the
// rows in order (neighbouring threads read neighbouring columns: coalesced).
template <class H>
__global__ void column_sum_half_kernel(int64_t rows, int64_t cols, const H* dy, H* dbias, bool accumulate) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    float total = accumulate ? to_float(dbias[c]) : 0.f;
    for (int64_t r = 0; r < rows; ++r) total += to_float(dy[r * cols + c]);
    dbias[c] = from_float<H>(total);
  }
}

}  // namespace

template <class H>
void linear_forward_half(const LinearShape& s, const H* x, const H* w, const H* bias, H* y, cudaStream_t stream,
                         HalfGemmFn<H, H> gemm) {
  if (bias && s.N * s.out > 0)
    launch("broadcast_rows_half_kernel", broadcast_rows_half_kernel<H>, blocks_for(s.N * s.out, kElementwiseThreads),
           kElementwiseThreads, stream, s.N, s.out, bias, y);
  gemm(false, true, s.N, s.out, s.in, 1.f, x, s.in, 0, w, s.in, 0, bias ? 1.f : 0.f, y, s.out, 0, 1, stream);
}

template <class H>
void linear_backward_data_half(const LinearShape& s, const H* dy, const H* w, H* dx, cudaStream_t stream,
                               HalfGemmFn<H, H> gemm) {
  gemm(false, false, s.N, s.in, s.out, 1.f, dy, s.out, 0, w, s.in, 0, 0.f, dx, s.in, 0, 1, stream);
}

template <class H>
void linear_backward_weight_half(const LinearShape& s, const H* x, const H* dy, H* dw, H* dbias, bool accumulate,
                                 cudaStream_t stream, HalfGemmFn<H, H> gemm) {
  gemm(true, false, s.out, s.in, s.N, 1.f, dy, s.out, 0, x, s.in, 0, accumulate ? 1.f : 0.f, dw, s.in, 0, 1, stream);
  if (dbias && s.out > 0)
    launch("column_sum_half_kernel", column_sum_half_kernel<H>, blocks_for(s.out, kElementwiseThreads),
           kElementwiseThreads, stream, s.N, s.out, dy, dbias, accumulate);
}

template <class H>
void batched_matmul_half(const BatchedMatmulShape& s, const H* a, const H* b, H* c, cudaStream_t stream,
                         HalfGemmFn<H, H> gemm) {
  gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.f, a, s.lda(), s.M * s.K, b, s.ldb(), s.K * s.N, 0.f, c, s.N, s.M * s.N,
       s.batch, stream);
}

#define DPCORE_LINEAR_HALF(H)                                                                                      \
  template void linear_forward_half<H>(const LinearShape&, const H*, const H*, const H*, H*, cudaStream_t,        \
                                       HalfGemmFn<H, H>);                                                          \
  template void linear_backward_data_half<H>(const LinearShape&, const H*, const H*, H*, cudaStream_t,            \
                                             HalfGemmFn<H, H>);                                                    \
  template void linear_backward_weight_half<H>(const LinearShape&, const H*, const H*, H*, H*, bool, cudaStream_t, \
                                               HalfGemmFn<H, H>);                                                  \
  template void batched_matmul_half<H>(const BatchedMatmulShape&, const H*, const H*, H*, cudaStream_t,           \
                                       HalfGemmFn<H, H>);
DPCORE_LINEAR_HALF(BFloat16)
DPCORE_LINEAR_HALF(Float16)
#undef DPCORE_LINEAR_HALF

}  // namespace dpcore::kernels::cuda
