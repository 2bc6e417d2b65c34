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
#include "kernels/dropout_config.h"
#include "kernels/gelu_approximate.h"
#include "kernels/half_types.h"
#include "kernels/attention_shape.h"
#include "kernels/sgd_config.h"
#include "kernels/shapes.h"
#include "kernels/softmax_mask.h"
#include "kernels/transpose_shape.h"

namespace dpcore::kernels::cuda {

// ---- general matrix product on row-major matrices ----
// C[M,N] = alpha * op(A) * op(B) + beta * C, op(A) = A[M,K] (or A[K,M] transposed when
// trans_a), op(B) = B[K,N] (or B[N,K] transposed). beta == 0 never reads C.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream);
// Anything with sgemm's signature: the hand kernel above, or cuBLAS (kernels/cuda_libraries/cublas_linear.h).
using SgemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                         float, float*, int64_t, cudaStream_t);
// sgemm on `batch` matrix triples, matrix i at A + i * stride_a, B + i * stride_b,
// C + i * stride_c (cublasSgemmStridedBatched's contract, row-major): the same tiled kernel
// with the matrix index in the grid's z. sgemm is the batch of one.
void sgemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                           int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                           float* C, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream);

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
// The same two for 16-bit tensors (H = BFloat16 or Float16), the rounding done once: the
// bias written into y[o, c, i] = bias[c] before a GEMM or convolution adds its product onto
// it (beta 1, one rounding of the sum), and out[c] (+)= the sum over o, then i, in float32,
// rounded once (a thread per channel: the CPU's order and bits).
template <class H>
void broadcast_channels_half(int64_t outer, int64_t channels, int64_t inner, const H* bias, H* y, cudaStream_t stream);
template <class H>
void channel_sum_half(int64_t outer, int64_t channels, int64_t inner, const H* x, H* out, bool accumulate,
                      cudaStream_t stream);

// ---- max_pool2d: argmax is the int32 index h * W + w inside the input plane, as on the
// CPU (row-major scan, strictly greater replaces, NaN wins). Backward is a gather: each
// input element sums, in output order, the dy of the windows whose argmax it is. X is
// float, BFloat16 or Float16 (compared widened; the gather sums in float32, each dx
// rounded once). ----
template <class X>
void max_pool2d_forward(const Pool2dShape& s, const X* x, X* y, int32_t* argmax, cudaStream_t stream);
template <class X>
void max_pool2d_backward(const Pool2dShape& s, const X* dy, const int32_t* argmax, X* dx, cudaStream_t stream);
// The pool's backward fused with the backward of the relu before it: dx = gather * (relu_y > 0),
// where relu_y is the relu's output (the pool's input).
void max_pool2d_relu_backward(const Pool2dShape& s, const float* dy, const int32_t* argmax, const float* relu_y,
                              float* dx, cudaStream_t stream);

// ---- batch_norm2d in the CPU's steps (kernels/cpu/kernels.h has the formulas). The
// per-channel sums take one block per channel, fixed-order tree sums; the mean is summed
// shifted by the channel's first value and the variance centred, so float does not cancel
// it. combine_stats takes one thread per channel, in double over the replicas in rank
// order; finalize and backward_apply take n = s.stats_count(). The steps over activations
// take x, y, dy and dx as X = float, BFloat16 or Float16 (the statistics and parameters
// float): a 16-bit value is widened in registers and each 16-bit output rounded once, the
// bits of the float32 kernel on the widened tensors. ----
template <class X>
void batch_norm2d_stats(const BatchNorm2dShape& s, const X* x, float* mean, float* var, cudaStream_t stream);
void batch_norm2d_combine_stats(const BatchNorm2dShape& s, int64_t replicas, const float* gathered, float* mean,
                                float* var, cudaStream_t stream);
void batch_norm2d_finalize(const BatchNorm2dShape& s, const float* mean, const float* var, float eps, float momentum,
                           float* invstd, float* running_mean, float* running_var, cudaStream_t stream);
template <class X>
void batch_norm2d_apply(const BatchNorm2dShape& s, const X* x, const float* mean, const float* invstd,
                        const float* weight, const float* bias, X* y, cudaStream_t stream);
