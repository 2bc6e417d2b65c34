// max_pool2d, keeping each window's argmax so that backward is a deterministic gather. A
// 16-bit input gives a 16-bit output, which the backends' kernels compute on the 16-bit
// tensors themselves: the maximum is exact in any dtype, the backward sums overlapping
// windows in float32 and rounds each sum once, as the float32 kernel on the widened
// gradient would.
#include "engine/ops/max_pool2d.h"

namespace dpcore::ops {

struct MaxPool2dBackward : Node {
  Pool2dShape s;
  Tensor argmax;
  Shape x_shape;
  const char* name() const override { return "MaxPool2dBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
    backend(dy).max_pool2d_backward(s, dy, argmax, dx);
    return {dx};
  }
};

static void check_pool2d_options(const char* op, const Pool2dOptions& opt) {
  DPCORE_CHECK(opt.kernel_h > 0 && opt.kernel_w > 0 && opt.stride_h > 0 && opt.stride_w > 0, op, ": kernel (",
               opt.kernel_h, ", ", opt.kernel_w, ") and stride (", opt.stride_h, ", ", opt.stride_w,
               ") must be positive");
  // PyTorch's rule: padding at most half the kernel, so that every window holds a real
  // element: max_pool2d's argmax never points into the padding, and avg_pool2d without
  // count_include_pad never divides by zero (the kernels rely on it).
  DPCORE_CHECK(opt.pad_h >= 0 && opt.pad_w >= 0 && 2 * opt.pad_h <= opt.kernel_h && 2 * opt.pad_w <= opt.kernel_w,
               op, ": padding (", opt.pad_h, ", ", opt.pad_w, ") must be between 0 and half the kernel (",
               opt.kernel_h, ", ", opt.kernel_w, ")");
}

void check_max_pool2d_options(const Pool2dOptions& opt) { check_pool2d_options("max_pool2d", opt); }

Pool2dShape pool2d_shape(const char* op, const Tensor& x, const Pool2dOptions& opt) {
  check_float_or_half_tensor(op, "input", x, 4);
  check_pool2d_options(op, opt);
  Pool2dShape s;
  s.N = x.size(0), s.C = x.size(1), s.H = x.size(2), s.W = x.size(3);
  s.kernel_h = opt.kernel_h, s.kernel_w = opt.kernel_w, s.stride_h = opt.stride_h, s.stride_w = opt.stride_w;
  s.pad_h = opt.pad_h, s.pad_w = opt.pad_w;
  s.P = kernels::conv_out_size(s.H, s.kernel_h, s.stride_h, s.pad_h);
  s.Q = kernels::conv_out_size(s.W, s.kernel_w, s.stride_w, s.pad_w);
  DPCORE_CHECK(s.P > 0 && s.Q > 0, op, ": kernel ", s.kernel_h, "x", s.kernel_w, " does not fit input ",
               shape_str(x.shape()));
  return s;
}

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt) {
  Pool2dShape s = pool2d_shape("max_pool2d", x, opt);
  Tensor y = Tensor::empty({s.N, s.C, s.P, s.Q}, x.dtype(), x.device());
  Tensor argmax = Tensor::empty({s.N, s.C, s.P, s.Q}, DType::Int32, x.device());
  backend(x).max_pool2d_forward(s, x, y, argmax);
  auto node = std::make_shared<MaxPool2dBackward>();
  node->s = s, node->argmax = argmax, node->x_shape = x.shape();
  return record(node, y, {x});
}

}  // namespace dpcore::ops
