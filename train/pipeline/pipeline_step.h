// One batch's forwards and backwards through pipeline stages: the reference executor, on
// one thread. Each stage runs its layers (a range of the model's top-level children) on
// each micro-batch in the order its schedule gives it; ops run in the order of the
// schedule's unit-tick run, so every op finds its input there: a forward the activations
// the stage below sent, a backward the gradient the stage above sent back. What crosses a
// stage boundary is a plain tensor, as it would be over send/recv: the receiving stage
// makes it a leaf that requires a gradient, and that leaf's gradient is what goes back.
//
// The gradient is the exact accumulation rule of train/step/step.h: micro-batch m is cut
// as --accum M cuts it, its backward is seeded with grad_scale, and each parameter adds
// its micro-batches' gradients in order 0..M-1 (gpipe and 1f1b run backwards in that
// order), so the result is one device's accumulate_gradients with M micro-batches.
#pragma once

#include <vector>

#include "layers/model.h"
#include "train/pipeline/pipeline_schedule.h"
#include "train/pipeline/stage_plan.h"
#include "train/step/step.h"

namespace dpcore::train::pipeline {

struct PipelineStepStats {
  // Per stage: the most micro-batches whose forward graph (activations) the stage held at
  // once, counted as the executor holds them.
  std::vector<int> peak_live_activations;
};

// Accumulates grad_scale * d(summed loss)/dparams of batch (x, y) into the model's gradient
// buffer through `stages` (which must cover the model's layers, parse_stages' rule), and
// returns the batch's summed loss. The stages' devices are not used yet: every stage runs
// on the model's device. Refuses stages that do not cover the model and more micro-batches
// than samples.
Tensor pipeline_accumulate_gradients(Model& model, const std::vector<Stage>& stages, Schedule schedule,
                                     int micro_batches, const Tensor& x, const Tensor& y, double grad_scale,
                                     BatchStart start, PipelineStepStats* stats = nullptr);

}  // namespace dpcore::train::pipeline
