#include "layers/transformer/modules.h"

#include <sstream>

namespace dpcore::layers {

// ---------------------------------------------------------------- Embedding
Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx,
                     double init_std)
    : num_(num_embeddings), dim_(embedding_dim), init_std_(init_std) {
  DPCORE_CHECK(num_ > 0 && dim_ > 0, "embedding: num_embeddings ", num_, " and embedding_dim ", dim_,
               " must both be positive");
  if (padding_idx) {
    DPCORE_CHECK(*padding_idx >= -num_ && *padding_idx < num_, "embedding: padding_idx ", *padding_idx,
                 " is outside [-", num_, ", ", num_, ") (num_embeddings ", num_, ")");
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_ : *padding_idx;
  }
}

Tensor Embedding::forward(const Tensor& ids) { return ops::embedding(ids, weight_, padding_idx_); }

Shape Embedding::output_shape(const Shape& input) const {
  DPCORE_CHECK(!input.empty(), "embedding: input ", shape_str(input), " has no batch dimension (ids [N, ...])");
  Shape out = input;
  out.push_back(dim_);
  return out;
}

std::string Embedding::describe() const {
  std::ostringstream os;
  os << "embedding(" << num_ << "x" << dim_;
  if (padding_idx_) os << ", padding " << *padding_idx_;
  os << ")";
  return os.str();
}

std::unique_ptr<Module> Embedding::clone() const {
  return std::make_unique<Embedding>(num_, dim_, padding_idx_, init_std_);
}

void Embedding::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  ParamInit init{ParamInit::Kind::Normal, init_std_};
  init.zero_row = padding_idx_.value_or(-1);  // drawn with the rest, then zeroed, as PyTorch does
  out.push_back({qualified_name(prefix, "weight"), {num_, dim_}, init, &weight_});
}

// ---------------------------------------------------------------- LayerNorm
LayerNorm::LayerNorm(int64_t normalized_shape, double eps, bool weight_decay)
    : dim_(normalized_shape), eps_(eps), weight_decay_(weight_decay) {
  DPCORE_CHECK(dim_ > 0, "layer_norm: normalized_shape ", dim_, " must be positive");
  DPCORE_CHECK(eps_ > 0, "layer_norm: eps ", eps_, " must be positive");
}

Shape LayerNorm::output_shape(const Shape& input) const {
  DPCORE_CHECK(!input.empty() && input.back() == dim_, "layer_norm: input ", shape_str(input),
               " does not end in the normalized dimension ", dim_);
  return input;
}

std::string LayerNorm::describe() const {
  std::ostringstream os;
  os << "layer_norm(" << dim_ << ", eps " << eps_ << ")";
  return os.str();
}

std::unique_ptr<Module> LayerNorm::clone() const { return std::make_unique<LayerNorm>(dim_, eps_, weight_decay_); }

void LayerNorm::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  ParamSlot weight{qualified_name(prefix, "weight"), {dim_}, ParamInit::constant(1.0), &weight_};
  ParamSlot bias{qualified_name(prefix, "bias"), {dim_}, ParamInit::constant(0.0), &bias_};
  weight.weight_decay = bias.weight_decay = weight_decay_;
  out.push_back(weight);
  out.push_back(bias);
}

// ---------------------------------------------------------------- GELU
GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  DPCORE_CHECK(approximate_ == "none" || approximate_ == "tanh", "gelu: approximate '", approximate_,
               "' is neither 'none' nor 'tanh'");
}

// ---------------------------------------------------------------- Dropout
Dropout::Dropout(double p) : p_(p) {
  DPCORE_CHECK(p_ >= 0.0 && p_ <= 1.0, "dropout: p = ", p_, " is outside [0, 1]");
}

Tensor Dropout::forward(const Tensor& x) {
  return ops::dropout(x, {p_, is_training(), position_.seed, position_.step, position_.first_sample});
}

std::string Dropout::describe() const {
  std::ostringstream os;
  os << "dropout(" << p_ << ")";
  return os.str();
}

}  // namespace dpcore::layers
