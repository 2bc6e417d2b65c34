// The hyper-parameters of an SGD step, shared by the CPU and CUDA sgd_step kernels and the
// optimizer (engine/sgd.h).
#pragma once

namespace dpcore::kernels {

// Hyper-parameters of torch.optim.SGD, applied in PyTorch's order (kernels/cpu/kernels.h spells the update out).
struct SgdConfig {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

}  // namespace dpcore::kernels
