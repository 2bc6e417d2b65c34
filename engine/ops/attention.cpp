// scaled_dot_product_attention as one op: the forward keeps o and one log-sum-exp per query
// row, never the Tq x Tk probabilities; the backward recomputes them from q, k and lse.
#include <cmath>

#include "engine/ops/autocast_operands.h"
#include "engine/ops/op_support.h"

namespace dpcore::ops {

using kernels::AttentionShape;

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

struct AttentionBackward : Node {
  AttentionShape shape;
  Tensor q, k, v, key_mask, o, lse;
  const char* name() const override { return "ScaledDotProductAttentionBackward"; }
  std::vector<Tensor> apply(const Tensor& dout) override {
    Tensor dq = empty_like(q), dk = empty_like(k), dv = empty_like(v);
    backend(dout).attention_backward(shape, q, k, v, key_mask, o, lse, dout, dq, dk, dv);
    return {dq, dk, dv};
  }
};

// The shape of q [B, H, Tq, d] with k and v [B, H, Tk, d], after checking that they and the
// key-padding mask [B, Tk] fit together.
AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask,
                               const AttentionOptions& opt) {
  check_float_or_half_tensor(kOp, "query", q, 4);
  check_float_or_half_tensor(kOp, "key", k, 4);
  check_float_or_half_tensor(kOp, "value", v, 4);
  check_same_device_dtype(kOp, q, k);
  check_same_device_dtype(kOp, q, v);
  DPCORE_CHECK(k.shape() == v.shape(), kOp, ": key ", shape_str(k.shape()), " and value ", shape_str(v.shape()),
               " must have the same shape [B, H, Tk, d]");
  DPCORE_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3), kOp, ": query ",
               shape_str(q.shape()), " [B, H, Tq, d] does not fit key ", shape_str(k.shape()),
               " [B, H, Tk, d]: B, H and d must agree");
  DPCORE_CHECK(q.size(3) > 0, kOp, ": head dimension d = 0 in query ", shape_str(q.shape()));
  AttentionShape s;
  s.B = q.size(0), s.H = q.size(1), s.Tq = q.size(2), s.Tk = k.size(2), s.d = q.size(3);
  s.causal = opt.causal;
  s.scale = opt.scale ? *opt.scale : 1.0 / std::sqrt(double(s.d));
  DPCORE_CHECK(std::isfinite(s.scale), kOp, ": scale must be finite, got ", s.scale);
  if (key_mask.defined()) {
    DPCORE_CHECK(key_mask.dim() == 2 && key_mask.size(0) == s.B && key_mask.size(1) == s.Tk, kOp,
                 ": key_padding_mask ", shape_str(key_mask.shape()), " must be [B, Tk] = [", s.B, ", ", s.Tk,
                 "] for query ", shape_str(q.shape()), " and key ", shape_str(k.shape()));
    DPCORE_CHECK(key_mask.device() == q.device() && key_mask.dtype() == q.dtype(), kOp, ": key_padding_mask ",
                 key_mask.str(), " must have the query's dtype and device (", q.str(), "): 1 = attend, 0 = padding");
  }
  return s;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask,
                                    const AttentionOptions& opt) {
  // The mask counts: 16-bit q, k and v (a 16-bit projection's heads) with a float32 mask
  // still lower the mask.
  if (auto low = autocast_dtype_for({q, k, v, key_padding_mask})) {
    AutocastScope off(DType::Float32);
    return scaled_dot_product_attention(lowered(q, *low), lowered(k, *low), lowered(v, *low),
                                        lowered(key_padding_mask, *low), opt);
  }
  const AttentionShape s = attention_shape(q, k, v, key_padding_mask, opt);
  Tensor o = empty_like(q);
  // One log-sum-exp per query row, float32 for 16-bit operands (a statistic, as autocast keeps them).
  Tensor lse = Tensor::empty({s.B, s.H, s.Tq}, is_half_precision(q.dtype()) ? DType::Float32 : q.dtype(), q.device());
  backend(q).attention_forward(s, q, k, v, key_padding_mask, o, lse);
  auto node = std::make_shared<AttentionBackward>();
  node->shape = s;
  node->q = q.detach(), node->k = k.detach(), node->v = v.detach(), node->o = o.detach(), node->lse = lse;
  if (key_padding_mask.defined()) node->key_mask = key_padding_mask.detach();
  return record(node, o, {q, k, v});
}

}  // namespace dpcore::ops
