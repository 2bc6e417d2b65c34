// add, scale, sum and mean over whole tensors. add and scale take 16-bit tensors too: each
// result computed in float32 and rounded once, by the backends' kernels.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct AddBackward : Node {
  const char* name() const override { return "AddBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override { return {dy, dy}; }
};

struct ScaleBackward : Node {
  double factor = 1.0;
  const char* name() const override { return "ScaleBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).scale(factor, dy, dx);
    return {dx};
  }
};

struct SumBackward : Node {
  Shape input_shape;
  double factor = 1.0;  // 1 for sum, 1/n for mean
  const char* name() const override { return "SumBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    // Broadcast the scalar gradient: dx = dy * factor everywhere, as a tensor filled with
    // `factor` scaled by dy on the device (scale_by keeps it capture-safe: no host read of dy).
    Tensor ones = Tensor::full(input_shape, factor, dy.dtype(), dy.device());
    Tensor dx = Tensor::empty(input_shape, dy.dtype(), dy.device());
    backend(dy).scale_by(dy, ones, dx);
    return {dx};
  }
};


Tensor add(const Tensor& a, const Tensor& b) {
  check_float_or_half_tensor("add", "a", a);
  check_float_or_half_tensor("add", "b", b);
  // PyTorch's type promotion: a 16-bit tensor meets a float32 one (or the other 16-bit
  // type) in float32, as a transformer's residual adds do under autocast. (float64 with a
  // 16-bit type is refused below, as a mixed dtype.)
  const bool mixed_with_half = a.dtype() != b.dtype() && (is_half_precision(a.dtype()) || is_half_precision(b.dtype()));
  if (mixed_with_half && a.dtype() != DType::Float64 && b.dtype() != DType::Float64)
    return add(to(a, DType::Float32), to(b, DType::Float32));
  check_same_device_dtype("add", a, b);
  DPCORE_CHECK(a.shape() == b.shape(), "add: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
               " differ (add does not broadcast)");
  Tensor y = empty_like(a);
  backend(a).add(a, b, y);
  return record(std::make_shared<AddBackward>(), y, {a, b});
}

Tensor scale(const Tensor& x, double factor) {
  check_float_or_half_tensor("scale", "input", x);
  Tensor y = empty_like(x);
  backend(x).scale(factor, x, y);
  auto node = std::make_shared<ScaleBackward>();
  node->factor = factor;
  return record(node, y, {x});
}

static Tensor reduce_all(const char* op, const Tensor& x, bool mean) {
  check_float_tensor(op, "input", x);
  DPCORE_CHECK(!mean || x.numel() > 0, op, ": mean of an empty tensor ", shape_str(x.shape()));
  Tensor y = Tensor::empty({}, x.dtype(), x.device());
  backend(x).sum(x, y);
  double factor = mean ? 1.0 / double(x.numel()) : 1.0;
  if (mean) backend(x).scale(factor, y, y);
  auto node = std::make_shared<SumBackward>();
  node->input_shape = x.shape(), node->factor = factor;
  return record(node, y, {x});
}

Tensor sum(const Tensor& x) { return reduce_all("sum", x, false); }
Tensor mean(const Tensor& x) { return reduce_all("mean", x, true); }

}  // namespace dpcore::ops
