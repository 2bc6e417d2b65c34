// cross_entropy: log_softmax + nll_loss fused in one pass (the probabilities are never stored).
#include "engine/ops/op_support.h"

namespace dpcore::ops {

// The fused kernel computes the gradient in the forward pass (for a unit seed); the
// backward only rescales it by the incoming gradient.
struct CrossEntropyBackward : Node {
  Tensor dlogits;
  const char* name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(const Tensor& dloss) override {
    Tensor dx = empty_like(dlogits);
    backend(dloss).scale_by(dloss, dlogits, dx);
    return {dx, Tensor()};
  }
};


Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction) {
  check_loss_inputs("cross_entropy", logits, target);
  double divisor = reduction == Reduction::Mean ? double(logits.size(0)) : 1.0;
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  bool want_grad = autograd::grad_mode_enabled() && logits.requires_grad();
  Tensor dlogits = want_grad ? empty_like(logits) : Tensor();
  if (want_grad) {
    backend(logits).cross_entropy_forward_backward(logits, target, 1.0 / divisor, loss, dlogits);
  } else {
    Tensor scratch = empty_like(logits);
    backend(logits).cross_entropy_forward_backward(logits, target, 1.0 / divisor, loss, scratch);
  }
  if (divisor != 1.0) backend(logits).scale(1.0 / divisor, loss, loss);
  auto node = std::make_shared<CrossEntropyBackward>();
  node->dlogits = dlogits;
  return record(node, loss, {logits, target});
}

}  // namespace dpcore::ops
