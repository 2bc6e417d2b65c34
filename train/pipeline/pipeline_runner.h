// The runner of `dpcore train --stages ...` (or --pipeline P): one model cut into pipeline
// stages, each on a thread of its own (train/pipeline/pipeline_threads.h), on its CPU
// team's cores or driving its GPU on a stream of its own, the batch into --micro-batches,
// run in --schedule's order, then one optimizer step over the whole flat parameter buffer.
// The step is one device's step with --accum M (the same bits: docs/pipelines.md), so
// checkpoints, --resume, evaluation and saved weights are one device's too: the model is
// one Model, whole, whatever the placement; stages on other GPUs than the model's run on
// copies of it that hold their stages' part up to date (train/pipeline/stage_models.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "train/pipeline/pipeline_threads.h"
#include "train/pipeline/stage_models.h"
#include "train/pipeline/stage_plan.h"
#include "train/runners/runner.h"

namespace dpcore::train::pipeline {

// "--pipeline 3" or "--stages 0-2@cpu:0,3-6@cpu:1": how the run asked for its pipeline, for messages.
std::string pipeline_flag(const PipelineOptions& pipeline);

// Refuses, naming the flags, what a pipeline does not combine with: --accum, --sync,
// --backend other than local and mpi, --inject, --skip-nonfinite, a model on a GPU with
// --backend mpi or --replicas; and with --replicas D > 1 what check_pipeline_replica_flags refuses. (The runners check them;
// the trainer too, before it measures the layers for --pipeline.)
void check_pipeline_flags(const Model& model, int64_t accum, const ParallelOptions& options);
// What pipeline x data parallel over `replicas` replicas (train/pipeline/hybrid_runner.h,
// stage_process_runner.h) does not combine with, naming the flags: --mode dp, --split
// adaptive, --on-replica-failure shrink and a GPU in --devices.
void check_pipeline_replica_flags(const ParallelOptions& options, int replicas);

// What a pipeline's runner runs, as the options ask for it: its stages, its schedule, its
// micro-batches and --recompute.
struct PipelinePlan {
  std::vector<Stage> stages;
  Schedule schedule = Schedule::GPipe;
  int micro_batches = 1;
  bool recompute = false;

  // The runners' describe(): "pipeline (1f1b) of 2 stages [0-2@cpu:0,3-6@cpu:1]", then
  // `detail` (the replicas), then ", 4 micro-batches" and ", recomputing activations".
  std::string describe(const std::string& detail = "") const;
};

// The plan of --stages (or of --pipeline, filled in by the trainer) for `model`, checked
// once for every runner: after check_pipeline_flags, refuses, naming the flags, stages that
// do not fit the model, `cpu_teams` or the GPUs (parse_stages), a stage on a GPU with the
// model on the CPU or the other way round, a weight tied across stages (stage_parameter_ranges),
// --pipeline without the stages it was balanced into, a schedule that is not
// naive/gpipe/1f1b, and naive with more than one micro-batch.
PipelinePlan plan_pipeline(Model& model, int64_t accum, const ParallelOptions& options, int cpu_teams);

// A pipeline of one replica.
class PipelineRunner : public StepRunner {
 public:
  // Refuses, naming the flags, what plan_pipeline refuses and --replicas.
  PipelineRunner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                 const ParallelOptions& options);
  StepStats step(const data::Batch& batch) override;
  Model& model() override { return *model_; }
  Optimizer& optimizer() override { return *optimizer_; }
  void set_rates(double lr, double momentum) override;
  void sync_replicas() override {}
  std::string describe() const override;
  std::vector<size_t> stage_peak_bytes() const override { return threads_.peak_bytes(); }
  void reset_stage_peak_bytes() override { threads_.reset_peaks(); }

  const std::vector<Stage>& stages() const { return plan_.stages; }
  Schedule schedule() const { return plan_.schedule; }
  int micro_batches() const { return plan_.micro_batches; }
  // The latest step's measured live activations per stage.
  const PipelineStepStats& last_step() const { return last_step_; }
  // The copies of the model on the stages' other GPUs, for --explain.
  const StageModels& stage_models() const { return stage_models_; }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  PipelinePlan plan_;
  StageModels stage_models_;
  PipelineThreads threads_;
  PipelineStepStats last_step_;
  std::unique_ptr<GradScaler> scaler_;  // --precision fp16's loss scaler (train/step/loss_scaling.h); null otherwise
  GradScaler* loss_scaler() const override { return scaler_.get(); }
};

}  // namespace dpcore::train::pipeline
