// softmax(x + mask) over the last dimension, with an optional causal limit; backward from the
// saved output. The mask is a constant: it gets no gradient.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct SoftmaxBackward : Node {
  Tensor y;
  const char* name() const override { return "SoftmaxBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).softmax_backward(dy, y, dx);
    return {dx};
  }
};

Tensor softmax(const Tensor& x, const Tensor& mask, bool causal) {
  // 16-bit scores are widened first: softmax computes and hands on float32, as autocast's
  // float32 list has it (docs/mixed-precision.md).
  if (x.defined() && is_half_precision(x.dtype())) return softmax(to(x, DType::Float32), mask, causal);
  check_float_tensor("softmax", "input", x);
  if (mask.defined()) check_same_device_dtype("softmax", x, mask);
  const Shape mask_shape = mask.defined() ? mask.shape() : Shape();
  const kernels::SoftmaxShape s = kernels::softmax_shape(x.shape(), mask.defined() ? &mask_shape : nullptr, causal);
  Tensor y = empty_like(x);
  backend(x).softmax_forward(s, x, mask, y);
  auto node = std::make_shared<SoftmaxBackward>();
  node->y = y.detach();
  return record(node, y, {x});
}

}  // namespace dpcore::ops
