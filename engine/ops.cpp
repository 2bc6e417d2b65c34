// Every differentiable op: checks, output allocation, the backend call, and its backward
// node. Backward nodes save only what their backward needs (relu and log_softmax keep
// their output, pooling its argmax).
#include "engine/ops.h"

#include "engine/autograd.h"
#include "engine/backend.h"

namespace dpcore::ops {

using autograd::Node;
using kernels::Conv2dShape;
using kernels::LinearShape;
using kernels::Pool2dShape;

namespace {

Backend& backend(const Tensor& t) { return backend_for(t.device()); }

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

template <class NodeT>
Tensor record(std::shared_ptr<NodeT> node, Tensor out, const std::vector<Tensor>& inputs) {
  autograd::record(node, out, inputs);
  return out;
}

bool needs_grad(const autograd::Node& node, size_t input) {
  return input < node.next.size() && node.next[input].node;
}

// Where the weight and bias gradients of conv2d/linear go. One kernel call produces both
// under one `accumulate` flag: when every wanted gradient belongs to a leaf with a
// gradient buffer (a parameter's view into the flat buffer), the kernel adds straight into
// those buffers; otherwise it writes fresh tensors that the autograd engine routes as usual.
struct WeightGrads {
  Tensor dw, db;  // db undefined without a bias
  bool accumulate = false;
};
WeightGrads weight_grads(Node& node, const Tensor& w, int64_t bias_size) {
  bool want_w = needs_grad(node, 1), want_b = bias_size > 0 && needs_grad(node, 2);
  WeightGrads g;
  g.dw = want_w ? node.in_place_grad(1) : Tensor();
  g.db = want_b ? node.in_place_grad(2) : Tensor();
  g.accumulate = (!want_w || g.dw.defined()) && (!want_b || g.db.defined());
  if (!g.accumulate) {
    node.clear_in_place();
    g.dw = g.db = Tensor();
  }
  // Fill the gaps: scratch for an unwanted output (zeroed, since it may be accumulated
  // into), or the fresh tensor that will be returned.
  auto fresh = [&](const Shape& shape) {
    return g.accumulate ? Tensor::zeros(shape, w.dtype(), w.device()) : Tensor::empty(shape, w.dtype(), w.device());
  };
  if (!g.dw.defined()) g.dw = fresh(w.shape());
  if (bias_size > 0 && !g.db.defined()) g.db = fresh({bias_size});
  return g;
}

// The engine's view of the result: gradients that were accumulated in place are not returned.
void return_weight_grads(const Node& node, const WeightGrads& g, std::vector<Tensor>& grads) {
  if (g.accumulate) return;
  if (needs_grad(node, 1)) grads[1] = g.dw;
  if (g.db.defined() && needs_grad(node, 2)) grads[2] = g.db;
}


// ------------------------------------------------------------------------- conv2d
struct Conv2dBackward : Node {
  Conv2dShape s;
  Tensor x, w;
  bool has_bias = false;
  const char* name() const override { return "Conv2dBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override { return conv_grads(dy); }

  // Gradients for (x, w, bias) from the gradient of the convolution's output.
  std::vector<Tensor> conv_grads(const Tensor& dy) {
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
};

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

// ------------------------------------------------------------------------- linear
struct LinearBackward : Node {
  LinearShape s;
  Tensor x, w;
  bool has_bias = false;
  const char* name() const override { return "LinearBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    std::vector<Tensor> grads(3);
    if (needs_grad(*this, 0)) {
      grads[0] = empty_like(x);
      backend(dy).linear_backward_data(s, dy, w, grads[0]);
    }
    if (needs_grad(*this, 1) || (has_bias && needs_grad(*this, 2))) {
      WeightGrads g = weight_grads(*this, w, has_bias ? s.out : 0);
      backend(dy).linear_backward_weight(s, x, dy, g.dw, has_bias ? &g.db : nullptr, g.accumulate);
      return_weight_grads(*this, g, grads);
    }
    return grads;
  }
};

// ------------------------------------------------------------------------- max_pool2d
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

// ------------------------------------------------------------------------- relu
struct ReluBackward : Node {
  Tensor y;
  const char* name() const override { return "ReluBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).relu_backward(dy, y, dx);
    return {dx};
  }
};

// ------------------------------------------------------------------------- reshape
struct ReshapeBackward : Node {
  Shape input_shape;
  const char* name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override { return {dy.view(input_shape)}; }
};

// ------------------------------------------------------------------------- log_softmax
struct LogSoftmaxBackward : Node {
  Tensor y;
  const char* name() const override { return "LogSoftmaxBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).log_softmax_backward(dy, y, dx);
    return {dx};
  }
};

// ------------------------------------------------------------------------- nll_loss
struct NllLossBackward : Node {
  Tensor target;
  Shape logp_shape;
  double divisor = 1.0;  // N for the mean, 1 for the sum
  const char* name() const override { return "NllLossBackward"; }
  std::vector<Tensor> apply(const Tensor& dloss) override {
    // Each row's gradient is dloss / divisor, computed on the device so that a captured
    // CUDA graph reads the seed's current value.
    Tensor per_row = empty_like(dloss);
    backend(dloss).scale(1.0 / divisor, dloss, per_row);
    Tensor dlogp = Tensor::empty(logp_shape, dloss.dtype(), dloss.device());
    backend(dloss).nll_loss_backward(per_row, target, dlogp);
    return {dlogp, Tensor()};
  }
};

// ------------------------------------------------------------------------- cross_entropy
// The fused kernel computes the gradient in the forward pass (for a unit seed); the
// backward only rescales it by the incoming gradient.
struct CrossEntropyBackward : Node {
  Tensor dlogits;
  const char* name() const override { return "CrossEntropyBackward"; }
  std::vector<Tensor> apply(const Tensor& dloss) override {
    Tensor dx = empty_like(dlogits);
    backend(dloss).scale_by(dloss, dlogits, dx);
    return {dx, Tensor()};
  }
};

// ------------------------------------------------------------------------- add, scale, sum
struct AddBackward : Node {
  const char* name() const override { return "AddBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override { return {dy, dy}; }
};

struct ScaleBackward : Node {
  double factor = 1.0;
  const char* name() const override { return "ScaleBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).scale(factor, dy, dx);
    return {dx};
  }
};

struct SumBackward : Node {
  Shape input_shape;
  double factor = 1.0;  // 1 for sum, 1/n for mean
  const char* name() const override { return "SumBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    // Broadcast the scalar gradient: fill with zero, then add factor * dy to every element
    // on the device (scale_by keeps it capture-safe: no host read of dy).
    Tensor ones = Tensor::full(input_shape, factor, dy.dtype(), dy.device());
    Tensor dx = Tensor::empty(input_shape, dy.dtype(), dy.device());
    backend(dy).scale_by(dy, ones, dx);
    return {dx};
  }
};

}  // namespace

// =========================================================================== forward ops

static Pool2dShape pool2d_shape(const Tensor& x, const Pool2dOptions& opt);

// Checks conv2d's inputs and works out its shape.
static Conv2dShape conv2d_shape(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt) {
  check_float_tensor("conv2d", "input", x, 4);
  check_float_tensor("conv2d", "weight", w, 4);
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
  Conv2dShape s = conv2d_shape(x, w, bias, opt);
  Tensor y = Tensor::empty({s.N, s.K, s.P, s.Q}, x.dtype(), x.device());
  backend(x).conv2d_forward(s, x, w, bias.defined() ? &bias : nullptr, y);
  auto node = std::make_shared<Conv2dBackward>();
  node->s = s, node->x = x.detach(), node->w = w.detach(), node->has_bias = bias.defined();
  return record(node, y, {x, w, bias});
}

Tensor conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt) {
  Conv2dShape s = conv2d_shape(x, w, bias, opt);
  Tensor y = Tensor::empty({s.N, s.K, s.P, s.Q}, x.dtype(), x.device());
  backend(x).conv2d_relu_forward(s, x, w, bias.defined() ? &bias : nullptr, y);
  auto node = std::make_shared<Conv2dReluBackward>();
  node->s = s, node->x = x.detach(), node->w = w.detach(), node->has_bias = bias.defined(), node->y = y.detach();
  return record(node, y, {x, w, bias});
}

Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& conv,
                              const Pool2dOptions& pool) {
  Conv2dShape s = conv2d_shape(x, w, bias, conv);
  Tensor y = Tensor::empty({s.N, s.K, s.P, s.Q}, x.dtype(), x.device());
  backend(x).conv2d_relu_forward(s, x, w, bias.defined() ? &bias : nullptr, y);
  Pool2dShape ps = pool2d_shape(y, pool);
  Tensor out = Tensor::empty({ps.N, ps.C, ps.P, ps.Q}, x.dtype(), x.device());
  Tensor argmax = Tensor::empty({ps.N, ps.C, ps.P, ps.Q}, DType::Int32, x.device());
  backend(x).max_pool2d_forward(ps, y, out, argmax);
  auto node = std::make_shared<Conv2dReluPoolBackward>();
  node->s = s, node->x = x.detach(), node->w = w.detach(), node->has_bias = bias.defined(), node->y = y.detach();
  node->pool = ps, node->argmax = argmax;
  return record(node, out, {x, w, bias});
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_float_tensor("linear", "input", x, 2);
  check_float_tensor("linear", "weight", w, 2);
  check_same_device_dtype("linear", x, w);
  DPCORE_CHECK(x.size(1) == w.size(1), "linear: input ", shape_str(x.shape()), " has ", x.size(1),
               " features but weight ", shape_str(w.shape()), " expects ", w.size(1));
  if (bias.defined()) {
    check_same_device_dtype("linear", x, bias);
    DPCORE_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "linear: bias ", shape_str(bias.shape()),
                 " does not match ", w.size(0), " output features");
  }
  LinearShape s{x.size(0), x.size(1), w.size(0)};
  Tensor y = Tensor::empty({s.N, s.out}, x.dtype(), x.device());
  backend(x).linear_forward(s, x, w, bias.defined() ? &bias : nullptr, y);
  auto node = std::make_shared<LinearBackward>();
  node->s = s, node->x = x.detach(), node->w = w.detach(), node->has_bias = bias.defined();
  return record(node, y, {x, w, bias});
}

// Checks max_pool2d's input and works out its shape.
static Pool2dShape pool2d_shape(const Tensor& x, const Pool2dOptions& opt) {
  check_float_tensor("max_pool2d", "input", x, 4);
  DPCORE_CHECK(opt.kernel_h > 0 && opt.kernel_w > 0 && opt.stride_h > 0 && opt.stride_w > 0, "max_pool2d: kernel (",
               opt.kernel_h, ", ", opt.kernel_w, ") and stride (", opt.stride_h, ", ", opt.stride_w,
               ") must be positive");
  // PyTorch's rule: padding at most half the kernel, so no window is padding only.
  DPCORE_CHECK(opt.pad_h >= 0 && opt.pad_w >= 0 && 2 * opt.pad_h <= opt.kernel_h && 2 * opt.pad_w <= opt.kernel_w,
               "max_pool2d: padding (", opt.pad_h, ", ", opt.pad_w, ") must be between 0 and half the kernel (",
               opt.kernel_h, ", ", opt.kernel_w, ")");
  Pool2dShape s;
  s.N = x.size(0), s.C = x.size(1), s.H = x.size(2), s.W = x.size(3);
  s.kernel_h = opt.kernel_h, s.kernel_w = opt.kernel_w, s.stride_h = opt.stride_h, s.stride_w = opt.stride_w;
  s.pad_h = opt.pad_h, s.pad_w = opt.pad_w;
  s.P = kernels::conv_out_size(s.H, s.kernel_h, s.stride_h, s.pad_h);
  s.Q = kernels::conv_out_size(s.W, s.kernel_w, s.stride_w, s.pad_w);
  DPCORE_CHECK(s.P > 0 && s.Q > 0, "max_pool2d: kernel ", s.kernel_h, "x", s.kernel_w, " does not fit input ",
               shape_str(x.shape()));
  return s;
}

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt) {
  Pool2dShape s = pool2d_shape(x, opt);
  Tensor y = Tensor::empty({s.N, s.C, s.P, s.Q}, x.dtype(), x.device());
  Tensor argmax = Tensor::empty({s.N, s.C, s.P, s.Q}, DType::Int32, x.device());
  backend(x).max_pool2d_forward(s, x, y, argmax);
  auto node = std::make_shared<MaxPool2dBackward>();
  node->s = s, node->argmax = argmax, node->x_shape = x.shape();
  return record(node, y, {x});
}

