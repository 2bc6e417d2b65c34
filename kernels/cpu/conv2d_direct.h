// conv2d, float, as a direct convolution in AVX-512 registers: the CPU backend's fast path
// for the 3x3 layers of the ResNets, whose 16 output channels make im2col + GEMM a thin
// GEMM that OpenBLAS runs far below peak (docs/benchmarks.md). conv2d.cpp takes it where
// the *_applies functions below say so and keeps im2col + GEMM everywhere else (strides
// other than 1 outside the weight gradient, double, shallow layers, CPUs without AVX-512,
// or when turned off). Internal to kernels/cpu.
#pragma once

#include <cstdint>

#include "kernels/cpu/parallel.h"
#include "kernels/shapes.h"

namespace dpcore::kernels::cpu {

// Which passes of shape `s` the direct path computes: an AVX-512 CPU, direct convolutions
// not turned off (set_direct_conv2d), at least 32 multiply-adds per value (C*R*S for the
// forward and the weight gradient, K*R*S for backward data), at least 8 output channels
// in the forward-style passes (K for the forward, C for backward data), stride 1 in both axes
// for the forward and backward data (the weight gradient takes any stride). The
// backward-data pass is the forward of dy with the flipped kernel, padded by R-1-pad_h
// and S-1-pad_w, so it also needs pad_h <= R-1 and pad_w <= S-1.
bool direct_conv2d_forward_applies(const Conv2dShape& s);
bool direct_conv2d_backward_data_applies(const Conv2dShape& s);
bool direct_conv2d_backward_weight_applies(const Conv2dShape& s);

// y = conv2d(x) + bias, then relu when `relu`; bias may be null. Images spread over the threads.
void direct_conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, bool relu,
                           float* y);
// dx = the gradient of conv2d with respect to x.
void direct_conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx);
// grad[K, depth] = [dW | dbias] (depth = C*R*S + 1) or dW alone (depth = C*R*S), summed over
// images [r.begin, r.end) in order, on the calling thread.
void direct_conv2d_weight_grad(const Conv2dShape& s, const float* x, const float* dy, Range r, int64_t depth,
                               float* grad);

}  // namespace dpcore::kernels::cpu
