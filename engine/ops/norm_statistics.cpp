#include "engine/ops/float32_compute.h"

#include "engine/ops/op_support.h"

namespace dpcore::ops {

DType compute_dtype(DType dtype) { return is_half_precision(dtype) ? DType::Float32 : dtype; }

Tensor in_compute_dtype(const Tensor& t) {
  if (!t.defined() || !is_half_precision(t.dtype())) return t;
  Tensor wide = Tensor::empty(t.shape(), DType::Float32, t.device());
  backend(t).cast(t, wide);
  return wide;
}

Tensor empty_computed(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, compute_dtype(like.dtype()), like.device());
}

Tensor stored_as(const Tensor& computed, DType dtype) {
  if (computed.dtype() == dtype) return computed;
  Tensor stored = Tensor::empty(computed.shape(), dtype, computed.device());
  backend(computed).cast(computed, stored);
  return stored;
}

void check_statistics_tensor(const char* op, const char* what, const Tensor& x, const Tensor& t) {
  DPCORE_CHECK(t.device() == x.device(), op, ": tensors on different devices: ", what, " ", t.str(), " and input ",
               x.str());
  DPCORE_CHECK(t.dtype() == compute_dtype(x.dtype()), op, ": ", what, " ", t.str(), " must be ",
               dtype_name(compute_dtype(x.dtype())), " for input ", x.str());
}

}  // namespace dpcore::ops
