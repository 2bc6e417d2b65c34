// relu; backward masks with the forward output, so the input need not be kept. A 16-bit
// input gives a 16-bit output, computed natively by the backends: relu commutes with
// rounding, so both passes are the float32 op rounded once, exactly, without the
// float32 temporaries.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct ReluBackward : Node {
  Tensor y;
  const char* name() const override { return "ReluBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).relu_backward(dy, y, dx);
    return {dx};
  }
};


Tensor relu(const Tensor& x) {
  check_float_or_half_tensor("relu", "input", x);
  Tensor y = empty_like(x);
  backend(x).relu_forward(x, y);
  auto node = std::make_shared<ReluBackward>();
  node->y = y.detach();
  return record(node, y, {x});
}

}  // namespace dpcore::ops
