// gelu in either of PyTorch's forms; backward from the saved input x. A 16-bit input gives
// a 16-bit output, computed in float32 and rounded once by the backends' kernels on the
// 16-bit tensors themselves, and is kept 16-bit.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

namespace {

kernels::GeluApproximate gelu_form(const std::string& approximate) {
  if (approximate == "none") return kernels::GeluApproximate::None;
  if (approximate == "tanh") return kernels::GeluApproximate::Tanh;
  fail("gelu: approximate must be 'none' or 'tanh' (PyTorch's two forms), got '", approximate, "'");
}

struct GeluBackward : Node {
  Tensor x;
  kernels::GeluApproximate form = kernels::GeluApproximate::None;
  const char* name() const override { return "GeluBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).gelu_backward(form, dy, x, dx);
    return {dx};
  }
};

}  // namespace

Tensor gelu(const Tensor& x, const std::string& approximate) {
  const kernels::GeluApproximate form = gelu_form(approximate);
  check_float_or_half_tensor("gelu", "input", x);
  Tensor y = empty_like(x);
  backend(x).gelu_forward(form, x, y);
  auto node = std::make_shared<GeluBackward>();
  node->x = x.detach();
  node->form = form;
  return record(node, y, {x});
}

}  // namespace dpcore::ops
