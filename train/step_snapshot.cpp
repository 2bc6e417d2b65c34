#include "train/step_snapshot.h"

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

void StepSnapshot::take(const layers::Model& model, const Sgd& sgd) {
  copy_into(values_, model.parameters().values());
  copy_into(momentum_, sgd.momentum());
  copy_into(buffers_, model.has_batch_norm() ? model.buffers().values() : Tensor());
  steps_ = sgd.steps_taken();
  taken_ = true;
  // Copied on this thread's stream, while the replicas step on theirs: done before they start.
  runtime::synchronize(model.device());
}

void StepSnapshot::restore(layers::Model& model, Sgd& sgd) const {
  DPCORE_CHECK(taken_, "StepSnapshot::restore: no snapshot was taken");
  model.parameters().values().copy_(values_);
  if (buffers_.defined()) model.buffers().values().copy_(buffers_);
  sgd.restore(momentum_, steps_);
  runtime::synchronize(model.device());
}

}  // namespace dpcore::train
