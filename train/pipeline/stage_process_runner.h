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
// A stage's process runs on the cores mpirun gives it: the cpu:N of --stages names no team
// here. Refused, naming the flags: what check_pipeline_flags refuses, a world that is not a
// multiple of P, --clip-grad-norm (its norm is over every stage's gradients, which no
// process has), and with D > 1 what check_pipeline_replica_flags refuses.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
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

  int stage() const { return stage_; }
  int replica() const { return replica_; }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  PipelinePlan plan_;
  std::unique_ptr<comm::Communicator> world_;
  int stage_, replica_, replicas_;
  Splitter splitter_;  // over the replicas_ of each stage
  std::unique_ptr<comm::Communicator> pipeline_, data_parallel_;
  std::unique_ptr<ReplicaBatchNormGroup> batch_norm_group_;  // --batchnorm sync: over data_parallel_
  std::vector<FlatRange> parameter_ranges_, buffer_ranges_;  // per stage
};

}  // namespace dpcore::train::pipeline
