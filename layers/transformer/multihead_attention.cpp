#include "layers/transformer/multihead_attention.h"

#include <cmath>
#include <sstream>

#include "layers/transformer/attention.h"

namespace dpcore::layers {

void check_key_padding_mask(const char* module, const Tensor& x, const Tensor& key_padding_mask) {
  if (!key_padding_mask.defined()) return;
  DPCORE_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == x.size(0) &&
                   key_padding_mask.size(1) == x.size(1),
               module, ": key_padding_mask ", shape_str(key_padding_mask.shape()), " does not match input ",
               shape_str(x.shape()), " (expected [N, T] = [", x.size(0), ", ", x.size(1),
               "], 1 = attend, 0 = padding)");
  DPCORE_CHECK(key_padding_mask.dtype() == x.dtype() && key_padding_mask.device() == x.device(), module,
               ": key_padding_mask ", key_padding_mask.str(), " must have the input's dtype and device (",
               x.str(), ")");
}

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout, bool causal)
    : embed_dim_(embed_dim), num_heads_(num_heads), dropout_(dropout), causal_(causal) {
  DPCORE_CHECK(embed_dim_ > 0 && num_heads_ > 0, "multihead_attention: embed_dim ", embed_dim_, " and num_heads ",
               num_heads_, " must both be positive");
  DPCORE_CHECK(embed_dim_ % num_heads_ == 0, "multihead_attention: embed_dim ", embed_dim_,
               " is not divisible by num_heads ", num_heads_);
  DPCORE_CHECK(dropout_ >= 0.0 && dropout_ <= 1.0, "multihead_attention: dropout ", dropout_, " is outside [0, 1]");
}

Tensor MultiheadAttention::forward(const Tensor& x, const Tensor& key_padding_mask) {
  DPCORE_CHECK(x.defined() && x.dim() == 3 && x.size(2) == embed_dim_, "multihead_attention: input ",
               x.defined() ? shape_str(x.shape()) : std::string("undefined"), " is not [N, T, embed_dim ",
               embed_dim_, "]");
  check_key_padding_mask("multihead_attention", x, key_padding_mask);
  const int64_t E = embed_dim_;
  // The query, key and value projections are the three row blocks of in_proj_* (torch's
  // _in_projection_packed computes the same products as one matrix and chunks its output).
  auto projection = [&](int64_t block) {
    Tensor w = ops::narrow0(in_proj_weight_, block * E, (block + 1) * E);
    Tensor b = ops::narrow0(in_proj_bias_, block * E, (block + 1) * E);
    return split_heads(ops::linear(x, w, b), num_heads_);
  };
  Tensor q = projection(0), k = projection(1), v = projection(2);
  Tensor heads = attention(q, k, v, key_padding_mask, {dropout_, is_training(), position_}, causal_);
  return ops::linear(merge_heads(heads), out_proj_weight_, out_proj_bias_);
}

Shape MultiheadAttention::output_shape(const Shape& input) const {
  DPCORE_CHECK(input.size() == 3 && input[2] == embed_dim_, "multihead_attention: input ", shape_str(input),
               " is not [N, T, embed_dim ", embed_dim_, "]");
  return input;
}

std::string MultiheadAttention::describe() const {
  std::ostringstream os;
  os << "multihead_attention(" << embed_dim_ << ", heads " << num_heads_;
  if (dropout_ > 0) os << ", dropout " << dropout_;
  if (causal_) os << ", causal";
  os << ")";
  return os.str();
}

std::unique_ptr<Module> MultiheadAttention::clone() const {
  return std::make_unique<MultiheadAttention>(embed_dim_, num_heads_, dropout_, causal_);
}

void MultiheadAttention::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  const int64_t E = embed_dim_;
  // xavier_uniform_ on [3E, E]: U(-a, a), a = sqrt(6 / (fan_in + fan_out)), fan_in E, fan_out 3E.
  const ParamInit xavier{ParamInit::Kind::Uniform, std::sqrt(6.0 / double(E + 3 * E))};
  out.push_back({qualified_name(prefix, "in_proj_weight"), {3 * E, E}, xavier, &in_proj_weight_});
  out.push_back({qualified_name(prefix, "in_proj_bias"), {3 * E}, ParamInit::constant(0.0), &in_proj_bias_});
  // The out projection's from the 16-bit copy under autocast; the in projection's are cut
  // into three views per forward (q, k, v), each cast in its linear: a 16-bit copy used
  // three times would sum its gradient in 16 bits.
  const size_t first = out.size();
  out.push_back({qualified_name(prefix, "out_proj.weight"), {E, E}, ParamInit::pytorch_default(E), &out_proj_weight_});
  out.push_back({qualified_name(prefix, "out_proj.bias"), {E}, ParamInit::constant(0.0), &out_proj_bias_});
  mark_autocast_operands(out, first);
}

}  // namespace dpcore::layers