Tensor relu(const Tensor& x) {
  check_float_tensor("relu", "input", x);
  Tensor y = empty_like(x);
  backend(x).relu_forward(x, y);
  auto node = std::make_shared<ReluBackward>();
  node->y = y.detach();
  return record(node, y, {x});
}

Shape resolve_reshape(const Shape& input, const Shape& shape) {
  int64_t total = shape_numel(input);
  Shape out = shape;
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      DPCORE_CHECK(inferred < 0, "reshape: ", shape_str(shape), " has more than one -1");
      inferred = int64_t(i);
    } else {
      DPCORE_CHECK(out[i] >= 0, "reshape: invalid size ", out[i], " in ", shape_str(shape));
      known *= out[i];
    }
  }
  if (inferred >= 0) {
    DPCORE_CHECK(known > 0 && total % known == 0, "reshape: cannot view ", shape_str(input), " (", total,
                 " elements) as ", shape_str(shape));
    out[size_t(inferred)] = total / known;
  }
  DPCORE_CHECK(shape_numel(out) == total, "reshape: cannot view ", shape_str(input), " (", total, " elements) as ",
               shape_str(shape));
  if (inferred == 0 && !input.empty() && out[0] != input[0]) {
    int64_t per_sample = input[0] ? total / input[0] : 0;
    fail("reshape: input ", shape_str(input), " holds ", per_sample, " values per sample, but the view ",
         shape_str(shape), " asks for ", known, ": the batch of ", input[0], " would silently become ", out[0],
         " rows (use flatten, or view(-1, ", per_sample, "))");
  }
  return out;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  DPCORE_CHECK(x.defined(), "reshape: input is undefined");
  Tensor y = x.detach().view(resolve_reshape(x.shape(), shape));
  auto node = std::make_shared<ReshapeBackward>();
  node->input_shape = x.shape();
  return record(node, y, {x});
}

