// tanh; backward from the saved output, dx = dy (1 - y^2), so the input need not be kept.
// A 16-bit input gives a 16-bit output, computed in float32 (engine/ops/float32_compute.h);
// the backward then reads the rounded output, as PyTorch's does.
#include "engine/ops/float32_compute.h"
#include "engine/ops/op_support.h"

namespace dpcore::ops {

namespace {

struct TanhBackward : Node {
  Tensor y;
  const char* name() const override { return "TanhBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    in_float32_blocks({flat(dy), flat(y)}, {flat(dx)},
                      [&](Block& b) { backend(dy).tanh_backward(b.in[0], b.in[1], b.out[0]); });
    return {dx};
  }
};

}  // namespace

Tensor tanh(const Tensor& x) {
  check_float_or_half_tensor("tanh", "input", x);
  Tensor y = empty_like(x);
  in_float32_blocks({flat(x)}, {flat(y)}, [&](Block& b) { backend(x).tanh_forward(b.in[0], b.out[0]); });
  auto node = std::make_shared<TanhBackward>();
  node->y = y.detach();
  return record(node, y, {x});
}

}  // namespace dpcore::ops
