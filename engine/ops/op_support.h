// What every op file of engine/ops/ shares: the backend of a tensor, recording a backward
// node, and where the weight and bias gradients of conv2d and linear go. Internal to
// engine/ops/.
#pragma once

#include <memory>
#include <vector>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"

namespace dpcore::ops {

using autograd::Node;
using kernels::Conv2dShape;
using kernels::LinearShape;
using kernels::Pool2dShape;

inline Backend& backend(const Tensor& t) { return backend_for(t.device()); }

inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

template <class NodeT>
Tensor record(std::shared_ptr<NodeT> node, Tensor out, const std::vector<Tensor>& inputs) {
  autograd::record(node, out, inputs);
  return out;
}

inline bool needs_grad(const autograd::Node& node, size_t input) {
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
inline WeightGrads weight_grads(Node& node, const Tensor& w, int64_t bias_size) {
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
inline void return_weight_grads(const Node& node, const WeightGrads& g, std::vector<Tensor>& grads) {
  if (g.accumulate) return;
  if (needs_grad(node, 1)) grads[1] = g.dw;
  if (g.db.defined() && needs_grad(node, 2)) grads[2] = g.db;
}

// The checks nll_loss and cross_entropy share: input [N, C], target [N] int64 in [0, C).
inline void check_loss_inputs(const char* op, const Tensor& input, const Tensor& target) {
  check_float_tensor(op, "input", input, 2);
  DPCORE_CHECK(target.defined() && target.dtype() == DType::Int64 && target.dim() == 1, op,
               ": target must be a 1-d int64 tensor, got ", target.str());
  DPCORE_CHECK(target.size(0) == input.size(0), op, ": input ", shape_str(input.shape()), " has ", input.size(0),
               " rows but target ", shape_str(target.shape()), " has ", target.size(0));
  DPCORE_CHECK(target.device() == input.device(), op, ": input on ", input.device().str(), " but target on ",
               target.device().str());
  DPCORE_CHECK(input.size(0) > 0, op, ": empty batch ", shape_str(input.shape()));
  backend(input).check_indices(kernels::IndexCheck{op, "target", "row", input.size(1)}, target);
}

}  // namespace dpcore::ops
