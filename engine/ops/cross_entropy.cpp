// cross_entropy: log_softmax + nll_loss fused in one pass (the probabilities are never
// stored), over logits [..., C] with targets [...], PyTorch's ignore_index and reductions.
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

// logits [..., C] and target [...] int64 on one device, every target in [0, C) or
// ignore_index. Two-dimensional logits keep the checks nll_loss shares.
static void check_cross_entropy_inputs(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  const char* op = "cross_entropy";
  check_float_tensor(op, "input", logits);
  DPCORE_CHECK(logits.dim() >= 1, op, ": input must have a class dimension, got ", logits.str());
  DPCORE_CHECK(target.defined() && target.dtype() == DType::Int64, op, ": target must be an int64 tensor, got ",
               target.str());
  const Shape classes_dropped(logits.shape().begin(), logits.shape().end() - 1);
  DPCORE_CHECK(target.shape() == classes_dropped, op, ": input ", shape_str(logits.shape()),
               " (classes last) needs target ", shape_str(classes_dropped), ", got ", shape_str(target.shape()));
  DPCORE_CHECK(target.device() == logits.device(), op, ": input on ", logits.device().str(), " but target on ",
               target.device().str());
  DPCORE_CHECK(target.numel() > 0, op, ": empty batch ", shape_str(logits.shape()));
  backend(logits).check_indices(kernels::IndexCheck{op, "target", "row", logits.size(-1), ignore_index}, target);
}

Tensor cross_entropy_count(const Tensor& target, int64_t ignore_index) {
  DPCORE_CHECK(target.defined() && target.dtype() == DType::Int64,
               "cross_entropy_count: target must be an int64 tensor, got ", target.str());
  Tensor counted = Tensor::empty({}, DType::Int64, target.device());
  backend(target).count_targets(target, ignore_index, counted);
  return counted;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction, int64_t ignore_index) {
  // 16-bit logits are widened first: the loss is float32, as autocast's float32 list has it.
  if (logits.defined() && is_half_precision(logits.dtype()))
    return cross_entropy(to(logits, DType::Float32), target, reduction, ignore_index);
  check_cross_entropy_inputs(logits, target, ignore_index);
  // The mean divides by the count of targets that are not ignored, which stays on the
  // device (no sync; a captured graph reads each batch's): 0 of them give PyTorch's NaN.
  const Tensor counted = reduction == Reduction::Mean ? cross_entropy_count(target, ignore_index) : Tensor();
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  bool want_grad = autograd::grad_mode_enabled() && logits.requires_grad();
  Tensor dlogits = empty_like(logits);  // without a gradient wanted: the kernel's scratch
  backend(logits).cross_entropy_forward_backward(logits, target, ignore_index, counted.defined() ? &counted : nullptr,
                                                 loss, dlogits);
  auto node = std::make_shared<CrossEntropyBackward>();
  if (want_grad) node->dlogits = dlogits;
  return record(node, loss, {logits, target});
}

}  // namespace dpcore::ops