template <class X>
void batch_norm2d_backward_reduce(const BatchNorm2dShape& s, const X* dy, const X* x, const float* mean,
                                  const float* invstd, float* sum_dy, float* sum_dy_xhat, float* dweight, float* dbias,
                                  bool accumulate, cudaStream_t stream);
template <class X>
void batch_norm2d_backward_apply(const BatchNorm2dShape& s, const X* dy, const X* x, const float* mean,
                                 const float* invstd, const float* weight, const float* sum_dy,
                                 const float* sum_dy_xhat, X* dx, cudaStream_t stream);

// ---- relu (backward masks with the forward output, as on the CPU). X is float, BFloat16
// or Float16: the float32 rules on the widened values, rounded back (exactly), the CPU's bits.
template <class X>
void relu_forward(int64_t n, const X* x, X* y, cudaStream_t stream);
template <class X>
void relu_backward(int64_t n, const X* dy, const X* y, X* dx, cudaStream_t stream);

// ---- avg_pool2d as on the CPU: count_include_pad divides every window by kernel_h *
// kernel_w (padding counts as zeros), otherwise by its real elements. Backward is a gather:
// each input element sums, in output order, dy / divisor of the windows holding it. ----
template <class X>
void avg_pool2d_forward(const Pool2dShape& s, bool count_include_pad, const X* x, X* y, cudaStream_t stream);
template <class X>
void avg_pool2d_backward(const Pool2dShape& s, bool count_include_pad, const X* dy, X* dx, cudaStream_t stream);
// ---- global average pooling (adaptive_avg_pool2d to 1x1): y[i] = mean of plane i, a warp
// per plane with a fixed-order tree sum; backward dx = dy[i] / plane_size over plane i.
// Both poolings: X is float, BFloat16 or Float16 (sums in float32, each result rounded once). ----
template <class X>
void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const X* x, X* y, cudaStream_t stream);
template <class X>
void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const X* dy, X* dx, cudaStream_t stream);

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
// One pass per row: loss[0] = sum of row losses, dlogits = grad_scale * (softmax - onehot).
// The probabilities are never stored. Rows whose target is ignore_index add nothing and get
// a zero gradient; divisor (null, or one int64 on the device: count_targets' count) divides
// the loss and the gradient, as kernels/cpu/kernels.h says.
void cross_entropy_forward_backward(int64_t rows, int64_t cols, const float* logits, const int64_t* target,
                                    int64_t ignore_index, float grad_scale, const int64_t* divisor, float* loss,
                                    float* dlogits, cudaStream_t stream);
// counted[0] = the number of rows whose target is not ignore_index (one block, a fixed tree).
void count_targets(int64_t rows, const int64_t* target, int64_t ignore_index, int64_t* counted, cudaStream_t stream);

// ---- elementwise and reductions on flat arrays ----
template <class T>
void fill(int64_t n, T value, T* y, cudaStream_t stream);  // T = float, int32_t, int64_t
// y = a + b, y may alias a or b. X is float, BFloat16 or Float16: a 16-bit sum is formed in
// float32 and rounded once to nearest even (a 16-bit allreduce's reduction step, the CPU's bits).
template <class X>
void add(int64_t n, const X* a, const X* b, X* y, cudaStream_t stream);
void axpy(int64_t n, float alpha, const float* x, float* y, cudaStream_t stream);    // y += alpha * x
// y = alpha * x, may alias; X is float, BFloat16 or Float16 (the product in float32, rounded once).
template <class X>
void scale(int64_t n, float alpha, const X* x, X* y, cudaStream_t stream);
// y = s[0] * x with s a one-element device array (a captured graph reads its current value).
void scale_by(int64_t n, const float* s, const float* x, float* y, cudaStream_t stream);
// x *= inv_scale; *found_inf = 1 when an element of x was an Inf or NaN (else unchanged).
void unscale_and_check_finite(int64_t n, float inv_scale, float* x, float* found_inf, cudaStream_t stream);
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

