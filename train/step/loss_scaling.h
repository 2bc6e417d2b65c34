// Dynamic loss scaling in training (--precision fp16, docs/mixed-precision.md): the
// GradScaler of engine/grad_scaler.h inside a step, the same way on every runner that has
// one (one device, dp, ddp). Each micro-batch's backward is seeded with the step's usual
// 1/(counted targets) times the scale, so the float16 gradients of small losses do not
// underflow; after the reduction every replica unscales the same reduced float32 gradient
// in one pass that also looks for an Inf or NaN, steps unless it found one, and updates the
// scale (backoff after an Inf or NaN, growth after 2000 clean steps): the same decision and
// the same scale on every replica, as --skip-nonfinite's. bfloat16 needs no scaling (its
// range is float32's), as in PyTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/grad_scaler.h"
#include "layers/model.h"

namespace dpcore::train {

// A GradScaler with PyTorch's defaults for a model whose precision is float16; null for
// any other precision.
std::unique_ptr<GradScaler> make_loss_scaler(const layers::Model& model);

// The seed of every micro-batch's backward: gradient_scale(counted) (train/step/step.h),
// times the scale when there is a scaler.
double backward_seed(int64_t counted, const GradScaler* scaler);

// The optimizer step after the reduction, through the scaler: the gradient buffer unscaled
// in place, the step taken unless it held an Inf or NaN, the scale updated. Returns whether
// it found an Inf or NaN (the step was skipped: parameters and optimizer state unchanged,
// the step count too).
bool scaled_step(GradScaler& scaler, Optimizer& optimizer, const Tensor& grads);

// After every replica's scaled_step at `step`: overflowed[r] is replica r's finding. They
// stepped on the same reduced gradients, so they agree; one that does not stops the run,
// naming it (its reduced gradients differ from replica 0's).
void check_replicas_agree_on_overflow(const std::vector<char>& overflowed, int64_t step);

}  // namespace dpcore::train
