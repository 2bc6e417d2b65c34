// The fused blocks: relu(conv2d) and max_pool2d(relu(conv2d)), the same mathematics as the
// composition of conv2d.cpp, relu.cpp and max_pool2d.cpp in fewer passes over memory.
#include "engine/ops/autocast_operands.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/max_pool2d.h"

namespace dpcore::ops {

// relu(conv): the relu's mask (its output y > 0) first, then the convolution's backward.
struct Conv2dReluBackward : Conv2dBackward {
  Tensor y;
  const char* name() const override { return "Conv2dReluBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor masked = empty_like(dy);
    backend(dy).relu_backward(dy, y, masked);
    return conv_grads(masked);
  }
};

// max_pool2d(relu(conv)): the pooling's gather with the relu's mask folded in, then the
// convolution's backward.
struct Conv2dReluPoolBackward : Conv2dBackward {
  Tensor y, argmax;  // the relu's output (the pool's input) and the pool's choices
  Pool2dShape pool;
  const char* name() const override { return "Conv2dReluPoolBackward"; }
  std::vector<Tensor> apply(const Tensor& dout) override {
    Tensor dy = empty_like(y);
    backend(dout).max_pool2d_relu_backward(pool, dout, argmax, y, dy);
    return conv_grads(dy);
  }
};

namespace {
// Under autocast, or on 16-bit operands, the block comes apart: the 16-bit convolution
// (conv2d.cpp), then relu (and the pooling) on its 16-bit output, as torch.autocast runs
// them. The fused kernels themselves take float32 and float64.
bool comes_apart(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return autocast_dtype_for({x, w, bias}) || is_half_precision(x.dtype()) || is_half_precision(w.dtype());
}
}  // namespace

Tensor conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt) {
  if (comes_apart(x, w, bias)) return relu(conv2d(x, w, bias, opt));
  check_float_tensor("conv2d_relu", "input", x, 4);
  Conv2dShape s = conv2d_shape(x, w, bias, opt);
  Tensor y = Tensor::empty({s.N, s.K, s.P, s.Q}, x.dtype(), x.device());
  backend(x).conv2d_relu_forward(s, x, w, bias.defined() ? &bias : nullptr, y);
  auto node = std::make_shared<Conv2dReluBackward>();
  node->s = s, node->x = x.detach(), node->w = w.detach(), node->has_bias = bias.defined(), node->y = y.detach();
  return record(node, y, {x, w, bias});
}

Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& conv,
                              const Pool2dOptions& pool) {
  if (comes_apart(x, w, bias)) return max_pool2d(relu(conv2d(x, w, bias, conv)), pool);
  check_float_tensor("conv2d_relu_max_pool2d", "input", x, 4);
  Conv2dShape s = conv2d_shape(x, w, bias, conv);
  Tensor y = Tensor::empty({s.N, s.K, s.P, s.Q}, x.dtype(), x.device());
  backend(x).conv2d_relu_forward(s, x, w, bias.defined() ? &bias : nullptr, y);
  Pool2dShape ps = pool2d_shape("max_pool2d", y, pool);
  Tensor out = Tensor::empty({ps.N, ps.C, ps.P, ps.Q}, x.dtype(), x.device());
  Tensor argmax = Tensor::empty({ps.N, ps.C, ps.P, ps.Q}, DType::Int32, x.device());
  backend(x).max_pool2d_forward(ps, y, out, argmax);
  auto node = std::make_shared<Conv2dReluPoolBackward>();
  node->s = s, node->x = x.detach(), node->w = w.detach(), node->has_bias = bias.defined(), node->y = y.detach();
  node->pool = ps, node->argmax = argmax;
  return record(node, out, {x, w, bias});
}

}  // namespace dpcore::ops
