// linear: y = x W^T + b over any leading dimensions of x (torch.nn.functional.linear), and
// its backward. x[..., in] is contiguous, so the kernels read it as the matrix
// [prod(...), in] without a copy, and y[..., out] likewise.
#include "engine/ops/autocast_operands.h"
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct LinearBackward : Node {
  LinearShape s;
  Tensor x, w;
  bool has_bias = false;
  const char* name() const override { return "LinearBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    std::vector<Tensor> grads(3);
    if (needs_grad(*this, 0)) {
      grads[0] = empty_like(x);
      backend(dy).linear_backward_data(s, dy, w, grads[0]);
    }
    if (needs_grad(*this, 1) || (has_bias && needs_grad(*this, 2))) {
      WeightGrads g = weight_grads(*this, w, has_bias ? s.out : 0);
      backend(dy).linear_backward_weight(s, x, dy, g.dw, has_bias ? &g.db : nullptr, g.accumulate);
      return_weight_grads(*this, g, grads);
    }
    return grads;
  }
};


Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (auto low = autocast_dtype_for({x, w, bias})) {  // the 16-bit kernels, float32 accumulation
    AutocastScope off(DType::Float32);
    return linear(lowered(x, *low), lowered(w, *low), lowered(bias, *low));
  }
  check_float_or_half_tensor("linear", "input", x);
  check_float_or_half_tensor("linear", "weight", w, 2);
  check_same_device_dtype("linear", x, w);
  DPCORE_CHECK(x.dim() >= 1, "linear: input ", shape_str(x.shape()), " must have at least 1 dimension (its features)");
  DPCORE_CHECK(x.size(-1) == w.size(1), "linear: input ", shape_str(x.shape()), " has ", x.size(-1),
               " features but weight ", shape_str(w.shape()), " expects ", w.size(1));
  if (bias.defined()) {
    check_same_device_dtype("linear", x, bias);
    DPCORE_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "linear: bias ", shape_str(bias.shape()),
                 " does not match ", w.size(0), " output features");
  }
  Shape y_shape = x.shape();
  y_shape.back() = w.size(0);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  LinearShape s{rows, x.size(-1), w.size(0)};
  Tensor y = Tensor::empty(y_shape, x.dtype(), x.device());
  backend(x).linear_forward(s, x, w, bias.defined() ? &bias : nullptr, y);
  auto node = std::make_shared<LinearBackward>();
  node->s = s, node->x = x.detach(), node->w = w.detach(), node->has_bias = bias.defined();
  return record(node, y, {x, w, bias});
}

}  // namespace dpcore::ops
