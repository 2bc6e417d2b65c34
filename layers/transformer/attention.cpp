#include "layers/transformer/attention.h"

#include <cmath>
#include <limits>

namespace dpcore::layers {

Tensor split_heads(const Tensor& x, int64_t heads) {
  DPCORE_CHECK(x.dim() == 3, "split_heads: input ", shape_str(x.shape()), " is not [N, T, hidden]");
  DPCORE_CHECK(heads > 0 && x.size(2) % heads == 0, "split_heads: ", heads, " heads do not divide the hidden size ",
               x.size(2), " of input ", shape_str(x.shape()));
  return ops::transpose(ops::reshape(x, {x.size(0), x.size(1), heads, x.size(2) / heads}), 1, 2);
}

Tensor merge_heads(const Tensor& x) {
  DPCORE_CHECK(x.dim() == 4, "merge_heads: input ", shape_str(x.shape()), " is not [N, H, T, d]");
  return ops::reshape(ops::transpose(x, 1, 2), {x.size(0), x.size(2), x.size(1) * x.size(3)});
}

namespace {

// [N, Tk] of 1 (attend) and 0 (padding) -> the additive [N, 1, 1, Tk] mask that softmax
// broadcasts over heads and queries (kernels/softmax_mask.h): 0 where attended and the
// dtype's lowest finite value where padded, as Hugging Face builds it, on the mask's device
// (no copy to the host, so a CUDA graph can hold it). mask * max - max is exact: 0 or -max.
Tensor additive_key_mask(const Tensor& key_padding_mask) {
  const double max = key_padding_mask.dtype() == DType::Float64 ? std::numeric_limits<double>::max()
                                                                 : double(std::numeric_limits<float>::max());
  const Tensor lowest = Tensor::full(key_padding_mask.shape(), -max, key_padding_mask.dtype(), key_padding_mask.device());
  const Tensor additive = ops::add(ops::scale(key_padding_mask, max), lowest);
  return ops::reshape(additive, {key_padding_mask.size(0), 1, 1, key_padding_mask.size(1)});
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask,
                 const AttentionDropout& dropout, bool causal) {
  if (!dropout.training || dropout.p == 0.0) {
    return ops::scaled_dot_product_attention(q, k, v, key_padding_mask, {causal, std::nullopt});
  }
  DPCORE_CHECK(q.dim() == 4, "attention: q ", shape_str(q.shape()), " is not [N, H, T, d]");
  const Tensor scores = ops::scale(ops::batched_matmul(q, k, false, true), 1.0 / std::sqrt(double(q.size(3))));
  const Tensor mask = key_padding_mask.defined() ? additive_key_mask(key_padding_mask) : Tensor();
  const Tensor probs = ops::softmax(scores, mask, causal);
  const BatchPosition& at = dropout.position;
  return ops::batched_matmul(ops::dropout(probs, {dropout.p, true, at.seed, at.step, at.first_sample}), v);
}

}  // namespace dpcore::layers
