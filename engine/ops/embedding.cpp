// embedding: a lookup of table rows by int64 ids, and its scatter-add backward into the
// table (deterministic on every backend: see Backend::embedding_backward).
#include "engine/ops/op_support.h"

namespace dpcore::ops {

struct EmbeddingBackward : Node {
  Tensor ids, weight;
  int64_t padding_idx = -1;  // normalised to [0, V), or -1 for none
  const char* name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    std::vector<Tensor> grads(2);  // ids take no gradient
    if (!needs_grad(*this, 1)) return grads;
    WeightGrads g = weight_grads(*this, weight, 0);
    backend(dy).embedding_backward(ids, dy, padding_idx, g.dw, g.accumulate);
    return_weight_grads(*this, g, grads);
    return grads;
  }
};


Tensor embedding(const Tensor& ids, const Tensor& weight, std::optional<int64_t> padding_idx) {
  check_float_tensor("embedding", "weight", weight, 2);
  DPCORE_CHECK(ids.defined() && ids.dtype() == DType::Int64, "embedding: ids must be an int64 tensor, got ",
               ids.str());
  DPCORE_CHECK(ids.device() == weight.device(), "embedding: weight on ", weight.device().str(), " but ids on ",
               ids.device().str());
  const int64_t vocab = weight.size(0);
  int64_t padding = -1;
  if (padding_idx) {
    padding = *padding_idx < 0 ? *padding_idx + vocab : *padding_idx;
    DPCORE_CHECK(padding >= 0 && padding < vocab, "embedding: padding_idx ", *padding_idx,
                 " is outside [-", vocab, ", ", vocab, ") for weight ", shape_str(weight.shape()));
  }
  backend(weight).check_indices(kernels::IndexCheck{"embedding", "id", "position", vocab}, ids);
  Shape out_shape = ids.shape();
  out_shape.push_back(weight.size(1));
  Tensor y = Tensor::empty(out_shape, weight.dtype(), weight.device());
  backend(weight).embedding_forward(ids, weight, y);
  auto node = std::make_shared<EmbeddingBackward>();
  node->ids = ids, node->weight = weight.detach(), node->padding_idx = padding;
  return record(node, y, {ids, weight});
}

}  // namespace dpcore::ops
