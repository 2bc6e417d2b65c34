// SGD with torch.optim.SGD's exact semantics, as ONE fused pass over the flat buffers:
// parameters, gradients and the momentum buffer share one layout, so a single kernel
// launch updates every parameter of the model.
#pragma once

#include "engine/flat_parameters.h"
#include "kernels/sgd_config.h"
#include "kernels/shapes.h"

namespace dpcore {

using SgdConfig = kernels::SgdConfig;

class Sgd {
 public:
  Sgd(FlatParameters& params, const SgdConfig& config);

  void step();
  // A CUDA graph that contains step(): recording it runs nothing, so the step it counted is
  // taken back; each replay then counts one.
  void uncount_recorded_step() { --steps_; }
  void count_replayed_step() { ++steps_; }
  const SgdConfig& config() const { return config_; }
  // A new learning rate from the next step on (a schedule; PyTorch's param_group["lr"]).
  // A runner that replays a recorded step sees the change and records anew.
  void set_lr(double lr);
  // A new momentum from the next step on (PyTorch's param_group["momentum"], as OneCycleLR
  // cycles it). Only between values > 0: the buffer exists only when the optimizer was
  // built with momentum, and nesterov needs it > 0.
  void set_momentum(double momentum);
  int64_t steps_taken() const { return steps_; }
  // Host seconds the last step() took (on a GPU, its launch), for the per-epoch breakdown
  // of train/step_times.h.
  double last_step_seconds() const { return last_step_seconds_; }

  // State for checkpoints: the momentum buffer (same layout as the parameters; undefined
  // when momentum is 0) and the step count (the first step initialises the buffer).
  const Tensor& momentum() const { return momentum_; }
  void restore(const Tensor& momentum, int64_t steps);
  // The step count alone (local SGD: a replica that sat out steps with an empty share takes
  // the run's count at the averaging that gives it the others' momentum).
  void set_steps_taken(int64_t steps);

 private:
  FlatParameters& params_;
  SgdConfig config_;
  Tensor momentum_;
  int64_t steps_ = 0;
  double last_step_seconds_ = 0;
};

}  // namespace dpcore
