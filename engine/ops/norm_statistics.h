// How layer norm takes 16-bit tensors: the activations that autocast's ops hand on stay
// bfloat16 or float16 between ops, as in PyTorch, so the tensors the backward keeps take
// half float32's memory. The other ops between autocast's 16-bit ops (add, scale, relu,
// gelu, tanh, dropout, max and average pooling, batch norm's passes over activations) have
// 16-bit kernels of their own, written once over the element type, which widen each 16-bit
// value as they read it and round each result once as they write it. Layer norm, whose
// statistics span a row, converts whole tensors instead: each 16-bit operand widened
// (exactly) for the float32 kernel, each 16-bit result computed in float32 and rounded once
// (to nearest, ties to even). Float32 and float64 tensors pass through untouched, so the
// float32 path costs nothing. None of this records autograd: the op records its own node,
// which saves the 16-bit tensors. Internal to engine/ops/.
#pragma once

#include "engine/tensor.h"

namespace dpcore::ops {

// The dtype the kernels compute a tensor of `dtype` in: float32 for bfloat16 and float16,
// the dtype itself otherwise.
DType compute_dtype(DType dtype);
// t itself, or (bfloat16, float16) its float32 widening.
Tensor in_compute_dtype(const Tensor& t);
// An uninitialised tensor of `shape` on like's device, of compute_dtype(like.dtype()).
Tensor empty_computed(const Shape& shape, const Tensor& like);
// `computed` itself when it is already of `dtype`, else a copy rounded once to `dtype`.
Tensor stored_as(const Tensor& computed, DType dtype);

// A per-feature tensor of a norm (weight, bias, running statistics) beside input x: on x's
// device and of compute_dtype(x.dtype()), so float32 beside a 16-bit input as in PyTorch.
void check_statistics_tensor(const char* op, const char* what, const Tensor& x, const Tensor& t);

}  // namespace dpcore::ops
