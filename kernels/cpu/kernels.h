// The CPU kernels: the reference implementation every other backend is tested against.
//
// Each function is a template instantiated for float and double (double for the float64
// finite-difference gradient checks). Conventions shared by all of them:
//   * outputs are fully overwritten, never read, except where `accumulate` says otherwise;
//   * weight/bias gradients take `accumulate`: true adds into dw/db (so the engine can
//     write straight into the persistent flat gradient buffer across micro-batches),
//     false overwrites them;
//   * every reduction runs in a fixed order, so results are bit-reproducible run to run
//     for a given thread count.
// Simple loop-nest versions of the same functions live in kernels/naive/naive.h; the tests
// hold the fast paths here against them.
#pragma once

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

namespace dpcore::kernels::cpu {

// ---- conv2d: im2col + GEMM through BLAS; for float with stride 1 on an AVX-512 CPU, a
// direct convolution (kernels/cpu/conv2d_direct.h) unless set_direct_conv2d(false). T is
// float or double; conv2d_forward and both backwards also BFloat16 and Float16
// (kernels/cpu/half/conv2d_half.cpp: float32 accumulation, each output rounded once) ----
template <class T> void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y);  // bias may be null
// y = relu(conv2d(x)), bit for bit conv2d_forward then relu_forward, in one pass over y.
template <class T> void conv2d_relu_forward(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y);
template <class T> void conv2d_backward_data(const Conv2dShape& s, const T* dy, const T* w, T* dx);
template <class T> void conv2d_backward_weight(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate);  // dbias may be null

// ---- linear: y = x W^T + b ----
template <class T> void linear_forward(const LinearShape& s, const T* x, const T* w, const T* bias, T* y);  // bias may be null
template <class T> void linear_backward_data(const LinearShape& s, const T* dy, const T* w, T* dx);
template <class T> void linear_backward_weight(const LinearShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate);  // dbias may be null

// ---- max_pool2d: argmax[i] is the flat index (h * W + w) inside the input plane of the
// element chosen for output i. Row-major scan, strictly-greater replaces (NaN wins), so
// ties go to the first element, as in PyTorch. Backward scatters dy through argmax in a
// fixed order (overlapping windows accumulate). Also on BFloat16 and Float16: the values
// compared widened, the gradients summed in float32 and each rounded once. ----
template <class T> void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, int32_t* argmax);
template <class T> void max_pool2d_backward(const Pool2dShape& s, const T* dy, const int32_t* argmax, T* dx);
// The gradient of max_pool2d(relu(.)) given relu's output relu_y (the pool's input): bit for
// bit max_pool2d_backward then relu_backward(dx, relu_y, dx), masking each plane as it is
// scattered.
template <class T> void max_pool2d_relu_backward(const Pool2dShape& s, const T* dy, const int32_t* argmax,
                                                 const T* relu_y, T* dx);

// ---- batch_norm2d over x[N,C,H,W], PyTorch's semantics, per channel c over its
// s.count() = N*H*W values, in steps, so that a synchronised batch norm can combine the
// replicas' statistics (or backward sums) between them. n = s.stats_count(): s.count(), or
// under a synchronised batch norm s.group_count, the values per channel of the whole group.
//   stats:    mean[c] and the biased variance var[c] (centred: two passes) of this x;
//   combine_stats: the group's mean[c] and biased var[c] from every replica's, gathered as
//             [replicas * 3 * C]: replica r's block at r * 3C holds count[C] (its values
//             per channel, the same number in each slot), mean[C], var[C] (biased, as
//             stats gives them). Chan et al.'s parallel combination, in rank order and in
//             double: N = sum_r n_r, mean = sum_r n_r * m_r / N, var = sum_r n_r * (v_r +
//             (m_r - mean)^2) / N, so a large mean does not cancel. Replicas with n_r = 0
//             add nothing; callers guarantee N > 0 (the CUDA kernel cannot report it). A
//             float count is exact up to 2^24 values per channel and replica;
//   finalize: invstd[c] = 1 / sqrt(var[c] + eps); when running_mean is given (training
//             with running statistics), running_mean = (1 - momentum) * running_mean +
//             momentum * mean and running_var likewise with the unbiased var * n / (n - 1);
//             eval mode calls it on the running statistics, without running_mean;
//   apply:    y = (x - mean) * invstd * weight + bias (weight, bias may be null: 1, 0);
//   backward_reduce: sum_dy[c] = sum(dy), sum_dy_xhat[c] = sum(dy * xhat) with
//             xhat = (x - mean) * invstd; dweight (+)= sum_dy_xhat and dbias (+)= sum_dy
//             under `accumulate`; every output may be null;
//   backward_apply: training, dx = weight * invstd * (dy - sum_dy / n - xhat * sum_dy_xhat / n)
//             (under a synchronised batch norm with the group's sums);
//             eval (sum_dy and sum_dy_xhat null: the statistics were constants),
//             dx = weight * invstd * dy. ----
// The steps that read or write activations (x, y, dy, dx: type X) also take them in 16 bits,
// X = BFloat16 or Float16 beside float32 statistics and parameters (S = float), as autocast
// hands a 16-bit convolution's output to a batch norm: each value is widened in registers
// and every output computed exactly as the float32 kernel computes it from the widened
// values, a 16-bit one rounded once (the bits of widening x, the float32 kernel, and
// rounding y, without the float32 copies). Otherwise X = S = float or double.
template <class X, class S = X> void batch_norm2d_stats(const BatchNorm2dShape& s, const X* x, S* mean, S* var);
template <class T> void batch_norm2d_combine_stats(const BatchNorm2dShape& s, int64_t replicas, const T* gathered,
                                                   T* mean, T* var);
