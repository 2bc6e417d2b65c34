// Unfolding of one image into the matrix that turns a convolution into a GEMM (Caffe's
// im2col), and its adjoint. Internal to kernels/cpu.
#pragma once

#include <cstdint>

#include "kernels/shapes.h"

namespace dpcore::kernels::cpu {

// col[(c*R + r)*S + s][p*Q + q] = x[c][p*stride_h - pad_h + r][q*stride_w - pad_w + s], or 0 where
// that position falls in the padding. x is one image [C,H,W]; `ld` is the row stride of
// col (>= P*Q), so the columns of several images can sit side by side.
template <class T>
void im2col(const Conv2dShape& s, const T* x, T* col, int64_t ld);

// The adjoint of im2col: dx[c][h][w] = sum of the col entries that were copied from
// x[c][h][w] (overlapping windows add up). dx is one image [C,H,W] and is overwritten;
// col has row stride P*Q and is used as scratch (its padding entries are zeroed).
template <class T>
void col2im(const Conv2dShape& s, T* col, T* dx);

}  // namespace dpcore::kernels::cpu
