// SGD with torch.optim.SGD's exact semantics, as ONE fused pass over the flat buffers:
// parameters, gradients and the momentum buffer share one layout, so a single kernel
// launch updates every parameter of the model.
#pragma once

#include "engine/flat_parameters.h"
#include "engine/optimizer.h"
#include "kernels/sgd_config.h"
#include "kernels/shapes.h"

namespace dpcore {

class Sgd : public Optimizer {
 public:
  Sgd(FlatParameters& params, const SgdConfig& config);

  std::string name() const override { return "sgd"; }
  const SgdConfig& config() const { return config_; }
  // A runner that replays a recorded step sees the change and records anew.
  void set_lr(double lr) override;
  // PyTorch's param_group["momentum"], as OneCycleLR cycles it. Only between values > 0:
  // the buffer exists only when the optimizer was built with momentum, and nesterov needs
  // it > 0.
  void set_momentum(double momentum) override;
  // lr, momentum, dampening, weight decay, nesterov. (Whether the step is the first, which
  // initialises the momentum buffer, a runner checks on its own: steps_taken() == 0.)
  std::vector<double> hyper_parameters() const override;
  // "momentum" (same layout as the parameters), none when momentum is 0.
  std::vector<OptimizerState> state() const override;
  using Optimizer::state;
  const Tensor& momentum() const { return momentum_; }  // undefined when momentum is 0

 protected:
  void apply(Tensor& values) override;
  double lr() const override { return config_.lr; }
  bool update_replayable() const override { return true; }

 private:
  SgdConfig config_;
  Tensor momentum_;
};

}  // namespace dpcore
