// The differentiable operations. Each checks its inputs (failing with a message that names
// the op and the shapes), allocates its output on the input's device, calls the device's
// backend (engine/backend.h), and records a backward node when a gradient is needed.
#pragma once

#include <cstdint>

#include "engine/tensor.h"

namespace dpcore::ops {

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
};
struct Pool2dOptions {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
};
enum class Reduction { Mean, Sum };

// x[N,C,H,W], w[K,C,R,S], bias[K] or undefined -> y[N,K,P,Q]
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt);
// Fused blocks, the same mathematics as the composition in fewer passes over memory:
//   conv2d_relu:            relu(conv2d(x, w, bias)), the relu in the convolution's epilogue;
//   conv2d_relu_max_pool2d: max_pool2d(relu(conv2d(...))), and in backward the relu's mask is
//                           folded into the pooling's gather.
// layers::Sequential runs conv, relu[, pool] children through these (layers/module.cpp).
Tensor conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt);
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& conv,
                              const Pool2dOptions& pool);
// x[N,in], w[out,in], bias[out] or undefined -> y[N,out]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt);
// max_pool2d's rules for its options (positive kernel and stride; padding at most half the
// kernel, PyTorch's rule, so that no window is padding only). max_pool2d checks them; a
// module can check them early, when the model is built.
void check_max_pool2d_options(const Pool2dOptions& opt);
Tensor relu(const Tensor& x);
// Same elements, new shape; one entry may be -1 (inferred). An inferred LEADING entry is
// the batch idiom x.view(-1, F): if it would change the batch size the op fails, naming
// the shapes (the silent 64 -> 256 rows mistake of the data-parallel article).
Tensor reshape(const Tensor& x, const Shape& shape);
// The shape reshape would produce, with the same checks (used to validate models early).
Shape resolve_reshape(const Shape& input, const Shape& shape);
// Keeps dim 0 and flattens the rest: [N, ...] -> [N, prod(...)]
Tensor flatten(const Tensor& x);
// Over the last dimension of a 2-d tensor.
Tensor log_softmax(const Tensor& x);
// logp[N,C] log-probabilities, target[N] int64 in [0, C).
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction reduction = Reduction::Mean);
// log_softmax + nll_loss fused in one pass (the probabilities are never stored).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor add(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double factor);
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

}  // namespace dpcore::ops
