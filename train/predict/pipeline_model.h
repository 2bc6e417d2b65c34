// The step-time model of a pipeline and of pipeline x data parallel (docs/scaling.md,
// "Pipelines"): how long one step of P stages x D replicas takes, from each layer's
// measured forward and backward time on a micro-batch and the bytes that cross each stage
// boundary.
//
//   stage costs   a stage's forward (backward) of one micro-batch is the sum of its layers'
//                 measured forwards (backwards) times `compute_factor` (stages computing
//                 side by side on one node slow each other: the scaling model's busy
//                 slowdown), plus link.seconds(bytes) for each message it sends or
//                 receives: in dpcore a stage waits while its communication thread wakes
//                 and copies the payload out (send) or in (recv), so both ends pay;
//   the schedule  the stages' orders of naive / gpipe / 1f1b simulated with those costs
//                 (train/pipeline/pipeline_schedule.h simulate: an op runs when its stage
//                 is free and its input has come);
//   replicas      with D > 1, each stage's gradients (its parameters' bytes) are allreduced
//                 among its D replicas once its last backward ends, one allreduce per
//                 stage on its own group, overlapping the other stages' drain;
//   the step      the last stage's reduction to end, then the optimizer over the whole
//                 model (each replica steps its whole flat buffer).
//
// What it leaves out: stages that share cores (the model gives each stage a processor of
// its own, as a GPU per stage has), and the variance of op times (the simulation takes one
// cost per stage and direction; a slow op delays everyone after it).
#pragma once

#include <cstdint>
#include <vector>

#include "train/pipeline/pipeline_schedule.h"
#include "train/pipeline/pipeline_step.h"
#include "train/pipeline/stage_plan.h"
#include "train/predict/scaling_model.h"

namespace dpcore::train::scaling {

// One replica's pipelined step, measured per layer on one micro-batch.
struct PipelineProfile {
  std::vector<pipeline::LayerCost> layers;  // forward and backward per layer
  std::vector<int64_t> output_bytes;        // per layer: its output on one micro-batch (what crosses after it)
  std::vector<int64_t> param_bytes;         // per layer: its parameters' bytes
  double optimizer_s = 0;                   // one optimizer step over the whole model
};

struct PipelinePrediction {
  double step_s = 0;       // one optimizer step
  double pipeline_s = 0;   // the first forward's start to the last backward's end
  double bubble = 0;       // the stages' idle share of P x pipeline_s
  double transfer_s = 0;   // per stage and micro-batch, the most a stage spends on its messages (both directions)
  int64_t p2p_bytes = 0;   // bytes sent between stages in one step of one replica (activations up, gradients down)
  double exposed_allreduce_s = 0;  // the stages' reductions past the pipeline's end
  std::vector<double> stage_forward_s, stage_backward_s;  // per stage and micro-batch, copies included
};

// `stages` cover the profile's layers in order (parse_stages' rule); `link` is one end's
// cost of a message between stages (measure_p2p_link's fit); the reductions run on
// `cluster`'s links over `replicas`.
PipelinePrediction predict_pipeline(const PipelineProfile& profile, const std::vector<pipeline::Stage>& stages,
                                    pipeline::Schedule schedule, int micro_batches, int replicas, const Link& link,
                                    const Cluster& cluster, Algorithm algorithm, double compute_factor = 1.0);

}  // namespace dpcore::train::scaling
