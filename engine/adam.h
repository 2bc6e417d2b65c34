// Adam and AdamW with torch.optim.Adam's and torch.optim.AdamW's exact semantics (bias
// correction, eps outside the square root, L2 or decoupled weight decay), as ONE fused pass
// over the flat buffers: parameters, gradients and the two moment buffers share one layout,
// so a single kernel launch updates every parameter of the model. Weight decay skips the
// tensors whose ParamSpec::weight_decay is false (BERT's biases and LayerNorm weights), as a
// PyTorch parameter group with weight_decay 0 would, through a bit mask over the layout.
#pragma once

#include "engine/flat_parameters.h"
#include "kernels/adam_config.h"

namespace dpcore {

using AdamConfig = kernels::AdamConfig;

class Adam {
 public:
  Adam(FlatParameters& params, const AdamConfig& config);

  void step();
  const AdamConfig& config() const { return config_; }
  // A new learning rate from the next step on (a schedule; PyTorch's param_group["lr"]).
  void set_lr(double lr);
  int64_t steps_taken() const { return steps_; }
  // Host seconds the last step() took (on a GPU, its launch), as Sgd::last_step_seconds.
  double last_step_seconds() const { return last_step_seconds_; }

  // State for checkpoints: PyTorch's exp_avg and exp_avg_sq (same layout as the
  // parameters; zeros before the first step) and the step count (bias correction uses it).
  const Tensor& exp_avg() const { return exp_avg_; }
  const Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  void restore(const Tensor& exp_avg, const Tensor& exp_avg_sq, int64_t steps);

 private:
  FlatParameters& params_;
  AdamConfig config_;
  Tensor exp_avg_, exp_avg_sq_;
  Tensor decay_mask_;  // undefined when every tensor decays (or nothing does)
  int64_t steps_ = 0;
  double last_step_seconds_ = 0;
};

}  // namespace dpcore
