// tanh; backward from the saved output, dx = dy (1 - y^2), so the input need not be kept.
// A 16-bit input gives a 16-bit output, computed in float32 and rounded once by the backends'
// kernels on the 16-bit tensors themselves; the backward then reads the rounded output, as
// PyTorch's does.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

namespace {

struct TanhBackward : Node {
  Tensor y;
  const char* name() const override { return "TanhBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).tanh_backward(dy, y, dx);
    return {dx};
  }
};

}  // namespace

Tensor tanh(const Tensor& x) {
  check_float_or_half_tensor("tanh", "input", x);
  Tensor y = empty_like(x);
  backend(x).tanh_forward(x, y);
  auto node = std::make_shared<TanhBackward>();
  node->y = y.detach();
  return record(node, y, {x});
}

}  // namespace dpcore::ops
