// The hand-written CUDA kernels (float32). Same contracts as the CPU reference in
// kernels/cpu/kernels.h, which the tests hold them to:
//   * outputs are fully overwritten, never read, except where `accumulate` says otherwise;
//   * every reduction runs in a fixed order (no float atomics), so results are
//     bit-reproducible run to run on a given GPU;
//   * everything is queued on `stream`, of the current device, and nothing waits for it,
//     so a whole training step can be captured into a CUDA graph.
// Sizes must fit in int32 index arithmetic (checked; an error names the op and shape).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/adam_config.h"
#include "kernels/sgd_config.h"
#include "kernels/shapes.h"

namespace dpcore::kernels::cuda {

// ---- general matrix product on row-major matrices ----
// C[M,N] = alpha * op(A) * op(B) + beta * C, op(A) = A[M,K] (or A[K,M] transposed when
// trans_a), op(B) = B[K,N] (or B[N,K] transposed). beta == 0 never reads C.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream);
// Anything with sgemm's signature: the hand kernel above, or cuBLAS (kernels/cuda_libraries/cublas_linear.h).
using SgemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                         float, float*, int64_t, cudaStream_t);

// ---- linear: y = x W^T + b, built on an SgemmFn ----
void linear_forward(const LinearShape& s, const float* x, const float* w, const float* bias, float* y,
                    cudaStream_t stream, SgemmFn gemm = sgemm);  // bias may be null
void linear_backward_data(const LinearShape& s, const float* dy, const float* w, float* dx, cudaStream_t stream,
                          SgemmFn gemm = sgemm);
void linear_backward_weight(const LinearShape& s, const float* x, const float* dy, float* dw, float* dbias,
                            bool accumulate, cudaStream_t stream, SgemmFn gemm = sgemm);  // dbias may be null

// ---- conv2d as tiled implicit GEMM (no im2col buffer) ----
void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                    cudaStream_t stream);  // bias may be null
// The same with relu applied in the epilogue: y = relu(conv(x, w) + bias), one pass over y.
void conv2d_relu_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                              cudaStream_t stream);
void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx, cudaStream_t stream);
void conv2d_backward_weight(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* dbias,
                            bool accumulate, cudaStream_t stream);  // dbias may be null

// ---- bias helpers, shared by the hand and the library engines ----
// y[r, c] = bias[c] for every row (the linear layer then accumulates its GEMM on top).
void broadcast_rows(int64_t rows, int64_t cols, const float* bias, float* y, cudaStream_t stream);
// y[n, k, :] = act(y[n, k, :] + bias[k]) over NCHW with `inner` = H*W; bias may be null.
void bias_activation(int64_t N, int64_t channels, int64_t inner, const float* bias, bool relu, float* y,
                     cudaStream_t stream);
// out[c] (+)= sum over o, i of x[(o * channels + c) * inner + i]: the bias gradient of conv2d
// (outer = N, inner = P*Q) and of linear (outer = N, inner = 1).
void channel_sum(int64_t outer, int64_t channels, int64_t inner, const float* x, float* out, bool accumulate,
                 cudaStream_t stream);

// ---- max_pool2d: argmax is the int32 index h * W + w inside the input plane, as on the
// CPU (row-major scan, strictly greater replaces, NaN wins). Backward is a gather: each
// input element sums, in output order, the dy of the windows whose argmax it is. ----
void max_pool2d_forward(const Pool2dShape& s, const float* x, float* y, int32_t* argmax, cudaStream_t stream);
void max_pool2d_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, float* dx,
                         cudaStream_t stream);
// The pool's backward fused with the backward of the relu before it: dx = gather * (relu_y > 0),
// where relu_y is the relu's output (the pool's input).
void max_pool2d_relu_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, const float* relu_y,
                              float* dx, cudaStream_t stream);

// ---- batch_norm2d in the CPU's steps (kernels/cpu/kernels.h has the formulas). The
// per-channel sums take one block per channel, fixed-order tree sums; the mean is summed
// shifted by the channel's first value and the variance centred, so float does not cancel
// it. combine_stats takes one thread per channel, in double over the replicas in rank
// order; finalize and backward_apply take n = s.stats_count(). ----
void batch_norm2d_stats(const BatchNorm2dShape& s, const float* x, float* mean, float* var, cudaStream_t stream);
void batch_norm2d_combine_stats(const BatchNorm2dShape& s, int64_t replicas, const float* gathered, float* mean,
                                float* var, cudaStream_t stream);
void batch_norm2d_finalize(const BatchNorm2dShape& s, const float* mean, const float* var, float eps, float momentum,
                           float* invstd, float* running_mean, float* running_var, cudaStream_t stream);
void batch_norm2d_apply(const BatchNorm2dShape& s, const float* x, const float* mean, const float* invstd,
                        const float* weight, const float* bias, float* y, cudaStream_t stream);
