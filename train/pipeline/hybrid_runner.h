// The runner of `dpcore train --stages ... --replicas D` (or --pipeline P --replicas D):
// pipeline x data parallel in one process. D replicas of the model, as --mode ddp has them
// (train/runners/ddp.h); each replica runs the batch's share through its own pipeline of P
// stage threads (train/pipeline/pipeline_threads.h). A stage's gradients are reduced among
// the D replicas of that stage only, over a group of their own (stage s of every replica:
// the data-parallel group of stage s), as soon as the stage's last backward is done, while
// the stages below it are still draining the pipeline. Then every replica takes the same
// optimizer step on its whole flat buffer.
//
// The batch is cut as ddp with --accum M cuts it: into M micro-batches first, each shared
// among the replicas by --split, so that replica d's micro-batch m is ddp's replica d's
// micro-batch m. The gradient is therefore ddp's (and one device's with --accum M, up to
// the order of the sums): only who computes which layer moved. Batch norm normalises with
// each replica's piece of a micro-batch (ddp's --batchnorm local), and rank 0's running
// statistics are broadcast at the start of every step, as DDP's broadcast_buffers does.
// With --batchnorm sync a stage's batch norms combine their statistics over the stage's
// data-parallel group, the group its gradients are reduced over, so they normalise with
// the whole micro-batch m (every replica's piece), as ddp's --batchnorm sync does.
//
// The replicas of a stage share that stage's CPU team (cpu:N is the same cores for every
// replica). A failing stage aborts its pipeline and every data-parallel group, so the
// other replicas' stages fail at once instead of waiting; the step then throws naming the
// replica and stage.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "train/pipeline/pipeline_runner.h"
#include "train/pipeline/pipeline_threads.h"
#include "train/pipeline/stage_plan.h"
#include "train/runners/data_parallel.h"

namespace dpcore::train::pipeline {

// ddp's cut of a batch (train/runners/ddp.cpp) for a pipeline's `replicas`: into
// `micro_batches` (fewer for a short batch, as --accum), each shared among the replicas by
// `splitter`. Returns, per replica, its non-empty pieces in micro-batch order (rows of the
// batch); `shares`, if given, gets every piece's size, [micro-batch][replica].
std::vector<std::vector<MicroBatchRows>> replica_micro_batches(const data::Batch& batch, int micro_batches,
                                                               const Splitter& splitter, int replicas,
                                                               std::vector<std::vector<int64_t>>* shares = nullptr);

// --batchnorm sync: refuses `shares` (replica_micro_batches') that leave a replica without a
// piece of some micro-batch (batch_norm_group_rows names it), before any stage waits in its
// group for that replica.
void check_batch_norm_shares(const std::vector<std::vector<int64_t>>& shares);

class HybridRunner : public ReplicatedRunner {
 public:
  // Refuses, naming the flags, what plan_pipeline refuses (check_pipeline_replica_flags
  // included: --split adaptive, --on-replica-failure shrink, ...).
  HybridRunner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
               const ParallelOptions& options);
  StepStats step(const data::Batch& batch) override;
  std::string describe() const override;
  // Per stage, the most bytes any replica's thread of that stage held at once.
  std::vector<size_t> stage_peak_bytes() const override;
  void reset_stage_peak_bytes() override;

  const std::vector<Stage>& stages() const { return plan_.stages; }
  Schedule schedule() const { return plan_.schedule; }
  int micro_batches() const { return plan_.micro_batches; }
  // Per stage, the elements of the flat gradient buffer its data-parallel group reduces.
  const std::vector<FlatRange>& stage_ranges() const { return ranges_; }
  // Replica 0's pipeline in the latest step (for --explain).
  const PipelineStepStats& last_step() const { return last_step_; }

 private:
  // --batchnorm sync: stage s of replica d's batch norms over groups_[s][d].
  void make_batch_norm_groups() override;
  // Stage s of replica d: its gradients summed over stage s's data-parallel group.
  void reduce_stage(int d, int s);
  // Stage s of replica d failed: the first such failure of the step is recorded as its
  // cause, then every data-parallel group is aborted, so that no stage waits for a
  // reduction that cannot finish.
  void stage_failed(int d, int s, const std::string& message);

  PipelinePlan plan_;
  std::vector<FlatRange> ranges_;                              // per stage
  std::vector<std::vector<std::unique_ptr<comm::Communicator>>> groups_;  // [stage][replica]
  std::vector<std::unique_ptr<PipelineThreads>> pipelines_;    // per replica
  std::vector<std::vector<std::unique_ptr<ReplicaBatchNormGroup>>> batch_norm_groups_;  // [replica][stage], sync
  PipelineStepStats last_step_;                               // replica 0's
  std::mutex failure_mutex_;
  std::string failure_;  // the step's first stage failure: "replica 1 failed: pipeline stage 0 failed: ..."
};

}  // namespace dpcore::train::pipeline
