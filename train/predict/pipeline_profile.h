// What the pipeline model (train/predict/pipeline_model.h) needs, measured on this machine's
// CPU: each layer's forward and backward on one micro-batch, the bytes each layer's output
// and parameters take, the optimizer's step; and the link between two stage threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/cpu_team.h"
#include "engine/sgd.h"
#include "layers/model.h"
#include "train/predict/pipeline_model.h"

namespace dpcore::train {

// `model` on one micro-batch (x, y): measure_layer_costs (train/pipeline/pipeline_step.h) after
// `warmup` untimed batches, the medians of `repeats`; each layer's output bytes for x's
// rows and its parameters' bytes; the optimizer's step (measure_step_profile's). The model
// trains a few steps.
scaling::PipelineProfile measure_pipeline_profile(layers::Model& model, const Tensor& x, const Tensor& y,
                                                  const SgdConfig& config, int warmup, int repeats);

// One end's cost of a message between two pipeline stages of this process: a send and recv
// ping-pong between two threads over a local group (as PipelineThreads' stages talk),
// `repeats` round trips of 4 KiB and of `bytes`, the medians. A one-way transfer costs
// its two ends alike (each waits while its communication thread wakes and copies), so
// one end's latency and bandwidth are fitted to half the one-way time, as
// predict_pipeline charges them.
scaling::Link measure_p2p_link(int64_t bytes, int repeats);

// How much slower a step's forward and backward on (x, y) runs while one thread on each of
// `teams` (engine/cpu_team.h: each pinned to its team's cores, as a pipeline's stages are)
// runs it at once, each on a model of its own, than a thread on the first team alone: the
// median of the threads' median iterations over the median alone, after `warmup`
// untimed iterations each, in 7 rounds of alone then together (the median ratio: the
// machine's speed drifts). The pipeline model's compute factor.
double measure_side_by_side_slowdown(const std::function<std::unique_ptr<layers::Model>()>& make_model,
                                     const Tensor& x, const Tensor& y, const std::vector<runtime::CpuTeam>& teams,
                                     int warmup, int repeats);

}  // namespace dpcore::train