void batch_norm2d_backward_reduce(const BatchNorm2dShape& s, const float* dy, const float* x, const float* mean,
                                  const float* invstd, float* sum_dy, float* sum_dy_xhat, float* dweight, float* dbias,
                                  bool accumulate, cudaStream_t stream);
void batch_norm2d_backward_apply(const BatchNorm2dShape& s, const float* dy, const float* x, const float* mean,
                                 const float* invstd, const float* weight, const float* sum_dy,
                                 const float* sum_dy_xhat, float* dx, cudaStream_t stream);

// ---- relu (backward masks with the forward output, as on the CPU) ----
void relu_forward(int64_t n, const float* x, float* y, cudaStream_t stream);
void relu_backward(int64_t n, const float* dy, const float* y, float* dx, cudaStream_t stream);

// ---- avg_pool2d as on the CPU: count_include_pad divides every window by kernel_h *
// kernel_w (padding counts as zeros), otherwise by its real elements. Backward is a gather:
// each input element sums, in output order, dy / divisor of the windows holding it. ----
void avg_pool2d_forward(const Pool2dShape& s, bool count_include_pad, const float* x, float* y,
                        cudaStream_t stream);
void avg_pool2d_backward(const Pool2dShape& s, bool count_include_pad, const float* dy, float* dx,
                         cudaStream_t stream);
// ---- global average pooling (adaptive_avg_pool2d to 1x1): y[i] = mean of plane i, a warp
// per plane with a fixed-order tree sum; backward dx = dy[i] / plane_size over plane i. ----
void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const float* x, float* y, cudaStream_t stream);
void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const float* dy, float* dx,
                                cudaStream_t stream);

// ---- log_softmax over the last dim of [rows, cols], nll loss, fused cross-entropy ----
void log_softmax_forward(int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t stream);
void log_softmax_backward(int64_t rows, int64_t cols, const float* dy, const float* y, float* dx,
                          cudaStream_t stream);
// loss_sum[0] = sum_n -logp[n, target[n]]. A target outside [0, cols) gives NaN here; the
// backend reports it through kernels/cuda_runtime/target_check.h.
void nll_loss_forward(int64_t rows, int64_t cols, const float* logp, const int64_t* target, float* loss_sum,
                      cudaStream_t stream);
// dlogp = -grad_per_row[0] at each target, 0 elsewhere; grad_per_row lives on the device.
void nll_loss_backward(int64_t rows, int64_t cols, const float* grad_per_row, const int64_t* target, float* dlogp,
                       cudaStream_t stream);
// One pass per row: loss_sum[0] = sum of row losses, dlogits = grad_scale * (softmax - onehot).
// The probabilities are never stored.
void cross_entropy_forward_backward(int64_t rows, int64_t cols, const float* logits, const int64_t* target,
                                    float grad_scale, float* loss_sum, float* dlogits, cudaStream_t stream);

// ---- elementwise and reductions on flat arrays ----
template <class T>
void fill(int64_t n, T value, T* y, cudaStream_t stream);  // T = float, int32_t, int64_t
void add(int64_t n, const float* a, const float* b, float* y, cudaStream_t stream);  // y may alias a or b
void axpy(int64_t n, float alpha, const float* x, float* y, cudaStream_t stream);    // y += alpha * x
void scale(int64_t n, float alpha, const float* x, float* y, cudaStream_t stream);   // y = alpha * x, may alias
// y = s[0] * x with s a one-element device array (a captured graph reads its current value).
void scale_by(int64_t n, const float* s, const float* x, float* y, cudaStream_t stream);
// out[0] = sum(x): fixed partition into block sums, then one block adds those in order.
void sum(int64_t n, const float* x, float* out, cudaStream_t stream);
// out[0] = sum(x * x), in sum's order (the squares in the first pass).
void sum_of_squares(int64_t n, const float* x, float* out, cudaStream_t stream);

// ---- one SGD step over flat buffers in ONE launch, torch.optim.SGD semantics exactly as
// kernels/cpu/kernels.h sgd_step (same rounding of every operation). momentum may be null
// when cfg.momentum == 0. ----
void sgd_step(int64_t n, const SgdConfig& cfg, bool first_step, float* param, const float* grad, float* momentum,
              cudaStream_t stream);

// ---- one Adam / AdamW step over flat buffers in ONE launch, torch.optim.Adam(W) semantics
// exactly as kernels/cpu/kernels.h adam_step (same rounding of every operation). ----
void adam_step(int64_t n, const AdamConfig& cfg, int64_t step, float* param, const float* grad, float* exp_avg,
               float* exp_avg_sq, const uint32_t* decay_mask, cudaStream_t stream);

}  // namespace dpcore::kernels::cuda
