// The statistics and parameters of the norms beside 16-bit activations. The activations
// that autocast's ops hand on stay bfloat16 or float16 between ops, as in PyTorch, so the
// tensors the backward keeps take half float32's memory; the ops between autocast's 16-bit
// ops (add, scale, relu, gelu, tanh, dropout, max and average pooling, batch and layer
// norm) have 16-bit kernels, written once over the element type, which widen each 16-bit
// value as they read it, compute in float32 and round each result once as they write it.
// A norm's statistics, weight, bias and running statistics stay float32 beside them, as
// PyTorch's mixed-type norms keep them. Internal to engine/ops/.
#pragma once

#include "engine/tensor.h"

namespace dpcore::ops {

// The dtype the kernels compute a tensor of `dtype` in: float32 for bfloat16 and float16,
// the dtype itself otherwise.
DType compute_dtype(DType dtype);
// An uninitialised tensor of `shape` on like's device, of compute_dtype(like.dtype()).
Tensor empty_computed(const Shape& shape, const Tensor& like);

// A per-feature tensor of a norm (weight, bias, running statistics) beside input x: on x's
// device and of compute_dtype(x.dtype()), so float32 beside a 16-bit input as in PyTorch.
void check_statistics_tensor(const char* op, const char* what, const Tensor& x, const Tensor& t);

}  // namespace dpcore::ops
