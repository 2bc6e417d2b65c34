// conv2d's backward node and shape check, shared with the fused blocks
// (engine/ops/conv2d_relu_max_pool2d.cpp). Internal to engine/ops/.
#pragma once

#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct Conv2dBackward : Node {
  Conv2dShape s;
  Tensor x, w;
  bool has_bias = false;
  const char* name() const override { return "Conv2dBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override { return conv_grads(dy); }

  // Gradients for (x, w, bias) from the gradient of the convolution's output.
  std::vector<Tensor> conv_grads(const Tensor& dy);
};

// Checks conv2d's inputs and works out its shape.
Conv2dShape conv2d_shape(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt);

}  // namespace dpcore::ops