template <class T> void batch_norm2d_finalize(const BatchNorm2dShape& s, const T* mean, const T* var, double eps,
                                              double momentum, T* invstd, T* running_mean, T* running_var);
template <class X, class S = X> void batch_norm2d_apply(const BatchNorm2dShape& s, const X* x, const S* mean,
                                                        const S* invstd, const S* weight, const S* bias, X* y);
template <class X, class S = X> void batch_norm2d_backward_reduce(const BatchNorm2dShape& s, const X* dy, const X* x,
                                                                  const S* mean, const S* invstd, S* sum_dy,
                                                                  S* sum_dy_xhat, S* dweight, S* dbias, bool accumulate);
template <class X, class S = X> void batch_norm2d_backward_apply(const BatchNorm2dShape& s, const X* dy, const X* x,
                                                                 const S* mean, const S* invstd, const S* weight,
                                                                 const S* sum_dy, const S* sum_dy_xhat, X* dx);

// ---- relu: backward masks with the forward OUTPUT (y > 0), so x need not be kept ----
template <class T> void relu_forward(int64_t n, const T* x, T* y);
template <class T> void relu_backward(int64_t n, const T* dy, const T* y, T* dx);

// ---- avg_pool2d: the mean of each window, PyTorch's semantics. count_include_pad (PyTorch's
// default): padding counts as zeros and every window divides by kernel_h * kernel_w;
// otherwise by its real elements. Backward is a gather: each dx element sums, in output
// order, dy / divisor of the windows holding it. ----
template <class T> void avg_pool2d_forward(const Pool2dShape& s, bool count_include_pad, const T* x, T* y);
template <class T> void avg_pool2d_backward(const Pool2dShape& s, bool count_include_pad, const T* dy, T* dx);
// ---- global average pooling (PyTorch's adaptive_avg_pool2d to 1x1): y[i] = the mean of
// plane i of x, planes of plane_size (H * W) elements; backward dx = dy[i] / plane_size
// over plane i. Both poolings also on BFloat16 and Float16: each sum formed as for float
// (in double) and each result rounded to float, then once to the 16-bit type. ----
template <class T> void global_avg_pool2d_forward(int64_t planes, int64_t plane_size, const T* x, T* y);
template <class T> void global_avg_pool2d_backward(int64_t planes, int64_t plane_size, const T* dy, T* dx);

// ---- log_softmax over the last dimension of [rows, cols], max-subtracted ----
template <class T> void log_softmax_forward(int64_t rows, int64_t cols, const T* x, T* y);
template <class T> void log_softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx);  // dx = dy - exp(y) * sum(dy)

// ---- nll loss on log-probabilities; targets are checked by the engine beforehand ----
// loss_sum[0] = sum_n -logp[n, target[n]]
template <class T> void nll_loss_forward(int64_t rows, int64_t cols, const T* logp, const int64_t* target, T* loss_sum);
// dlogp = 0 everywhere except dlogp[n, target[n]] = -grad_per_row
template <class T> void nll_loss_backward(int64_t rows, int64_t cols, T grad_per_row, const int64_t* target, T* dlogp);

// ---- fused log_softmax + nll (llm.c's fused classifier): one pass per row computes the
// loss and writes the gradient of (grad_scale * loss) w.r.t. the logits; the
// probabilities are never stored. dlogits may alias nothing else. A row whose target is
// ignore_index (PyTorch's) adds no loss and gets a zero gradient. loss[0] is the sum over
// the other rows, or, given a divisor (one int64: count_targets' count, for the mean),
// that sum times 1/divisor[0], the gradient too: a divisor of 0 (every row ignored) gives
// the NaN loss of PyTorch's 0/0 and zero gradients. ----
template <class T>
void cross_entropy_forward_backward(int64_t rows, int64_t cols, const T* logits, const int64_t* target,
                                    int64_t ignore_index, T grad_scale, const int64_t* divisor, T* loss, T* dlogits);
