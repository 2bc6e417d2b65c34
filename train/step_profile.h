// What the scaling model (train/scaling_model.h) needs to know about one replica's step,
// measured: the forward, backward and optimizer times, and when each parameter's gradient
// becomes final during backward (the order and times at which DDP's buckets become
// ready). CPU models only: there a gradient is final when its post-accumulate hook runs,
// while on a GPU the hook runs when the work is queued, not done.
#pragma once

#include "engine/sgd.h"
#include "engine/tensor.h"
#include "layers/model.h"
#include "train/scaling_model.h"

namespace dpcore::train {

// Runs `warmup` then `steps` SGD steps of `model` on (x, y) and returns the medians over
// the timed steps: forward (through the loss), backward, optimizer, and each parameter's
// ready time after backward began. The model's parameters change (it trains).
scaling::StepProfile measure_step_profile(layers::Model& model, const Tensor& x, const Tensor& y,
                                          const SgdConfig& config, int warmup, int steps);

}  // namespace dpcore::train
