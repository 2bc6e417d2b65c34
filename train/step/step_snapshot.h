// A copy of one replica's training state, taken before a step and put back when the step is
// abandoned: --on-replica-failure shrink (train/faults/replica_failure.h) promises that a failed
// step leaves no partial update, even where some survivors had already reduced, stepped or
// updated their batch norm statistics before the failure reached them.
//
// What is copied is exactly what a checkpoint holds of a replica: the parameters, the
// optimizer's state tensors (SGD's momentum, Adam's two moments), the batch norm buffers and
// the optimizer's step count. The copies stay allocated from one step to the next, on the
// replica's device: taking a snapshot is a few device copies and no allocation.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/optimizer.h"
#include "layers/model.h"

namespace dpcore::train {

class StepSnapshot {
 public:
  void take(const layers::Model& model, const Optimizer& optimizer);
  // Into `model` and `optimizer`, which may be another replica's (on another device) of the same
  // model: the state becomes the one `take` copied.
  void restore(layers::Model& model, Optimizer& optimizer) const;

 private:
  Tensor values_, buffers_;     // buffers_ undefined without batch norm
  std::vector<Tensor> state_;  // the optimizer's, in the order of Optimizer::state
  int64_t steps_ = 0;
  bool taken_ = false;
};

}  // namespace dpcore::train
