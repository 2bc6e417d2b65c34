// narrow0: rows [begin, end) of x along its first dimension, as a view (torch.narrow(x, 0,
// begin, end - begin)); backward puts the gradient into those rows. MultiheadAttention
// takes its query, key and value projections as three row blocks of in_proj_weight this way.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct NarrowBackward : Node {
  Shape input_shape;
  int64_t begin = 0, end = 0;
  const char* name() const override { return "NarrowBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    // A parameter's gradient buffer takes the rows in place (the leaf's hooks still fire
    // once, after every block has arrived); otherwise a fresh gradient, zero outside them.
    Tensor whole = in_place_grad(0);
    if (whole.defined()) {
      Tensor rows = whole.narrow0(begin, end);
      backend(dy).axpy(1.0, dy, rows);
      return {Tensor()};
    }
    whole = Tensor::zeros(input_shape, dy.dtype(), dy.device());
    whole.narrow0(begin, end).copy_(dy);
    return {whole};
  }
};

Tensor narrow0(const Tensor& x, int64_t begin, int64_t end) {
  DPCORE_CHECK(x.defined() && x.dim() >= 1, "narrow0: needs a tensor with at least one dimension, got ",
               x.defined() ? x.str() : std::string("an undefined tensor"));
  DPCORE_CHECK(0 <= begin && begin <= end && end <= x.size(0), "narrow0: rows [", begin, ", ", end, ") are not within the ",
               x.size(0), " rows of ", shape_str(x.shape()));
  Tensor y = x.detach().narrow0(begin, end);
  auto node = std::make_shared<NarrowBackward>();
  node->input_shape = x.shape(), node->begin = begin, node->end = end;
  return record(node, y, {x});
}

}  // namespace dpcore::ops
