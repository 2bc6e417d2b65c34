// Average pooling: avg_pool2d over windows, and global average pooling over whole planes.
// Neither backward needs the input, only its shape: each gradient is dy spread evenly over
// the elements that formed each mean. A 16-bit input gives a 16-bit output, each mean
// computed in float32 and rounded once, by the backends' kernels on the 16-bit tensors.
#include "engine/ops/max_pool2d.h"

namespace dpcore::ops {

struct AvgPool2dBackward : Node {
  Pool2dShape s;
  bool count_include_pad = true;
  Shape x_shape;
  const char* name() const override { return "AvgPool2dBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
    backend(dy).avg_pool2d_backward(s, count_include_pad, dy, dx);
    return {dx};
  }
};

struct GlobalAvgPool2dBackward : Node {
  Shape x_shape;
  const char* name() const override { return "GlobalAvgPool2dBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
    backend(dy).global_avg_pool2d_backward(dy, dx);
    return {dx};
  }
};

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt, bool count_include_pad) {
  Pool2dShape s = pool2d_shape("avg_pool2d", x, opt);
  Tensor y = Tensor::empty({s.N, s.C, s.P, s.Q}, x.dtype(), x.device());
  backend(x).avg_pool2d_forward(s, count_include_pad, x, y);
  auto node = std::make_shared<AvgPool2dBackward>();
  node->s = s, node->count_include_pad = count_include_pad, node->x_shape = x.shape();
  return record(node, y, {x});
}

Tensor global_avg_pool2d(const Tensor& x) {
  check_float_or_half_tensor("global_avg_pool2d", "input", x, 4);
  DPCORE_CHECK(x.size(2) > 0 && x.size(3) > 0, "global_avg_pool2d: mean of an empty plane, input ",
               shape_str(x.shape()));
  Tensor y = Tensor::empty({x.size(0), x.size(1), 1, 1}, x.dtype(), x.device());
  backend(x).global_avg_pool2d_forward(x, y);
  auto node = std::make_shared<GlobalAvgPool2dBackward>();
  node->x_shape = x.shape();
  return record(node, y, {x});
}

}  // namespace dpcore::ops
