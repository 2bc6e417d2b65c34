#include "engine/low_precision_parameters.h"

#include "engine/backend.h"
#include "engine/ops.h"

namespace dpcore {

LowPrecisionParameters::LowPrecisionParameters(const FlatParameters& master, DType dtype) : master_(master) {
  DPCORE_CHECK(master.dtype() == DType::Float32, "low-precision parameters: the master weights must be float32, got ",
               dtype_name(master.dtype()));
  DPCORE_CHECK(is_half_precision(dtype), "low-precision parameters: the copy is bfloat16 or float16, not ",
               dtype_name(dtype));
  values_ = Tensor::empty({master.total()}, dtype, master.device());
}

void LowPrecisionParameters::refresh() { backend_for(values_.device()).cast(master_.values(), values_); }

Tensor LowPrecisionParameters::param(size_t i) const {
  const FlatParameters::Entry& e = master_.entries().at(i);
  Tensor view = Tensor::view_of(values_.storage(), size_t(e.offset) * dtype_size(dtype()), e.shape, dtype());
  return ops::as_cast_of(master_.param(i), view);
}

}  // namespace dpcore
