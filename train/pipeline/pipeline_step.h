// One batch's forwards and backwards through pipeline stages.
//
// StageWork is what a stage does with a micro-batch, whoever runs it: a forward of the
// stage's layers (a range of the model's top-level children) from what the stage below
// sent, and a backward from the gradient the stage above sent back. What crosses a stage
// boundary is a plain tensor, as over send/recv: the receiving stage makes it a leaf that
// requires a gradient, and that leaf's gradient is what goes back.
//
// The gradient is the exact accumulation rule of train/step/step.h: micro-batch m is cut
// as --accum M cuts it, its backward is seeded with grad_scale, and each parameter adds
// its micro-batches' gradients in order 0..M-1 (gpipe and 1f1b run backwards in that
// order), so the result is one device's accumulate_gradients with M micro-batches.
//
// pipeline_accumulate_gradients is the reference executor, on one thread;
// train/pipeline/pipeline_threads.h runs the stages on threads of their own.
#pragma once

#include <vector>

#include "engine/cpu_team.h"
#include "layers/model.h"
#include "train/pipeline/pipeline_schedule.h"
#include "train/pipeline/stage_plan.h"
#include "train/step/batch_norm_group.h"
#include "train/step/step.h"

namespace dpcore::train::pipeline {

struct PipelineStepStats {
  // Per stage: the most micro-batches whose forward graph (activations) the stage held at
  // once, counted as the executor holds them.
  std::vector<int> peak_live_activations;
  // Per stage, read on the stage's own thread at the end of its work (PipelineThreads; the
  // one-thread reference executor leaves it empty): the cores the thread may run on and
  // the threads its kernels use.
  std::vector<runtime::CpuTeam> stage_cores;
  // Per stage (PipelineThreads; empty from the reference executor): the most bytes of
  // tensors the stage's thread held at once in this batch (engine/memory_account.h).
  std::vector<size_t> peak_bytes;
};

// Rows [first, first + size) of a batch: one micro-batch.
struct MicroBatchRows {
  int64_t first = 0;
  int64_t size = 0;
  // The micro-batch's samples over all the replicas that share it (this piece and the
  // others': train/pipeline/hybrid_runner.h), which a stage's batch norms synchronised over
  // its replicas normalise with (StageWork::set_batch_norm_groups). 0: not shared.
  int64_t group_rows = 0;
};
// One device's --accum cut of a batch of `batch` rows into `micro_batches` (micro_batch_sizes:
// refuses more micro-batches than rows).
std::vector<MicroBatchRows> micro_batch_rows(int64_t batch, int micro_batches);

// Per stage, the elements [first, first + size) of the model's flat parameter (and
// gradient) buffer that hold the stage's layers' parameters. The ranges follow one another
// and cover the whole buffer (the padding after a tensor goes with its stage; a stage
// without parameters gets an empty range), so that a stage's gradients can be reduced on
// their own and the stages' reductions together reduce all of it. Refuses a parameter that
// two stages use (a tied weight, ParamSlot::tied_to), naming it and the stages.
struct FlatRange {
  int64_t first = 0;
  int64_t size = 0;
};
std::vector<FlatRange> stage_parameter_ranges(Model& model, const std::vector<Stage>& stages);
// The same over the model's flat buffer of buffers (batch norm's running statistics).
std::vector<FlatRange> stage_buffer_ranges(Model& model, const std::vector<Stage>& stages);

// One sample's shape at the input of each stage: `sample` (the model's input) through the
// layers below it. What stage s-1 sends to stage s, per sample; its gradient comes back
// the same size.
std::vector<Shape> stage_input_shapes(Model& model, const std::vector<Stage>& stages, const Shape& sample);

// One batch (x, y) cut into `micro_batches` for `stages` (which must cover the model's
// layers in order: parse_stages' rule; refused otherwise, as are more micro-batches than
// samples). Stage s's calls touch only stage s's state, so each stage may run on a thread
// of its own; a stage runs on its model's device.
class StageWork {
 public:
  StageWork(Model& model, const std::vector<Stage>& stages, int micro_batches, const Tensor& x, const Tensor& y,
            double grad_scale, BatchStart start);
  // The micro-batches as rows of (x, y) given one by one, each non-empty (a pipeline x data
  // parallel replica's pieces of a batch: train/pipeline/hybrid_runner.h); micro-batch m's
  // batch position is start.first_sample + rows[m].first.
  StageWork(Model& model, const std::vector<Stage>& stages, std::vector<MicroBatchRows> rows, const Tensor& x,
            const Tensor& y, double grad_scale, BatchStart start);
  // Stage s on models[s] (one model, or copies of it on the stages' devices: StageModels,
  // train/pipeline/stage_models.h), which must all have one layout; stage s's gradients go
  // to models[s]'s flat buffer. x is read on stage 0's device and y on the last stage's
  // (copied there when they are elsewhere); what a stage receives from another device is
  // copied to its own.
  StageWork(const std::vector<Model*>& models, const std::vector<Stage>& stages, std::vector<MicroBatchRows> rows,
            const Tensor& x, const Tensor& y, double grad_scale, BatchStart start);

  int stages() const { return int(stages_.size()); }
  int micro_batches() const { return int(rows_.size()); }
  // The shape of what stage s receives for micro-batch m (and, s > 0, of the gradient it
  // sends back): the batch's rows on stage 0.
  Shape input_shape(int s, int m) const;
  // The dtype of what stage s receives (and, s > 0, of the gradient it sends back): the
  // batch's on stage 0, else what the layer below hands on (Model::layer_output_dtypes:
  // 16-bit activations cross under --precision bf16 and fp16 where forward() has them).
  DType input_dtype(int s) const { return boundary_dtypes_[size_t(s)]; }

