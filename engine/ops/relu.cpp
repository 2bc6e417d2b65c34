// relu; backward masks with the forward output, so the input need not be kept.
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
  check_float_tensor("relu", "input", x);
  Tensor y = empty_like(x);
  backend(x).relu_forward(x, y);
  auto node = std::make_shared<ReluBackward>();
  node->y = y.detach();
  return record(node, y, {x});
}

}  // namespace dpcore::ops
