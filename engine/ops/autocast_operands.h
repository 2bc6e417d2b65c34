// How an op that autocast runs in 16 bits (engine/autocast.h) takes its operands. Internal
// to engine/ops/. The op starts with
//
//   if (auto low = autocast_dtype_for({x, w, bias})) {
//     AutocastScope off(DType::Float32);  // the op itself, once, on 16-bit operands
//     return linear(lowered(x, *low), lowered(w, *low), lowered(bias, *low));
//   }
//
// and hands on its 16-bit result, as PyTorch's autocast does. Every cast is an ops::to, so
// the backward runs the same casts the other way: the 16-bit gradients of float32 operands
// are widened into their float32 gradients (a parameter's reaches the float32 master
// gradient buffer).
#pragma once

#include <initializer_list>
#include <optional>

#include "engine/autocast.h"
#include "engine/tensor.h"

namespace dpcore::ops {

// The 16-bit dtype the op computes in: autocast_dtype() when a scope is open, every
// defined operand is float32 or that dtype, and at least one is float32 (operands already
// all 16-bit run as they are; float64 is never cast, as in PyTorch). nullopt otherwise.
std::optional<DType> autocast_dtype_for(std::initializer_list<Tensor> operands);
// to(t, dtype), an undefined tensor (no bias) left undefined.
Tensor lowered(const Tensor& t, DType dtype);

}  // namespace dpcore::ops
