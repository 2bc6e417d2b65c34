// The runner of `mpirun -np P*D dpcore train --backend mpi --stages ...` (or --pipeline P):
// pipeline x data parallel with a process per stage and replica. Rank r is stage r mod P
// of replica r / P, so a replica's stages are consecutive ranks. The world is split twice
// (Communicator::split, as torch.distributed.new_group): a replica's P stages form its
// pipeline group, over which the activations go up and their gradients come back by
// send/recv; a stage's D replicas form its data-parallel group, over which the stage's
// gradients are summed once its last backward is done.
//
// The arithmetic is the in-process HybridRunner's (train/pipeline/hybrid_runner.h): the same
// cut of the batch (every process loads the whole global batch, as with ddp), StageWork's
// forwards and backwards, and a sum of each stage's gradients over its replicas; so the
// processes train the parameters of the in-process hybrid, and of ddp with --accum M. With
// --batchnorm sync a stage's batch norms combine their statistics over its data-parallel
// group, as the in-process hybrid's do.
//
// Each process holds the whole model but computes, and keeps activations for, its stage's
// layers only: its gradient buffer is zero outside its stage's part, and the optimizer's
// step leaves the other stages' parameters (and optimizer state) of no use here. settle()
// (before every evaluation, checkpoint and save) therefore brings each stage's parameters,
// buffers and optimizer state from the stage's replica 0 to every process, so that rank 0
// writes, and every rank evaluates, the whole model; a checkpoint is one device's and
// resumes anywhere. The loss of a step is summed over the last stage's processes.
//
// Each process charges the tensors its stage work allocates to an account of its own
// (engine/memory_account.h), and at the end of every step the processes allgather their
// measurements, so that the epoch line's peak memory per stage and --explain cover every
// stage. A stage's process runs on the cores mpirun gives it: the cpu:N of --stages names
// no team here. Refused, naming the flags: what check_pipeline_flags refuses, a world that is not a
// multiple of P, --clip-grad-norm (its norm is over every stage's gradients, which no
// process has), and with D > 1 what check_pipeline_replica_flags refuses.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/memory_account.h"
#include "train/pipeline/pipeline_runner.h"
#include "train/pipeline/pipeline_step.h"
#include "train/pipeline/stage_plan.h"
#include "train/runners/runner.h"
#include "train/step/batch_norm_group.h"
#include "train/step/split.h"

namespace dpcore::train::pipeline {

class StageProcessRunner : public StepRunner {
 public:
  StageProcessRunner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                     const ParallelOptions& options);
  StepStats step(const data::Batch& batch) override;
  Model& model() override { return *model_; }
  Optimizer& optimizer() override { return *optimizer_; }
  void set_rates(double lr, double momentum) override;
  // Rank 0's parameters, buffers and optimizer state to every process.
  void sync_replicas() override;
  bool is_primary() const override { return world_->rank() == 0; }
  bool across_processes(const std::function<void(comm::Communicator&, Device)>& fn) override;
  // Every stage's part of the model and of the optimizer's state, from the stage's
  // replica 0 to every process.
  StepStats settle() override;
  std::string describe() const override;

  // Per stage, the most bytes of tensors any of its processes held at once since
  // reset_stage_peak_bytes, as every process learnt it at the end of the latest step.
  std::vector<size_t> stage_peak_bytes() const override;
  void reset_stage_peak_bytes() override { account_->reset_peak(); }

  int stage() const { return stage_; }
  int replica() const { return replica_; }
  int replicas() const { return replicas_; }
  // What --explain reads, as the in-process hybrid's: the plan, the shares of the latest
  // step ([micro-batch][replica]), its splitter, each stage's part of the gradient buffer,
  // and replica 0's pipeline in the latest step, every stage's measurements gathered from
  // its process (no stage_cores: each process runs on the cores mpirun gave it).
  const PipelinePlan& plan() const { return plan_; }
  const std::vector<std::vector<int64_t>>& last_shares() const { return last_shares_; }
  const Splitter& splitter() const { return splitter_; }
  const std::vector<FlatRange>& stage_ranges() const { return parameter_ranges_; }
  const PipelineStepStats& last_step() const { return last_step_; }
  bool sync_batch_norm() const { return batch_norm_group_ != nullptr; }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  PipelinePlan plan_;
  std::unique_ptr<comm::Communicator> world_;
  int stage_, replica_, replicas_;
  Splitter splitter_;  // over the replicas_ of each stage
  std::unique_ptr<comm::Communicator> pipeline_, data_parallel_;
  std::unique_ptr<ReplicaBatchNormGroup> batch_norm_group_;  // --batchnorm sync: over data_parallel_
  // The end of a step: every process's measurements (its stage's `live` micro-batches and
  // its account's peaks) to every process.
  void gather_measurements(int64_t live);

  std::vector<FlatRange> parameter_ranges_, buffer_ranges_;  // per stage
  std::shared_ptr<MemoryAccount> account_;  // what this process's stage work allocates
  std::unique_ptr<GradScaler> scaler_;      // --precision fp16's loss scaler; null otherwise
  GradScaler* loss_scaler() const override { return scaler_.get(); }
  std::vector<std::vector<int64_t>> last_shares_;
  // Every process's (peak live micro-batches, the step's peak bytes, the peak since the
  // reset), by world rank, gathered at the end of each step.
  std::vector<int64_t> gathered_;
  PipelineStepStats last_step_;
};

}  // namespace dpcore::train::pipeline
