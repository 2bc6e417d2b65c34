// log_softmax over the last dimension; backward from the saved output.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct LogSoftmaxBackward : Node {
  Tensor y;
  const char* name() const override { return "LogSoftmaxBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).log_softmax_backward(dy, y, dx);
    return {dx};
  }
};


Tensor log_softmax(const Tensor& x) {
  // 16-bit logits are widened first: log_softmax computes and hands on float32, as
  // autocast's float32 list has it (docs/mixed-precision.md).
  if (x.defined() && is_half_precision(x.dtype())) return log_softmax(to(x, DType::Float32));
  check_float_tensor("log_softmax", "input", x, 2);
  DPCORE_CHECK(x.size(1) > 0, "log_softmax: input ", shape_str(x.shape()), " has no classes");
  Tensor y = empty_like(x);
  backend(x).log_softmax_forward(x, y);
  auto node = std::make_shared<LogSoftmaxBackward>();
  node->y = y.detach();
  return record(node, y, {x});
}

}  // namespace dpcore::ops
