// nll_loss on log-probabilities, mean or sum over the batch.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct NllLossBackward : Node {
  Tensor target;
  Shape logp_shape;
  double divisor = 1.0;  // N for the mean, 1 for the sum
  const char* name() const override { return "NllLossBackward"; }
  std::vector<Tensor> apply(const Tensor& dloss) override {
    // Each row's gradient is dloss / divisor, computed on the device so that a captured
    // CUDA graph reads the seed's current value.
    Tensor per_row = empty_like(dloss);
    backend(dloss).scale(1.0 / divisor, dloss, per_row);
    Tensor dlogp = Tensor::empty(logp_shape, dloss.dtype(), dloss.device());
    backend(dloss).nll_loss_backward(per_row, target, dlogp);
    return {dlogp, Tensor()};
  }
};


Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction reduction) {
  // 16-bit log-probabilities are widened first: the loss is float32, as autocast's float32
  // list has it.
  if (logp.defined() && is_half_precision(logp.dtype())) return nll_loss(to(logp, DType::Float32), target, reduction);
  check_loss_inputs("nll_loss", logp, target);
  Tensor loss = Tensor::empty({}, logp.dtype(), logp.device());
  backend(logp).nll_loss_forward(logp, target, loss);
  double divisor = reduction == Reduction::Mean ? double(logp.size(0)) : 1.0;
  if (divisor != 1.0) backend(logp).scale(1.0 / divisor, loss, loss);
  auto node = std::make_shared<NllLossBackward>();
  node->target = target, node->logp_shape = logp.shape(), node->divisor = divisor;
  return record(node, loss, {logp, target});
}

}  // namespace dpcore::ops
