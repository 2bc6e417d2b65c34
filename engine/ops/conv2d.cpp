// conv2d: y = conv(x, w) + bias, and its backward (data, weight and bias gradients), in
// float32, float64 or (autocast's) bfloat16 and float16.
#include "engine/ops/conv2d.h"

#include "engine/ops/autocast_operands.h"

namespace dpcore::ops {

std::vector<Tensor> Conv2dBackward::conv_grads(const Tensor& dy) {
  std::vector<Tensor> grads(3);
  if (needs_grad(*this, 0)) {
    grads[0] = empty_like(x);
    backend(dy).conv2d_backward_data(s, dy, w, grads[0]);
  }
  if (needs_grad(*this, 1) || (has_bias && needs_grad(*this, 2))) {
    WeightGrads g = weight_grads(*this, w, has_bias ? s.K : 0);
    backend(dy).conv2d_backward_weight(s, x, dy, g.dw, has_bias ? &g.db : nullptr, g.accumulate);
    return_weight_grads(*this, g, grads);
  }
  return grads;
}

Conv2dShape conv2d_shape(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt) {
  check_float_or_half_tensor("conv2d", "input", x, 4);
  check_float_or_half_tensor("conv2d", "weight", w, 4);
  check_same_device_dtype("conv2d", x, w);
  DPCORE_CHECK(x.size(1) == w.size(1), "conv2d: input ", shape_str(x.shape()), " has ", x.size(1),
               " channels but weight ", shape_str(w.shape()), " expects ", w.size(1));
  DPCORE_CHECK(opt.stride_h > 0 && opt.stride_w > 0 && opt.pad_h >= 0 && opt.pad_w >= 0, "conv2d: stride (",
               opt.stride_h, ", ", opt.stride_w, ") must be positive and padding (", opt.pad_h, ", ", opt.pad_w,
               ") non-negative");
  if (bias.defined()) {
    check_same_device_dtype("conv2d", x, bias);
    DPCORE_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "conv2d: bias ", shape_str(bias.shape()),
                 " does not match ", w.size(0), " output channels");
  }
  Conv2dShape s;
  s.N = x.size(0), s.C = x.size(1), s.H = x.size(2), s.W = x.size(3);
  s.K = w.size(0), s.R = w.size(2), s.S = w.size(3);
  s.stride_h = opt.stride_h, s.stride_w = opt.stride_w, s.pad_h = opt.pad_h, s.pad_w = opt.pad_w;
  s.P = kernels::conv_out_size(s.H, s.R, s.stride_h, s.pad_h);
  s.Q = kernels::conv_out_size(s.W, s.S, s.stride_w, s.pad_w);
  DPCORE_CHECK(s.P > 0 && s.Q > 0, "conv2d: kernel ", s.R, "x", s.S, " with padding (", s.pad_h, ", ", s.pad_w,
               ") does not fit input ", shape_str(x.shape()));
  return s;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt) {
  if (auto low = autocast_dtype_for({x, w, bias})) {  // the 16-bit kernels, float32 accumulation
    AutocastScope off(DType::Float32);
    return conv2d(lowered(x, *low), lowered(w, *low), lowered(bias, *low), opt);
  }
  Conv2dShape s = conv2d_shape(x, w, bias, opt);
  Tensor y = Tensor::empty({s.N, s.K, s.P, s.Q}, x.dtype(), x.device());
  backend(x).conv2d_forward(s, x, w, bias.defined() ? &bias : nullptr, y);
  auto node = std::make_shared<Conv2dBackward>();
  node->s = s, node->x = x.detach(), node->w = w.detach(), node->has_bias = bias.defined();
  return record(node, y, {x, w, bias});
}

}  // namespace dpcore::ops
