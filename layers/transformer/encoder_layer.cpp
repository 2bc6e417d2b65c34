#include "layers/transformer/encoder_layer.h"

#include <initializer_list>
#include <sstream>
#include <utility>

namespace dpcore::layers {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, EncoderLayerOptions options)
    : d_model_(d_model),
      nhead_(nhead),
      options_(std::move(options)),
      self_attn_(d_model, nhead, options_.dropout, options_.causal),
      norm1_(d_model, options_.layer_norm_eps),
      norm2_(d_model, options_.layer_norm_eps),
      dropout_(options_.dropout),
      dropout1_(options_.dropout),
      dropout2_(options_.dropout) {
  DPCORE_CHECK(options_.dim_feedforward > 0, "encoder_layer: dim_feedforward ", options_.dim_feedforward,
               " must be positive");
  DPCORE_CHECK(options_.activation == "relu" || options_.activation == "gelu", "encoder_layer: activation '",
               options_.activation, "' is neither 'relu' nor 'gelu'");
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const Tensor& key_padding_mask) {
  return dropout1_.forward(self_attn_.forward(x, key_padding_mask));
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  Tensor h = ops::linear(x, linear1_weight_, linear1_bias_);
  h = options_.activation == "gelu" ? ops::gelu(h) : ops::relu(h);
  return dropout2_.forward(ops::linear(dropout_.forward(h), linear2_weight_, linear2_bias_));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& key_padding_mask) {
  DPCORE_CHECK(x.defined() && x.dim() == 3 && x.size(2) == d_model_, "encoder_layer: input ",
               x.defined() ? shape_str(x.shape()) : std::string("undefined"), " is not [N, T, d_model ", d_model_,
               "]");
  check_key_padding_mask("encoder_layer", x, key_padding_mask);
  if (options_.norm_first) {
    Tensor h = ops::add(x, self_attention_block(norm1_.forward(x), key_padding_mask));
    return ops::add(h, feed_forward_block(norm2_.forward(h)));
  }
  Tensor h = norm1_.forward(ops::add(x, self_attention_block(x, key_padding_mask)));
  return norm2_.forward(ops::add(h, feed_forward_block(h)));
}

Shape TransformerEncoderLayer::output_shape(const Shape& input) const {
  DPCORE_CHECK(input.size() == 3 && input[2] == d_model_, "encoder_layer: input ", shape_str(input),
               " is not [N, T, d_model ", d_model_, "]");
  return input;
}

std::string TransformerEncoderLayer::describe() const {
  std::ostringstream os;
  os << "encoder_layer(" << d_model_ << ", heads " << nhead_ << ", ff " << options_.dim_feedforward;
  if (options_.dropout > 0) os << ", dropout " << options_.dropout;
  if (options_.activation != "relu") os << ", " << options_.activation;
  if (options_.layer_norm_eps != 1e-5) os << ", eps " << options_.layer_norm_eps;
  if (options_.norm_first) os << ", norm_first";
  if (options_.causal) os << ", causal";
  os << ")";
  return os.str();
}

std::unique_ptr<Module> TransformerEncoderLayer::clone() const {
  return std::make_unique<TransformerEncoderLayer>(d_model_, nhead_, options_);
}

void TransformerEncoderLayer::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  const int64_t d = d_model_, ff = options_.dim_feedforward;
  // torch's declaration order: self_attn, linear1, linear2, norm1, norm2.
  self_attn_.collect_parameters(qualified_name(prefix, "self_attn"), out);
  const size_t first = out.size();
  out.push_back({qualified_name(prefix, "linear1.weight"), {ff, d}, ParamInit::pytorch_default(d), &linear1_weight_});
  out.push_back({qualified_name(prefix, "linear1.bias"), {ff}, ParamInit::pytorch_default(d), &linear1_bias_});
  out.push_back({qualified_name(prefix, "linear2.weight"), {d, ff}, ParamInit::pytorch_default(ff), &linear2_weight_});
  out.push_back({qualified_name(prefix, "linear2.bias"), {d}, ParamInit::pytorch_default(ff), &linear2_bias_});
  mark_autocast_operands(out, first);
  norm1_.collect_parameters(qualified_name(prefix, "norm1"), out);
  norm2_.collect_parameters(qualified_name(prefix, "norm2"), out);
}

void TransformerEncoderLayer::apply(const std::function<void(Module&)>& f) {
  f(*this);
  for (Module* child : std::initializer_list<Module*>{&self_attn_, &dropout_, &norm1_, &norm2_, &dropout1_, &dropout2_})
    child->apply(f);
}

// ---------------------------------------------------------------- TransformerEncoder
TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers, bool final_norm) {
  DPCORE_CHECK(num_layers > 0, "transformer_encoder: num_layers ", num_layers, " must be positive");
  for (int64_t i = 0; i < num_layers; ++i)
    layers_.emplace_back(static_cast<TransformerEncoderLayer*>(layer.clone().release()));
  if (final_norm) norm_ = std::make_unique<LayerNorm>(layer.d_model(), layer.options().layer_norm_eps);
}

Tensor TransformerEncoder::forward(const Tensor& x, const Tensor& key_padding_mask) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h, key_padding_mask);
  return norm_ ? norm_->forward(h) : h;
}

Shape TransformerEncoder::output_shape(const Shape& input) const { return layers_.front()->output_shape(input); }

std::string TransformerEncoder::describe() const {
  return "encoder(" + std::to_string(layers_.size()) + " x " + layers_.front()->describe() + (norm_ ? ", norm)" : ")");
}

std::unique_ptr<Module> TransformerEncoder::clone() const {
  return std::make_unique<TransformerEncoder>(*layers_.front(), int64_t(layers_.size()), norm_ != nullptr);
}

void TransformerEncoder::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  for (size_t i = 0; i < layers_.size(); ++i)
    layers_[i]->collect_parameters(qualified_name(prefix, "layers." + std::to_string(i)), out);
  if (norm_) norm_->collect_parameters(qualified_name(prefix, "norm"), out);
}

void TransformerEncoder::apply(const std::function<void(Module&)>& f) {
  f(*this);
  for (auto& layer : layers_) layer->apply(f);
  if (norm_) norm_->apply(f);
}

}  // namespace dpcore::layers
