// Straightforward loop-nest versions of the CPU kernels that have a fast path (conv2d and
// linear through BLAS, the pooling): each output element is computed on its own, from its
// definition, with a double accumulator. They are slow and obviously right; the tests hold
// the fast kernels (and other backends) against them. Same signatures and conventions as
// kernels/cpu/kernels.h.
#pragma once

#include <cstdint>

#include "kernels/dropout_config.h"
#include "kernels/gelu_approximate.h"
#include "kernels/attention_shape.h"
#include "kernels/shapes.h"
#include "kernels/softmax_mask.h"
#include "kernels/transpose_shape.h"

namespace dpcore::kernels::naive {

template <class T> void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y);
template <class T> void conv2d_backward_data(const Conv2dShape& s, const T* dy, const T* w, T* dx);
template <class T> void conv2d_backward_weight(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate);

template <class T> void linear_forward(const LinearShape& s, const T* x, const T* w, const T* bias, T* y);
template <class T> void linear_backward_data(const LinearShape& s, const T* dy, const T* w, T* dx);
template <class T> void linear_backward_weight(const LinearShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate);

template <class T> void max_pool2d_forward(const Pool2dShape& s, const T* x, T* y, int32_t* argmax);
template <class T> void max_pool2d_backward(const Pool2dShape& s, const T* dy, const int32_t* argmax, T* dx);

// count_include_pad: the divisor is kernel_h * kernel_w (padding counts as zeros) or the
// window's real elements.
template <class T> void avg_pool2d_forward(const Pool2dShape& s, bool count_include_pad, const T* x, T* y);
template <class T> void avg_pool2d_backward(const Pool2dShape& s, bool count_include_pad, const T* dy, T* dx);

// ---- gelu, tanh, dropout (issue 24): each element from its definition ----
// gelu backward: d/dx of the chosen form (kernels/gelu_approximate.h), times dy.
template <class T> void gelu_forward(GeluApproximate form, int64_t n, const T* x, T* y);
template <class T> void gelu_backward(GeluApproximate form, int64_t n, const T* dy, const T* x, T* dx);
// tanh backward from the output: dx = dy (1 - y^2).
template <class T> void tanh_forward(int64_t n, const T* x, T* y);
template <class T> void tanh_backward(int64_t n, const T* dy, const T* y, T* dx);
// x[samples, sample_size]: y = x * (kept ? 1 / (1 - p) : 0), one Philox call per element
// (kernels/dropout_config.h). Also the backward, with dy for x.
template <class T> void dropout(const DropoutConfig& cfg, int64_t samples, int64_t sample_size, const T* x, T* y);
// ---- scaled_dot_product_attention (kernels/attention_shape.h): the explicit formula with the
// Tq x Tk probabilities of each (batch, head) materialised; key_mask may be null. The
// backward recomputes everything from q, k, v (dout: the gradient of o). ----
template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, T* o, T* lse);
template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, const T* dout,
                        T* dq, T* dk, T* dv);
// ---- batched_matmul: c[i] = op(a[i]) * op(b[i]) (kernels/shapes.h) ----
template <class T> void batched_matmul(const BatchedMatmulShape& s, const T* a, const T* b, T* c);
// ---- embedding (kernels/cpu/kernels.h has the contract) ----
template <class T> void embedding_forward(int64_t n, int64_t dim, const int64_t* ids, const T* weight, T* y);
template <class T>
void embedding_backward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const T* dy, int64_t padding_idx,
                        T* dweight, bool accumulate);
// ---- layer_norm over the last dimension of x [rows, cols] (kernels/cpu/kernels.h has the
// contract). ----
template <class T> void layer_norm_forward(int64_t rows, int64_t cols, const T* x, const T* weight, const T* bias, double eps, T* y, T* mean, T* rstd);
template <class T> void layer_norm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx, T* dweight, T* dbias, bool accumulate);

// ---- softmax(x + mask) over the last dimension (kernels/softmax_mask.h). ----
template <class T> void softmax_forward(const SoftmaxShape& s, const T* x, const T* mask, T* y);
template <class T> void softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx);

// ---- transpose: x [outer, A, mid, B, inner] -> y [outer, B, mid, A, inner] (kernels/transpose_shape.h) ----
template <class T> void transpose(const TransposeShape& s, const T* x, T* y);

}  // namespace dpcore::kernels::naive
