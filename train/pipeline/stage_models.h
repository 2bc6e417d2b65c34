// The models a pipeline's stages run when they are on devices of their own (--stages
// "0-3@cuda:0,4-7@cuda:1"): the model itself for the stages on its device, and one copy
// of it on each other device a stage names.
//
// The model (the master) stays whole: the runner's model(), what checkpoints save and
// evaluation reads, and the one flat buffer the optimizer steps in one pass. Each step
// moves only what a stage owns: before the batch, pull() copies each stage's range of the
// flat parameters (and of the buffers: batch norm's running statistics) from the master
// to the copy it runs on; after it, push() copies the stage's range of the gradients and
// of the buffers back. A copy's other ranges are never read. That is one flat copy of the
// parameters and of the gradients over the devices' link per step, the price of keeping
// the optimizer step one fused pass on one device (docs/pipelines.md, "Stages on GPUs").
//
// Every copy runs on the calling thread's current stream of each device, and both calls
// wait for them to finish: the stages' threads run on streams of their own, which CUDA
// does not order after the caller's.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "layers/model.h"
#include "train/pipeline/pipeline_step.h"
#include "train/pipeline/stage_plan.h"

namespace dpcore::train::pipeline {

class StageModels {
 public:
  // Copies `master` to each device of `stages` other than its own (one copy per device,
  // shared by the stages on it). Refuses a stage device that is not the master's kind
  // (the master on the CPU with a stage on a GPU, or the other way round), naming it.
  StageModels(layers::Model& master, const std::vector<Stage>& stages);

  // models()[s]: the model stage s runs (StageWork's per-stage constructor).
  const std::vector<layers::Model*>& models() const { return per_stage_; }
  // What each step moves between the master and each copy (none: every stage on the
  // master's device): its device, and the elements of its stages' parameters (pulled; their
  // gradients, pushed, are as many) and buffers (both ways).
  struct CopyTraffic {
    Device device;
    int64_t parameter_elements = 0, buffer_elements = 0;
  };
  std::vector<CopyTraffic> traffic() const;

  // Before a batch: each copy's gradients zeroed and its stages' parameters and buffers
  // from the master. (The master's own gradients are the runner's to zero.)
  void pull();
  // After the batch: each copy's stages' gradients and buffers into the master.
  void push();

 private:
  // move(copy, parameters, buffers) for each stage that runs on a copy, with its ranges of
  // the flat buffers (the caller waits for what it queued).
  void for_copied_stages(const std::function<void(layers::Model&, const FlatRange&, const FlatRange&)>& move) const;
  // Waits for the calling thread's copies on every device of the pipeline.
  void wait_for_copies() const;

  layers::Model& master_;
  std::vector<std::unique_ptr<layers::Model>> copies_;  // one per device other than the master's
  std::vector<layers::Model*> per_stage_;               // the master or a copy
  std::vector<FlatRange> parameters_, buffers_;         // per stage, when there are copies
};

}  // namespace dpcore::train::pipeline
