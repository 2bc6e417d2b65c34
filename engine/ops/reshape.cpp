// reshape (view) and flatten: same storage, new shape; backward reshapes the gradient back.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct ReshapeBackward : Node {
  Shape input_shape;
  const char* name() const override { return "ReshapeBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override { return {dy.view(input_shape)}; }
};


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

}  // namespace dpcore::ops
