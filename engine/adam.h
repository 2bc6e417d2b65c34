// Adam and AdamW with torch.optim.Adam's and torch.optim.AdamW's exact semantics (bias
// correction, eps outside the square root, L2 or decoupled weight decay), as ONE fused pass
// over the flat buffers: parameters, gradients and the two moment buffers share one layout,
// so a single kernel launch updates every parameter of the model. Weight decay skips the
// tensors whose ParamSpec::weight_decay is false (BERT's biases and LayerNorm weights), as a
// PyTorch parameter group with weight_decay 0 would, through a bit mask over the layout.
#pragma once

#include "engine/flat_parameters.h"
#include "engine/optimizer.h"
#include "kernels/adam_config.h"

namespace dpcore {

class Adam : public Optimizer {
 public:
  Adam(FlatParameters& params, const AdamConfig& config);

  // "adam", or "adamw" with decoupled weight decay.
  std::string name() const override { return config_.decoupled ? "adamw" : "adam"; }
  const AdamConfig& config() const { return config_; }
  void set_lr(double lr) override;
  // beta1, as PyTorch's OneCycleLR cycles betas[0]; in [0, 1).
  void set_momentum(double momentum) override;
  // lr, beta1, beta2, eps, weight decay, decoupled.
  std::vector<double> hyper_parameters() const override;
  // PyTorch's "exp_avg" and "exp_avg_sq" (same layout as the parameters; zeros before the
  // first step). With the step count (bias correction uses it), the whole state.
  std::vector<OptimizerState> state() const override;
  using Optimizer::state;
  const Tensor& exp_avg() const { return exp_avg_; }
  const Tensor& exp_avg_sq() const { return exp_avg_sq_; }

 protected:
  void apply(Tensor& values) override;
  double lr() const override { return config_.lr; }
  // No: every step passes its own bias corrections to the kernel.
  bool update_replayable() const override { return false; }

 private:
  AdamConfig config_;
  Tensor exp_avg_, exp_avg_sq_;
  Tensor decay_mask_;  // undefined when every tensor decays (or nothing does)
};

}  // namespace dpcore
