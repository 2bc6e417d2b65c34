#include "engine/ops/norm_statistics.h"

#include "engine/ops/op_support.h"

namespace dpcore::ops {

DType compute_dtype(DType dtype) { return is_half_precision(dtype) ? DType::Float32 : dtype; }

Tensor empty_computed(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, compute_dtype(like.dtype()), like.device());
}

void check_statistics_tensor(const char* op, const char* what, const Tensor& x, const Tensor& t) {
  DPCORE_CHECK(t.device() == x.device(), op, ": tensors on different devices: ", what, " ", t.str(), " and input ",
               x.str());
  DPCORE_CHECK(t.dtype() == compute_dtype(x.dtype()), op, ": ", what, " ", t.str(), " must be ",
               dtype_name(compute_dtype(x.dtype())), " for input ", x.str());
}

}  // namespace dpcore::ops
