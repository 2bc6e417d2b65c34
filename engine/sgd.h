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
  // Counts a step taken by replaying a captured CUDA graph that contains step().
  void count_replayed_step() { ++steps_; }
  const SgdConfig& config() const { return config_; }
  int64_t steps_taken() const { return steps_; }

  // State for checkpoints: the momentum buffer (same layout as the parameters; undefined
  // when momentum is 0) and the step count (the first step initialises the buffer).
  const Tensor& momentum() const { return momentum_; }
  void restore(const Tensor& momentum, int64_t steps);

 private:
  FlatParameters& params_;
  SgdConfig config_;
  Tensor momentum_;
  int64_t steps_ = 0;
};

}  // namespace dpcore
