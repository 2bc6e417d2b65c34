#include "engine/ops/autocast_operands.h"

#include "engine/ops.h"

namespace dpcore::ops {

std::optional<DType> autocast_dtype_for(std::initializer_list<Tensor> operands) {
  const DType low = autocast_dtype();
  if (low == DType::Float32) return std::nullopt;
  bool any_float32 = false;
  for (const Tensor& t : operands) {
    if (!t.defined()) continue;
    if (t.dtype() != DType::Float32 && t.dtype() != low) return std::nullopt;
    any_float32 = any_float32 || t.dtype() == DType::Float32;
  }
  if (!any_float32) return std::nullopt;
  return low;
}

Tensor lowered(const Tensor& t, DType dtype) { return t.defined() ? to(t, dtype) : t; }

}  // namespace dpcore::ops
