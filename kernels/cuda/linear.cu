// Linear layers (PyTorch's layout: x[N,in], W[out,in], y[N,out]) as single GEMMs on any
// SgemmFn, the hand sgemm or cuBLAS, so both engines share the exact same data flow.
#include "kernels/cuda/kernels.h"

namespace dpcore::kernels::cuda {

void linear_forward(const LinearShape& s, const float* x, const float* w, const float* bias, float* y,
                    cudaStream_t stream, SgemmFn gemm) {
  // y[N,out] = x[N,in] * W^T[in,out], accumulated onto the bias rows when there is a bias.
  if (bias) broadcast_rows(s.N, s.out, bias, y, stream);
  gemm(false, true, s.N, s.out, s.in, 1.f, x, s.in, w, s.in, bias ? 1.f : 0.f, y, s.out, stream);
}

void linear_backward_data(const LinearShape& s, const float* dy, const float* w, float* dx, cudaStream_t stream,
                          SgemmFn gemm) {
  // dx[N,in] = dy[N,out] * W[out,in]
  gemm(false, false, s.N, s.in, s.out, 1.f, dy, s.out, w, s.in, 0.f, dx, s.in, stream);
}

void linear_backward_weight(const LinearShape& s, const float* x, const float* dy, float* dw, float* dbias,
                            bool accumulate, cudaStream_t stream, SgemmFn gemm) {
  // dW[out,in] (+)= dy^T[out,N] * x[N,in]; dbias[out] (+)= column sums of dy.
  gemm(true, false, s.out, s.in, s.N, 1.f, dy, s.out, x, s.in, accumulate ? 1.f : 0.f, dw, s.in, stream);
  if (dbias) channel_sum(s.N, s.out, 1, dy, dbias, accumulate, stream);
}

}  // namespace dpcore::kernels::cuda
