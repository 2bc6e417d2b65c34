// What the scaling model (train/predict/scaling_model.h) needs to know about one replica's step,
// measured: the forward, backward and optimizer times, and when each parameter's gradient
// becomes final during backward (the order and times at which DDP's buckets become
// ready). CPU models only: there a gradient is final when its post-accumulate hook runs,
// while on a GPU the hook runs when the work is queued, not done.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/sgd.h"
#include "engine/tensor.h"
#include "layers/model.h"
#include "train/predict/scaling_model.h"

namespace dpcore::train {

// Runs `warmup` then `steps` SGD steps of `model` on (x, y) and returns the medians over
// the timed steps: forward (through the loss), backward, optimizer, and each parameter's
// ready time after backward began. The model's parameters change (it trains).
scaling::StepProfile measure_step_profile(layers::Model& model, const Tensor& x, const Tensor& y,
                                          const SgdConfig& config, int warmup, int steps);

// How much slower one replica's step runs when `copies` replicas of it share the CPU, each
// on its own thread, through the data-parallel runner (its threads, its scatter) but with
// no communication (local SGD that never averages), than alone through the one-device
// runner: the median step of the replicas over the median step alone (timed before and
// after them), after `warmup` steps of each. The busy slowdown of the scaling model's CPU
// nodes, with copies = the node's cores / the kernel threads per replica. `images` and
// `labels` are one replica's batch of samples shaped `sample` (CxHxW).
double measure_busy_slowdown(const std::function<std::unique_ptr<layers::Model>()>& make_model,
                             const std::vector<float>& images, const std::vector<int64_t>& labels,
                             const Shape& sample, const SgdConfig& config, int copies, int warmup, int steps);

}  // namespace dpcore::train