  // Forward of micro-batch m on stage s from `in` (stage 0 ignores it and takes the batch's
  // rows). Returns what goes to stage s+1, or on the last stage the micro-batch's summed
  // loss (also added to loss_sum()).
  Tensor forward(int s, int m, const Tensor& in);
  // Backward of micro-batch m on stage s from `grad`, the gradient of the stage's output
  // (the last stage ignores it and seeds with grad_scale). Returns the gradient of the
  // stage's input, for stage s-1 (undefined on stage 0). Frees the micro-batch's activations.
  Tensor backward(int s, int m, const Tensor& grad);

  // --recompute (activation recomputation, as torch.utils.checkpoint): a forward keeps only
  // the stage's input, running its layers without recording a graph (and leaving batch
  // norm's running statistics as they were); the backward runs them again from that input,
  // recording (and moving the statistics, in micro-batch order as one device does), then
  // backward. The same bits as without: the same ops on the same inputs, dropout drawing by
  // the batch position. One more forward per micro-batch buys the activations a stage would
  // hold between a forward and its backward. Before the first forward.
  void set_recompute(bool on);
  // --batchnorm sync in a pipeline x data parallel run: groups[s], where not null, is the
  // group that stage s's batch norms combine their statistics over (its data-parallel
  // group; Model::set_batch_norm_group over the stage's layers). Before each forward of
  // micro-batch m on stage s (a recomputing backward's too) the group is told the
  // micro-batch's group_rows. Empty (the default): nothing to tell.
  void set_batch_norm_groups(std::vector<ReplicaBatchNormGroup*> groups);

  // The batch's summed loss so far, on the last stage's device.
  Tensor loss_sum() const { return loss_sum_; }
  // Where stage s runs: its model's device.
  Device device(int s) const { return models_[size_t(s)]->device(); }
  const std::vector<int>& peak_live_activations() const { return peak_; }

 private:
  size_t layer_end(int s) const;  // the last stage stops before a final LogSoftmax
  // Stage s's layers on micro-batch m from `in` (on the last stage, through the loss).
  Tensor run_layers(int s, int m, const Tensor& in);

  Model& model(int s) const { return *models_[size_t(s)]; }

  std::vector<Model*> models_;                   // per stage
  std::vector<Stage> stages_;
  Tensor x_, y_;
  double grad_scale_;
  BatchStart start_;
  bool logits_;
  std::vector<MicroBatchRows> rows_;             // per micro-batch
  std::vector<Shape> boundary_;                  // per stage: one sample's input shape
  std::vector<DType> boundary_dtypes_;           // per stage: its dtype
  std::vector<std::vector<Tensor>> input_, output_;  // [stage][micro-batch]
  std::vector<int> live_, peak_;                 // per stage
  Tensor loss_sum_;
  bool recompute_ = false;
  std::vector<FlatRange> buffer_ranges_;         // per stage, with recompute_
  std::vector<ReplicaBatchNormGroup*> batch_norm_groups_;  // per stage, or empty
};

// The reference executor: every stage's ops on this thread, in the order of the schedule's
// unit-tick run, so each op finds its input there. Accumulates into the model's gradient
// buffer and returns the batch's summed loss. `recompute`: StageWork::set_recompute.
Tensor pipeline_accumulate_gradients(Model& model, const std::vector<Stage>& stages, Schedule schedule,
                                     int micro_batches, const Tensor& x, const Tensor& y, double grad_scale,
                                     BatchStart start, PipelineStepStats* stats = nullptr, bool recompute = false);

// One layer's measured forward and backward time on a micro-batch, in seconds.
struct LayerCost {
  double forward_s = 0, backward_s = 0;
  double total() const { return forward_s + backward_s; }
};

// The per-layer profile --pipeline P balances (balance_stages) and the pipeline model
// predicts from (train/predict/pipeline_model.h): each top-level layer's forward and
// backward time on the batch (x, y), measured as a pipeline runs it: every layer a stage
// of its own through StageWork, the batch one micro-batch, so a layer's time includes the
// loss on the last one and excludes nothing a stage would do. The medians over `repeats`
// batches after `warmup` untimed ones (a layer's first batch pays for its buffers). On a
// GPU each clock read waits for the work queued before it. The gradient buffer is zeroed
// at the end; batch norm's running statistics move, as in a training step.
std::vector<LayerCost> measure_layer_costs(Model& model, const Tensor& x, const Tensor& y, int warmup, int repeats);

// The bytes each op a stage can run holds on the micro-batch (x, y) (OpBytes, stage_plan.h),
// as the calling thread's allocations count them (engine/memory_account.h): out[i][n - 1]
// for layers i..i+n-1 run as one op, n from 1 (the layer alone) to the span of the fused
// op the model's forward starts at layer i (Sequential::fused_span: a conv, relu and
// max-pool are one op, a conv and relu too when a stage ends after the relu). Tensor sizes,
// not times: the same every run, on any device. The gradient buffer is zeroed at the end,
// batch norm's running statistics move.
std::vector<std::vector<OpBytes>> measure_layer_memory(Model& model, const Tensor& x, const Tensor& y);

}  // namespace dpcore::train::pipeline