// counted[0] = the number of rows whose target is not ignore_index.
void count_targets(int64_t rows, const int64_t* target, int64_t ignore_index, int64_t* counted);

// ---- elementwise and reductions on flat arrays ----
template <class T> void fill(int64_t n, T value, T* y);
template <class T> void add(int64_t n, const T* a, const T* b, T* y);       // y = a + b (y may alias a or b)
template <class T> void axpy(int64_t n, T alpha, const T* x, T* y);         // y += alpha * x
template <class T> void scale(int64_t n, T alpha, const T* x, T* y);        // y = alpha * x (may alias)
template <class T> void sum(int64_t n, const T* x, T* out);                 // out[0] = sum(x), fixed (pairwise) order
template <class T> void sum_of_squares(int64_t n, const T* x, T* out);      // out[0] = sum(x * x), sum's order, in double
// x *= inv_scale; found_inf[0] = 1 when an element of x was an Inf or NaN (else unchanged).
template <class T> void unscale_and_check_finite(int64_t n, T inv_scale, T* x, T* found_inf);

// ---- SGD over whole flat buffers, torch.optim.SGD semantics:
//   g = grad + wd * p; if momentum: buf = first_step ? g : mu*buf + (1-dampening)*g;
//   g = nesterov ? g + mu*buf : buf;  p -= lr * g.   grad itself is not modified. ----
template <class T> void sgd_step(int64_t n, const SgdConfig& cfg, bool first_step, T* param, const T* grad, T* momentum);

// ---- Adam / AdamW over whole flat buffers, torch.optim.Adam(W)'s single-tensor step number
// `step` (1 for the first), each operation rounded to T in PyTorch's order:
//   Adam: g = grad + wd*p;   AdamW: p = p * (1 - lr*wd);
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + ((1-beta2)*g)*g;
//   p = p + (-lr/(1-beta1^step) * m) / (sqrt(v)/sqrt(1-beta2^step) + eps).
// The first step does not read m and v (PyTorch's zero initial state, bit for bit). Weight
// decay applies to element i where bit i of decay_mask is set (adam_decays), to every
// element when decay_mask is null. grad itself is not modified. ----
template <class T>
void adam_step(int64_t n, const AdamConfig& cfg, int64_t step, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
               const uint32_t* decay_mask);

// ---- gelu, tanh, dropout (issue 24) ----
// gelu in either of PyTorch's forms (kernels/gelu_approximate.h), in PyTorch's order of
// operations; backward reads the INPUT x and multiplies dy by the form's exact derivative.
template <class T> void gelu_forward(GeluApproximate form, int64_t n, const T* x, T* y);
template <class T> void gelu_backward(GeluApproximate form, int64_t n, const T* dy, const T* x, T* dx);
// tanh; backward from the OUTPUT: dx = dy * (1 - y * y).
// Both also on BFloat16 and Float16: float's results on the widened values, rounded once.
template <class T> void tanh_forward(int64_t n, const T* x, T* y);
template <class T> void tanh_backward(int64_t n, const T* dy, const T* y, T* dx);
// Inverted dropout of x[samples, sample_size]: y = x * (kept ? 1 / (1 - p) : 0), the mask a
// pure function of (seed, step, first_sample + sample, element) (kernels/dropout_config.h).
// The backward is the same call with dy for x: the mask is recomputed, never stored.
// Also on BFloat16 and Float16: each product formed in float32 and rounded once.
template <class T> void dropout(const DropoutConfig& cfg, int64_t samples, int64_t sample_size, const T* x, T* y);
// ---- scaled_dot_product_attention (kernels/attention_shape.h), FlashAttention-2 blocked:
// tiles of queries x tiles of keys, each tile's products a GEMM, with an online softmax,
// never a Tq x Tk matrix. The forward writes o and one log-sum-exp per query row; the
// backward recomputes the probabilities once per tile from q, k and lse: D = rowsum(dout * o),
// dS = P * (dP - D), dq = dS k scale, dk = dS^T q scale, dv = P^T dout (all of a (b, h) by
// one thread: no thread adds into another's output). key_mask [B, Tk] may be null; row_dot is scratch of
// s.rows() doubles (D, in double like the dP it is subtracted from: with a float D the exact
// cancellation of dP - D, a single key say, would leave float noise in dq and dk), the
// caller's so that the op's allocations are all it takes. ----
// T is float, double, or (autocast's attention) BFloat16 or Float16 with a float32 lse
// (statistic_t): kernels/cpu/half/attention_half.cpp widens the 16-bit operands to float32
// (exact), runs the float32 kernels and rounds each output once to T. The products of
// widened 16-bit values are exact in float32, so this is 16-bit inputs with float32
// arithmetic, as the CUDA kernels compute it.
template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, T* o,
                       statistic_t<T>* lse);