// ---- gelu, tanh, dropout (issue 24), as on the CPU. X is float, BFloat16 or Float16: a
// 16-bit output is the float32 formula on the widened values, rounded once. ----
// gelu in either form (kernels/gelu_approximate.h); backward reads the input x.
template <class X>
void gelu_forward(GeluApproximate form, int64_t n, const X* x, X* y, cudaStream_t stream);
template <class X>
void gelu_backward(GeluApproximate form, int64_t n, const X* dy, const X* x, X* dx, cudaStream_t stream);
// tanh; backward from the output: dx = dy * (1 - y * y).
template <class X>
void tanh_forward(int64_t n, const X* x, X* y, cudaStream_t stream);
template <class X>
void tanh_backward(int64_t n, const X* dy, const X* y, X* dx, cudaStream_t stream);
// Inverted dropout of x[samples, sample_size], the same mask bits as the CPU's
// (kernels/dropout_config.h); the backward is the same call with dy for x. X is float,
// BFloat16 or Float16 (the product in float32, rounded once).
template <class X>
void dropout(const DropoutConfig& cfg, int64_t samples, int64_t sample_size, const X* x, X* y, cudaStream_t stream);
// ---- scaled_dot_product_attention (kernels/attention_shape.h), FlashAttention-2 style: the
// forward writes o and one log-sum-exp per query row; the backward recomputes the
// probabilities tile by tile (dq over query tiles, dk and dv over key tiles: no atomics).
// row_dot: scratch of s.rows() floats (D = rowsum(dout * o)). key_mask [B, Tk] may be null.
// T is float, BFloat16 or Float16 (autocast's 16-bit attention): 16-bit operands are
// widened as read, the arithmetic is float32, each output rounded once; lse stays float32.
// The head dimension is bounded at compile time: d > kAttentionMaxHeadDim fails, naming it. ----
constexpr int kAttentionMaxHeadDim = 64;
template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, T* o, float* lse,
                       cudaStream_t stream);
template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, const T* o,
                        const float* lse, const T* dout, float* row_dot, T* dq, T* dk, T* dv, cudaStream_t stream);
// ---- batched_matmul: c[i] = op(a[i]) * op(b[i]) (kernels/shapes.h), on any
// BatchedSgemmFn: the hand sgemm_strided_batched or cuBLAS's ----
using BatchedSgemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t,
                                const float*, int64_t, int64_t, float, float*, int64_t, int64_t, int64_t, cudaStream_t);
void batched_matmul(const BatchedMatmulShape& s, const float* a, const float* b, float* c, cudaStream_t stream,
                    BatchedSgemmFn gemm = sgemm_strided_batched);
// ---- embedding, as kernels/cpu/kernels.h embedding_*: the forward gathers table rows (an
// id outside [0, vocab) gives NaN here; the backend reports it through
// kernels/cuda_runtime/target_check.h). The backward is deterministic without atomics: one
// block sorts the positions by id (count, scan, stable scatter), then a block per table row
// sums that row's positions in increasing order, so neither the grid nor the run changes a
// bit. Ids outside [0, vocab) are left out of the sums. ----
void embedding_forward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const float* weight, float* y,
                       cudaStream_t stream);
void embedding_backward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const float* dy,
                        int64_t padding_idx, float* dweight, bool accumulate, cudaStream_t stream);
// ---- layer_norm over the last dimension of x [rows, cols], as kernels/cpu/kernels.h
// layer_norm_forward / layer_norm_backward, in float with fixed reduction orders (a warp
// per row; the parameter gradients through a workspace of per-chunk column partials). X is
// float, BFloat16 or Float16 (x, y, dy, dx; each 16-bit output rounded once), beside float32
// weight, bias, statistics and parameter gradients. ----
template <class X>
void layer_norm_forward(int64_t rows, int64_t cols, const X* x, const float* weight, const float* bias, float eps,
                        X* y, float* mean, float* rstd, cudaStream_t stream);
template <class X>
void layer_norm_backward(int64_t rows, int64_t cols, const X* dy, const X* x, const float* weight, const float* mean,
                         const float* rstd, X* dx, float* dweight, float* dbias, bool accumulate, cudaStream_t stream);