Tensor flatten(const Tensor& x) {
  DPCORE_CHECK(x.defined() && x.dim() >= 1, "flatten: needs a tensor with a batch dimension, got ", x.str());
  return reshape(x, {x.size(0), x.size(0) ? x.numel() / x.size(0) : 0});
}

Tensor log_softmax(const Tensor& x) {
  check_float_tensor("log_softmax", "input", x, 2);
  DPCORE_CHECK(x.size(1) > 0, "log_softmax: input ", shape_str(x.shape()), " has no classes");
  Tensor y = empty_like(x);
  backend(x).log_softmax_forward(x, y);
  auto node = std::make_shared<LogSoftmaxBackward>();
  node->y = y.detach();
  return record(node, y, {x});
}

static void check_loss_inputs(const char* op, const Tensor& input, const Tensor& target) {
  check_float_tensor(op, "input", input, 2);
  DPCORE_CHECK(target.defined() && target.dtype() == DType::Int64 && target.dim() == 1, op,
               ": target must be a 1-d int64 tensor, got ", target.str());
  DPCORE_CHECK(target.size(0) == input.size(0), op, ": input ", shape_str(input.shape()), " has ", input.size(0),
               " rows but target ", shape_str(target.shape()), " has ", target.size(0));
  DPCORE_CHECK(target.device() == input.device(), op, ": input on ", input.device().str(), " but target on ",
               target.device().str());
  DPCORE_CHECK(input.size(0) > 0, op, ": empty batch ", shape_str(input.shape()));
  backend(input).check_targets(op, target, input.size(1));
}

Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction reduction) {
  check_loss_inputs("nll_loss", logp, target);
  Tensor loss = Tensor::empty({}, logp.dtype(), logp.device());
  backend(logp).nll_loss_forward(logp, target, loss);
  double divisor = reduction == Reduction::Mean ? double(logp.size(0)) : 1.0;
  if (divisor != 1.0) backend(logp).scale(1.0 / divisor, loss, loss);
  auto node = std::make_shared<NllLossBackward>();
  node->target = target, node->logp_shape = logp.shape(), node->divisor = divisor;
  return record(node, loss, {logp, target});
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction) {
  check_loss_inputs("cross_entropy", logits, target);
  double divisor = reduction == Reduction::Mean ? double(logits.size(0)) : 1.0;
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  bool want_grad = autograd::grad_mode_enabled() && logits.requires_grad();
  Tensor dlogits = want_grad ? empty_like(logits) : Tensor();
  if (want_grad) {
    backend(logits).cross_entropy_forward_backward(logits, target, 1.0 / divisor, loss, dlogits);
  } else {
    Tensor scratch = empty_like(logits);
    backend(logits).cross_entropy_forward_backward(logits, target, 1.0 / divisor, loss, scratch);
  }
  if (divisor != 1.0) backend(logits).scale(1.0 / divisor, loss, loss);
  auto node = std::make_shared<CrossEntropyBackward>();
  node->dlogits = dlogits;
  return record(node, loss, {logits, target});
}

