#include "layers/transformer/mean_pool.h"

namespace dpcore::layers {

Tensor MeanPool::forward(const Tensor& x) {
  output_shape(x.shape());
  const int64_t N = x.size(0), T = x.size(1), E = x.size(2);
  Tensor weights = Tensor::full({N, 1, T}, 1.0 / double(T), x.dtype(), x.device());
  return ops::reshape(ops::batched_matmul(weights, x), {N, E});
}

Shape MeanPool::output_shape(const Shape& input) const {
  DPCORE_CHECK(input.size() == 3 && input[1] > 0, "meanpool: input ", shape_str(input),
               " is not [N, T, E] with at least one token");
  return {input[0], input[2]};
}

}  // namespace dpcore::layers
