// relu; backward masks with the forward output, so the input need not be kept. A 16-bit
// input gives a 16-bit output (engine/ops/float32_compute.h): relu commutes with rounding,
// so both passes are exact.
#include "engine/ops/float32_compute.h"
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct ReluBackward : Node {
  Tensor y;
  const char* name() const override { return "ReluBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    in_float32_blocks({flat(dy), flat(y)}, {flat(dx)},
                      [&](Block& b) { backend(dy).relu_backward(b.in[0], b.in[1], b.out[0]); });
    return {dx};
  }
};


Tensor relu(const Tensor& x) {
  check_float_or_half_tensor("relu", "input", x);
  Tensor y = empty_like(x);
  in_float32_blocks({flat(x)}, {flat(y)}, [&](Block& b) { backend(x).relu_forward(b.in[0], b.out[0]); });
  auto node = std::make_shared<ReluBackward>();
  node->y = y.detach();
  return record(node, y, {x});
}

}  // namespace dpcore::ops
