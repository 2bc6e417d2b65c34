// transpose(x, dim0, dim1): torch.transpose(x, dim0, dim1).contiguous(), a copy with the two
// dimensions swapped (tensors here are always contiguous, so there is no strided view to
// return). Its backward is the same swap of the gradient.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

namespace {

// The 5-d view of kernels/transpose_shape.h for dimensions a < b of `shape`.
kernels::TransposeShape transpose_shape(const Shape& shape, int64_t a, int64_t b) {
  kernels::TransposeShape s;
  for (int64_t i = 0; i < int64_t(shape.size()); ++i) {
    int64_t& part = i < a ? s.outer : i == a ? s.a : i < b ? s.mid : i == b ? s.b : s.inner;
    part *= shape[size_t(i)];
  }
  return s;
}

Tensor swapped(const Tensor& x, int64_t a, int64_t b) {
  Shape out = x.shape();
  std::swap(out[size_t(a)], out[size_t(b)]);
  Tensor y = Tensor::empty(out, x.dtype(), x.device());
  backend(x).transpose(transpose_shape(x.shape(), a, b), x, y);
  return y;
}

struct TransposeBackward : Node {
  int64_t a = 0, b = 0;
  const char* name() const override { return "TransposeBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override { return {swapped(dy, a, b)}; }
};

}  // namespace

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_float_or_half_tensor("transpose", "input", x);
  const int64_t rank = x.dim();
  for (int64_t d : {dim0, dim1}) {
    DPCORE_CHECK(d >= -rank && d < rank, "transpose: dim ", d, " is outside [", -rank, ", ", rank, ") for input ",
                 shape_str(x.shape()));
  }
  int64_t a = dim0 < 0 ? dim0 + rank : dim0, b = dim1 < 0 ? dim1 + rank : dim1;
  if (a == b) return x;  // as torch.transpose(x, d, d): the same tensor
  if (a > b) std::swap(a, b);
  Tensor y = swapped(x, a, b);
  auto node = std::make_shared<TransposeBackward>();
  node->a = a, node->b = b;
  return record(node, y, {x});
}

}  // namespace dpcore::ops
