#include "train/step/step_snapshot.h"

#include "engine/runtime.h"
#include "kernels/error.h"

namespace dpcore::train {

namespace {
// `from` into `into`, allocating `into` like `from` the first time (or when the device changed).
void copy_into(Tensor& into, const Tensor& from) {
  if (!from.defined() || from.numel() == 0) {
    into = Tensor();
    return;
  }
  if (!into.defined() || into.device() != from.device() || into.numel() != from.numel()) {
    into = from.clone();
    return;
  }
  into.copy_(from);
}
}  // namespace

void StepSnapshot::take(const layers::Model& model, const Optimizer& optimizer) {
  copy_into(values_, model.parameters().values());
  const std::vector<OptimizerState> state = optimizer.state();
  state_.resize(state.size());
  for (size_t i = 0; i < state.size(); ++i) copy_into(state_[i], state[i].tensor);
  copy_into(buffers_, model.has_batch_norm() ? model.buffers().values() : Tensor());
  steps_ = optimizer.steps_taken();
  taken_ = true;
  // Copied on this thread's stream, while the replicas step on theirs: done before they start.
  runtime::synchronize(model.device());
}

void StepSnapshot::restore(layers::Model& model, Optimizer& optimizer) const {
  DPCORE_CHECK(taken_, "StepSnapshot::restore: no snapshot was taken");
  model.parameters().values().copy_(values_);
  if (buffers_.defined()) model.buffers().values().copy_(buffers_);
  optimizer.restore(state_, steps_);
  runtime::synchronize(model.device());
}

}  // namespace dpcore::train
