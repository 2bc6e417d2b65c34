// torch.nn.MultiheadAttention as self-attention over [N, T, E] (batch_first=True, bias=True),
// with torch's parameters, names and initialisation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "layers/module.h"

namespace dpcore::layers {

// torch.nn.MultiheadAttention(embed_dim, num_heads, dropout, bias=True, batch_first=True)
// called as self_attn(x, x, x, key_padding_mask=..., attn_mask=causal, need_weights=False):
//   q, k, v = x W_q^T + b_q, x W_k^T + b_k, x W_v^T + b_v   (the row blocks of in_proj_*)
//   y = concat_h(softmax(q_h k_h^T / sqrt(E / H) + mask) v_h) W_o^T + b_o
// Parameters: in_proj_weight [3E, E] (xavier_uniform_), in_proj_bias [3E] (zeros),
// out_proj.weight [E, E] (torch.nn.Linear's default, U(-1/sqrt(E), 1/sqrt(E))) and
// out_proj.bias [E] (zeros), as torch 1.13's _reset_parameters leaves them.
// `dropout` drops attention probabilities in training (the explicit path of attention(),
// keyed by the module's batch position); `causal` lets query i see keys j <= i (torch's
// attn_mask of -inf above the diagonal, is_causal in later versions). No attention weights
// are returned (need_weights=False).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool causal = false);
  // The unmasked case: every key is attended.
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  // x [N, T, E]; key_padding_mask [N, T] in x's dtype, 1 = attend, 0 = padding (Hugging
  // Face's attention_mask; torch's bool key_padding_mask is its negation, True = ignore),
  // or undefined for none. A query that sees no key gives 0 (the mean of v when the
  // attention dropout applies: attention()); torch gives NaN.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;  // "multihead_attention(64, heads 4, dropout 0.1, causal)"
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;
  void set_batch_position(const BatchPosition& position) override { position_ = position; }
  bool draws_random_numbers() const override { return is_training() && dropout_ > 0; }

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }

 private:
  int64_t embed_dim_, num_heads_;
  double dropout_;
  bool causal_;
  BatchPosition position_;
  Tensor in_proj_weight_, in_proj_bias_, out_proj_weight_, out_proj_bias_;
};

// The checks of a key padding mask for x [N, T, E] that the transformer modules share: a
// [N, T] tensor of x's dtype on x's device, or undefined. `module` names the caller.
void check_key_padding_mask(const char* module, const Tensor& x, const Tensor& key_padding_mask);

}  // namespace dpcore::layers
