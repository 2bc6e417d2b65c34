// layer_norm over the last dimension: the forward saves each row's mean and rstd, the
// backward reads them (nothing is recomputed) and writes dx and the parameter gradients in
// one backend call. A 16-bit input is normalised in float32 beside float32 weight and bias,
// its mean and rstd float32, the output rounded once to the input's dtype, as PyTorch's
// layer norm on a bfloat16 input, by the backends' kernels on the 16-bit tensors
// themselves; the backward keeps the 16-bit input.
#include "engine/ops/norm_statistics.h"
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct LayerNormBackward : Node {
  Tensor x, weight, mean, rstd;  // weight undefined: not affine
  const char* name() const override { return "LayerNormBackward"; }

  std::vector<Tensor> apply(const Tensor& dy) override {
    std::vector<Tensor> grads(3);
    const bool want_params = weight.defined() && (needs_grad(*this, 1) || needs_grad(*this, 2));
    WeightGrads g = want_params ? weight_grads(*this, weight, weight.size(0)) : WeightGrads{};
    Tensor dx = needs_grad(*this, 0) ? empty_like(x) : Tensor();
    backend(dy).layer_norm_backward(dy, x, weight, mean, rstd, dx, g.dw, g.db, g.accumulate);
    grads[0] = dx;
    if (want_params) return_weight_grads(*this, g, grads);
    return grads;
  }
};

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_float_or_half_tensor("layer_norm", "input", x);
  DPCORE_CHECK(x.dim() >= 1 && x.size(x.dim() - 1) > 0, "layer_norm: input ", shape_str(x.shape()),
               " has no last dimension to normalise over");
  const int64_t cols = x.size(x.dim() - 1);
  for (const auto& [what, t] : {std::pair<const char*, const Tensor&>{"weight", weight}, {"bias", bias}}) {
    if (!t.defined()) continue;
    check_statistics_tensor("layer_norm", what, x, t);
    DPCORE_CHECK(t.dim() == 1 && t.size(0) == cols, "layer_norm: ", what, " ", shape_str(t.shape()),
                 " does not match the last dimension ", cols, " of input ", shape_str(x.shape()));
  }
  DPCORE_CHECK(weight.defined() == bias.defined(),
               "layer_norm: weight and bias must both be defined (affine) or both undefined");
  DPCORE_CHECK(eps >= 0.0, "layer_norm: eps ", eps, " must be non-negative");
  const int64_t rows = x.numel() / cols;
  Tensor y = empty_like(x);
  Tensor mean = empty_computed({rows}, x), rstd = empty_computed({rows}, x);
  if (rows > 0) backend(x).layer_norm_forward(x, weight, bias, eps, y, mean, rstd);
  auto node = std::make_shared<LayerNormBackward>();
  node->x = x.detach();
  node->weight = weight.defined() ? weight.detach() : Tensor();
  node->mean = mean, node->rstd = rstd;
  return record(node, y, {x, weight, bias});
}

}  // namespace dpcore::ops
