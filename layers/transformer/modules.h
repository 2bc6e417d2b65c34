// The modules a transformer is built from, mirroring torch.nn: Embedding, LayerNorm, GELU,
// Tanh and Dropout. Each is a thin module over its op (engine/ops.h), declaring its
// parameter slots with PyTorch's names and initialisation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "layers/module.h"

namespace dpcore::layers {

// torch.nn.Embedding(num_embeddings, embedding_dim, padding_idx): int64 ids [N, ...] pick
// rows of weight [V, D], giving [N, ..., D]. The weight starts N(0, 1) as in PyTorch (BERT
// passes N(0, 0.02^2)), with the padding row zeroed; that row gets no gradient.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            double init_std = 1.0);
  Tensor forward(const Tensor& ids) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;  // "embedding(30522x128, padding 0)"
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;
  bool takes_token_ids() const override { return true; }

  // The bound weight [V, D] (a decoder tied to it multiplies by it too).
  const Tensor& weight() const { return weight_; }
  int64_t num_embeddings() const { return num_; }
  int64_t embedding_dim() const { return dim_; }

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;  // in [0, V) once constructed (a negative one counts from V)
  double init_std_;
  Tensor weight_;
};

// torch.nn.LayerNorm(D, eps): over the last dimension, affine (weight 1, bias 0 at the start).
// `weight_decay` is the flag of its two parameters in the flat layout (engine/flat_parameters.h):
// BERT's convention turns decay off for LayerNorm weights and all biases.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool weight_decay = true);
  Tensor forward(const Tensor& x) override { return ops::layer_norm(x, weight_, bias_, eps_); }
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;  // "layer_norm(128, eps 1e-12)"
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;

 private:
  int64_t dim_;
  double eps_;
  bool weight_decay_;
  Tensor weight_, bias_;
};

// torch.nn.GELU(approximate): "none" (erf) or "tanh".
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override { return ops::gelu(x, approximate_); }
  Shape output_shape(const Shape& input) const override { return input; }
  std::string describe() const override { return approximate_ == "none" ? "gelu" : "gelu(" + approximate_ + ")"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<GELU>(approximate_); }

 private:
  std::string approximate_;
};

// torch.nn.Tanh (BERT's pooler).
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return ops::tanh(x); }
  Shape output_shape(const Shape& input) const override { return input; }
  std::string describe() const override { return "tanh"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<Tanh>(); }
};

// torch.nn.Dropout(p): in training mode each element is zeroed with probability p and the
// rest scaled by 1 / (1 - p); in eval mode (and for p = 0) the identity. The mask is a pure
// function of this module's stream key, the step and the global sample index
// (Model::set_batch_position, kernels/dropout_config.h), so it is the same however the
// batch is split, on every backend, and on resume.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override { return input; }
  std::string describe() const override;  // "dropout(0.1)"
  std::unique_ptr<Module> clone() const override { return std::make_unique<Dropout>(p_); }
  void set_batch_position(const BatchPosition& position) override { position_ = position; }
  bool draws_random_numbers() const override { return is_training() && p_ > 0; }
  double p() const { return p_; }

 private:
  double p_;
  BatchPosition position_;
};

}  // namespace dpcore::layers