Tensor add(const Tensor& a, const Tensor& b) {
  check_float_tensor("add", "a", a);
  check_float_tensor("add", "b", b);
  check_same_device_dtype("add", a, b);
  DPCORE_CHECK(a.shape() == b.shape(), "add: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
               " differ (add does not broadcast)");
  Tensor y = empty_like(a);
  backend(a).add(a, b, y);
  return record(std::make_shared<AddBackward>(), y, {a, b});
}

Tensor scale(const Tensor& x, double factor) {
  check_float_tensor("scale", "input", x);
  Tensor y = empty_like(x);
  backend(x).scale(factor, x, y);
  auto node = std::make_shared<ScaleBackward>();
  node->factor = factor;
  return record(node, y, {x});
}

static Tensor reduce_all(const char* op, const Tensor& x, bool mean) {
  check_float_tensor(op, "input", x);
  DPCORE_CHECK(!mean || x.numel() > 0, op, ": mean of an empty tensor ", shape_str(x.shape()));
  Tensor y = Tensor::empty({}, x.dtype(), x.device());
  backend(x).sum(x, y);
  double factor = mean ? 1.0 / double(x.numel()) : 1.0;
  if (mean) backend(x).scale(factor, y, y);
  auto node = std::make_shared<SumBackward>();
  node->input_shape = x.shape(), node->factor = factor;
  return record(node, y, {x});
}

Tensor sum(const Tensor& x) { return reduce_all("sum", x, false); }
Tensor mean(const Tensor& x) { return reduce_all("mean", x, true); }

}  // namespace dpcore::ops