// ---- softmax(x + mask) over the last dimension, as kernels/cpu/kernels.h softmax_forward /
// softmax_backward, in float: a warp per row, an online max and sum in one pass. ----
void softmax_forward(const SoftmaxShape& s, const float* x, const float* mask, float* y, cudaStream_t stream);
void softmax_backward(int64_t rows, int64_t cols, const float* dy, const float* y, float* dx, cudaStream_t stream);

// ---- transpose, as on the CPU: T is float, BFloat16 or Float16 ----
template <class T>
void transpose(const TransposeShape& s, const T* x, T* y, cudaStream_t stream);

// ---- mixed precision (issue 27): 16-bit storage (kernels/half_types.h) ----
// C = alpha * op(A) op(B) + beta * C over `batch` matrix triples (sgemm_strided_batched's
// contract, row-major), A and B 16-bit (In = BFloat16 or Float16), multiplied on tensor cores
// (WMMA m16n16k16) and accumulated in float32; C is float (beta applies; beta == 0 never reads
// C) or In (rounded once to nearest even from the float32 result, plus the old C when
// beta is 1; beta must be 0 or 1), as kernels/cpu/half/gemm_half.h.
// Instantiated for (BFloat16, float), (BFloat16, BFloat16), (Float16, float), (Float16, Float16).
template <class In, class Out>
void gemm_half_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                               const In* A, int64_t lda, int64_t stride_a, const In* B, int64_t ldb, int64_t stride_b,
                               float beta, Out* C, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream);
// Anything with that contract: the hand kernel above, or cuBLAS's (kernels/cuda_libraries/cublas_linear.h).
template <class In, class Out>
using HalfGemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const In*, int64_t, int64_t, const In*,
                            int64_t, int64_t, float, Out*, int64_t, int64_t, int64_t, cudaStream_t);
// y[i] = x[i] converted: float32 to BFloat16 / Float16 rounded to nearest even (NaN kept a
// quiet NaN, as kernels/half_types.h), or back exactly. One pass: the master weights'
// low-precision copy is made by one such launch over the flat buffer.
// Instantiated for float -> BFloat16, float -> Float16, BFloat16 -> float, Float16 -> float.
template <class From, class To>
void cast(int64_t n, const From* x, To* y, cudaStream_t stream);
// linear and batched_matmul with 16-bit tensors (H = BFloat16 or Float16) on a HalfGemmFn
// (the hand GEMM above unless given cuBLAS's): every output H, rounded once; the contracts
// of the float32 versions (bias and dbias may be null; accumulate adds onto dw and dbias).
template <class H>
void linear_forward_half(const LinearShape& s, const H* x, const H* w, const H* bias, H* y, cudaStream_t stream,
                         HalfGemmFn<H, H> gemm = gemm_half_strided_batched<H, H>);
template <class H>
void linear_backward_data_half(const LinearShape& s, const H* dy, const H* w, H* dx, cudaStream_t stream,
                               HalfGemmFn<H, H> gemm = gemm_half_strided_batched<H, H>);
template <class H>
void linear_backward_weight_half(const LinearShape& s, const H* x, const H* dy, H* dw, H* dbias, bool accumulate,
                                 cudaStream_t stream, HalfGemmFn<H, H> gemm = gemm_half_strided_batched<H, H>);
template <class H>
void batched_matmul_half(const BatchedMatmulShape& s, const H* a, const H* b, H* c, cudaStream_t stream,
                         HalfGemmFn<H, H> gemm = gemm_half_strided_batched<H, H>);
// conv2d with 16-bit tensors (conv2d_half.cu): im2col into a workspace, then the GEMM
// above; every output H, rounded once from its float32 value (dx's overlapping windows
// added in float32 first); the contracts of the float32 versions.
template <class H>
void conv2d_forward_half(const Conv2dShape& s, const H* x, const H* w, const H* bias, H* y, cudaStream_t stream);
template <class H>
void conv2d_backward_data_half(const Conv2dShape& s, const H* dy, const H* w, H* dx, cudaStream_t stream);
template <class H>
void conv2d_backward_weight_half(const Conv2dShape& s, const H* x, const H* dy, H* dw, H* dbias, bool accumulate,
                                 cudaStream_t stream);

}  // namespace dpcore::kernels::cuda
