// torch.nn.TransformerEncoderLayer (batch_first=True) with torch's names, initialisation and
// post-norm / pre-norm formulas, and torch.nn.TransformerEncoder, a stack of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/transformer/modules.h"
#include "layers/transformer/multihead_attention.h"

namespace dpcore::layers {

// torch.nn.TransformerEncoderLayer's arguments after d_model and nhead, with its defaults
// (batch_first is always True here); `causal` is the src_mask of -inf above the diagonal.
struct EncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" or "gelu" (torch's F.gelu: the erf form)
  double layer_norm_eps = 1e-5;
  bool norm_first = false;
  bool causal = false;
};

// On x [N, T, d_model], with sa(x) = dropout1(self_attn(x, x, x)) and
// ff(x) = dropout2(linear2(dropout(activation(linear1(x))))):
//   post-norm (norm_first false, BERT's): x = norm1(x + sa(x)); x = norm2(x + ff(x))
//   pre-norm  (norm_first true):          x = x + sa(norm1(x)); x = x + ff(norm2(x))
// State-dict names are torch's: self_attn.in_proj_weight, self_attn.in_proj_bias,
// self_attn.out_proj.weight/.bias, linear1.weight/.bias, linear2.weight/.bias,
// norm1.weight/.bias, norm2.weight/.bias; the linears start at torch.nn.Linear's default
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the norms at 1 and 0. The four dropouts (the
// attention probabilities', dropout, dropout1, dropout2) each draw from their own stream.
// In eval mode this is the same arithmetic; torch 1.13 switches there, without gradients,
// to its fused fast path (torch._transformer_encoder_layer_fwd), equal to rounding (tested).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, EncoderLayerOptions options = {});
  // The unmasked case: every key is attended.
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  // key_padding_mask [N, T] in x's dtype, 1 = attend, 0 = padding, or undefined
  // (torch's src_key_padding_mask is its negation: MultiheadAttention).
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;  // "encoder_layer(64, heads 4, ff 256, dropout 0.1, gelu, norm_first)"
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;
  void apply(const std::function<void(Module&)>& f) override;

  int64_t d_model() const { return d_model_; }
  const EncoderLayerOptions& options() const { return options_; }

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& key_padding_mask);
  Tensor feed_forward_block(const Tensor& x);

  int64_t d_model_, nhead_;
  EncoderLayerOptions options_;
  MultiheadAttention self_attn_;
  LayerNorm norm1_, norm2_;
  Dropout dropout_, dropout1_, dropout2_;
  Tensor linear1_weight_, linear1_bias_, linear2_weight_, linear2_bias_;
};

// torch.nn.TransformerEncoder(encoder_layer, num_layers, norm): num_layers copies of the
// layer's structure run in turn with the same key padding mask, then, with final_norm, a
// LayerNorm of the layer's d_model and eps (a pre-norm stack's closing norm). Names:
// layers.0.self_attn.in_proj_weight, ..., layers.<num_layers - 1>.*, norm.weight,
// norm.bias. torch deep-copies the one layer, so its layers start with the same weights;
// here each is drawn on its own, in the same law. In eval mode with a padding mask, torch
// 1.13 may run its nested-tensor fast path, which gives 0 at padded positions; here they
// keep the values the arithmetic gives them.
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers, bool final_norm = false);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;  // "encoder(2 x encoder_layer(...), norm)"
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;
  void apply(const std::function<void(Module&)>& f) override;

 private:
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers_;
  std::unique_ptr<LayerNorm> norm_;  // null without a final norm
};

}  // namespace dpcore::layers
