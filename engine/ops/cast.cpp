// to(x, dtype): Tensor.to(dtype) between float32 and the 16-bit types (issue 27). The
// backward casts the gradient back to x's dtype, as PyTorch's does: a bfloat16 activation's
// float32 gradient is rounded to bfloat16, a float32 weight's bfloat16 gradient widened.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

namespace {

bool castable(DType from, DType to) {
  return (from == DType::Float32 && is_half_precision(to)) || (is_half_precision(from) && to == DType::Float32);
}

struct CastBackward : Node {
  DType input_dtype;
  const char* name() const override { return "ToCopyBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = Tensor::empty(dy.shape(), input_dtype, dy.device());
    backend(dy).cast(dy, dx);
    return {dx};
  }
};

}  // namespace

Tensor to(const Tensor& x, DType dtype) {
  DPCORE_CHECK(x.defined(), "to: undefined input");
  if (x.dtype() == dtype) return x;  // as PyTorch: the tensor itself, no copy
  DPCORE_CHECK(castable(x.dtype(), dtype), "to: ", x.str(), " to ", dtype_name(dtype),
               ": the casts go between float32 and bfloat16 or float16 (convert through float32)");
  Tensor y = Tensor::empty(x.shape(), dtype, x.device());
  backend(x).cast(x, y);
  auto node = std::make_shared<CastBackward>();
  node->input_dtype = x.dtype();
  return record(node, y, {x});
}

Tensor as_cast_of(const Tensor& x, Tensor cast) {
  DPCORE_CHECK(castable(x.dtype(), cast.dtype()) && x.shape() == cast.shape() && x.device() == cast.device(),
               "as_cast_of: ", cast.str(), " cannot be a cast of ", x.str());
  auto node = std::make_shared<CastBackward>();
  node->input_dtype = x.dtype();
  return record(node, cast, {x});
}

}  // namespace dpcore::ops
