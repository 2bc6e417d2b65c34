// A copy of one replica's training state, taken before a step and put back when the step is
// abandoned: --on-replica-failure shrink (train/replica_failure.h) promises that a failed
// step leaves no partial update, even where some survivors had already reduced, stepped or
// updated their batch norm statistics before the failure reached them.
//
// What is copied is exactly what a checkpoint holds of a replica: the parameters, the
// momentum buffer, the batch norm buffers and the optimizer's step count. The copies stay
// allocated from one step to the next, on the replica's device: taking a snapshot is two or
// three device copies and no allocation.
#pragma once

#include <cstdint>

#include "engine/sgd.h"
#include "layers/model.h"

namespace dpcore::train {

class StepSnapshot {
 public:
  void take(const layers::Model& model, const Sgd& sgd);
  // Into `model` and `sgd`, which may be another replica's (on another device) of the same
  // model: the state becomes the one `take` copied.
  void restore(layers::Model& model, Sgd& sgd) const;

 private:
  Tensor values_, momentum_, buffers_;  // momentum_ undefined without momentum, buffers_ without batch norm
  int64_t steps_ = 0;
  bool taken_ = false;
};

}  // namespace dpcore::train
