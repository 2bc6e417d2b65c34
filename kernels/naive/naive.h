// Straightforward loop-nest versions of the CPU kernels that have a fast path (conv2d and
// linear through BLAS, the pooling): each output element is computed on its own, from its
// definition, with a double accumulator. They are slow and obviously right; the tests hold
// the fast kernels (and other backends) against them. Same signatures and conventions as
// kernels/cpu/kernels.h.
#pragma once

#include <cstdint>

#include "kernels/shapes.h"
#include "kernels/softmax_mask.h"

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

// ---- layer_norm over the last dimension of x [rows, cols] (kernels/cpu/kernels.h has the
// contract). ----
template <class T> void layer_norm_forward(int64_t rows, int64_t cols, const T* x, const T* weight, const T* bias, double eps, T* y, T* mean, T* rstd);
template <class T> void layer_norm_backward(int64_t rows, int64_t cols, const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx, T* dweight, T* dbias, bool accumulate);

// ---- softmax(x + mask) over the last dimension (kernels/softmax_mask.h). ----
template <class T> void softmax_forward(const SoftmaxShape& s, const T* x, const T* mask, T* y);
template <class T> void softmax_backward(int64_t rows, int64_t cols, const T* dy, const T* y, T* dx);

}  // namespace dpcore::kernels::naive