template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, const T* o,
                        const statistic_t<T>* lse, const T* dout, double* row_dot, T* dq, T* dk, T* dv);
// ---- batched_matmul: c[i] = op(a[i]) * op(b[i]) over s.batch matrix pairs (kernels/shapes.h),
// each output cut into fixed blocks of rows, one BLAS call per block, the blocks shared out
// over the threads. The cut depends on the shape only, so the result does not depend on
// the thread count. ----
template <class T> void batched_matmul(const BatchedMatmulShape& s, const T* a, const T* b, T* c);
// ---- embedding (torch.nn.functional.embedding) over n ids into a [vocab, dim] table; the
// ids are checked by the engine beforehand (Backend::check_indices).
// Forward: y[p, :] = weight[ids[p], :].
// Backward: dweight[v, :] = sum of dy[p, :] over the positions p with ids[p] == v, added in
// increasing p whatever the thread count (a counting sort of the positions by id, then one
// thread per table row); 0 for rows no position names and for row padding_idx (-1: none).
// accumulate adds onto dweight instead of overwriting it. ----
template <class T> void embedding_forward(int64_t n, int64_t dim, const int64_t* ids, const T* weight, T* y);
template <class T>
void embedding_backward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const T* dy, int64_t padding_idx,
                        T* dweight, bool accumulate);
// ---- layer_norm over the last dimension, torch.nn.functional.layer_norm(x, (cols,), w, b,
// eps) of x [rows, cols]: per row mean m and biased variance v (two passes, in double),
// rstd = 1 / sqrt(v + eps), y = (x - m) * rstd * weight + bias (weight and bias [cols],
// both or neither: null). mean and rstd [rows] are saved for the backward. Backward, with
// xhat = (x - m) * rstd and g = dy * weight: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// per row; dweight = sum over rows of dy * xhat, dbias = sum of dy, each column added in row
// order (the same bits for every thread count), written or, with accumulate, added onto the
// contents. Any of dx, dweight, dbias may be null (not wanted). X (x, y, dy, dx) is float or
// double with S = X, or BFloat16 / Float16 with S = float (weight, bias, mean, rstd and the
// parameter gradients): the float32 kernel's results on the widened values, each 16-bit
// output rounded once. ----
template <class X, class S = X>
void layer_norm_forward(int64_t rows, int64_t cols, const X* x, const S* weight, const S* bias, double eps, X* y,
                        S* mean, S* rstd);
template <class X, class S = X>
void layer_norm_backward(int64_t rows, int64_t cols, const X* dy, const X* x, const S* weight, const S* mean,
                         const S* rstd, X* dx, S* dweight, S* dbias, bool accumulate);

// ---- softmax(x + mask) over the last dimension, the mask (null: none) broadcast and the
// causal limit applied as kernels/softmax_mask.h says; max-subtracted, in double for double
// and in float for float (libmvec's vector expf, float lane sums: softmax.cpp). A row
// masked everywhere is NaN (PyTorch's softmax of all -inf). Backward from the output:
// dx = y * (dy - sum(dy * y)) per row; the mask takes no gradient. ----
template <class T>
void softmax_forward(const SoftmaxShape& s, const T* x, const T* mask, T* y);
template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx);

// Whether float stride-1 convolutions may take the direct path (default true); false
// keeps every convolution on im2col + GEMM, for benchmarking one against the other.
void set_direct_conv2d(bool enabled);

// Threads used by the CPU kernels (OpenMP loops and OpenBLAS). 0 = library default.
void set_num_threads(int threads);
int num_threads();
// The calling thread's own cap on its kernels' threads (0: none, the process-wide count
// above holds): a pipeline stage's thread sets its team's size, so that stages running at
// once each use their own cores instead of all of them (engine/cpu_team.h). The smaller of
// the two counts holds. num_threads() on that thread says what its kernels use.
void set_calling_thread_threads(int threads);

// ---- transpose: x [outer, A, mid, B, inner] -> y [outer, B, mid, A, inner] (kernels/transpose_shape.h) ----
template <class T> void transpose(const TransposeShape& s, const T* x, T* y);

}  // namespace dpcore::kernels::cpu
