// linear and batched_matmul with 16-bit tensors (issue 27) on a 16-bit GEMM (the
// tensor-core kernel of gemm_half.cu, or cuBLAS's through the engine dispatch), the CPU's
// data flow (kernels/cpu/half/matmul_half.cpp): every output 16-bit, each rounded once
// from its float32 result. The bias rows are copied into y first and the product added to
// them (beta 1); the bias gradient is each column of dy summed in float32, in row order
// (bias.cu: no atomics, the same bits every run).
#include "kernels/cuda/kernels.h"
#include "kernels/half_types.h"

namespace dpcore::kernels::cuda {

template <class H>
void linear_forward_half(const LinearShape& s, const H* x, const H* w, const H* bias, H* y, cudaStream_t stream,
                         HalfGemmFn<H, H> gemm) {
  if (bias) broadcast_channels_half(s.N, s.out, 1, bias, y, stream);
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
  if (dbias) channel_sum_half(s.N, s.out, 1, dy, dbias, accumulate, stream);
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
