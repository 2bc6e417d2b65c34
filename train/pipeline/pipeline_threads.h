// Pipeline stages on threads of their own: stage s runs its schedule's order for its
// layers on its thread, and the activations and their gradients cross between stages by
// send/recv on a local communicator group (rank s = stage s), as they would between
// processes or GPUs. The arithmetic is StageWork's (train/pipeline/pipeline_step.h), so a
// batch gives the reference executor's bits; only the waiting differs: a stage blocks in
// recv until the stage it needs has sent.
//
// A stage that fails aborts the group, so the stages waiting on it fail at once instead of
// hanging; the batch then throws an Error naming the stage and its error, and the pipeline is
// spent: a new one is needed for the next batch.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "engine/cpu_team.h"
#include "engine/memory_account.h"
#include "train/pipeline/pipeline_step.h"
#include "train/runners/replica_threads.h"

namespace dpcore::train::pipeline {

// Stage s's ops of `schedule` for `work` over `comm` (the pipeline's group: rank t is stage
// t): each forward receives its input from stage s-1 and sends its output to s+1, each
// backward receives its gradient from s+1 and sends the input's gradient to s-1, blocking
// until what it needs has come. One stage's part of a pipelined batch, whether the stage
// is a thread (PipelineThreads) or a process of its own (train/pipeline/stage_process_runner.h).
void run_stage_ops(StageWork& work, Schedule schedule, int s, comm::Communicator& comm);

class PipelineThreads {
 public:
  // One thread and one local rank per stage; `timeout`: how long a stage waits in recv.
  // `teams`, one per stage or none: stage s's thread joins teams[s] (engine/cpu_team.h)
  // before its first work, so its kernels run on that team's cores. `on_failure(s,
  // message)`, if given, runs on stage s's thread when its work throws, before the
  // pipeline's own group is aborted, so before any other stage fails of it (the hybrid
  // runner records the cause and aborts the stages' data-parallel groups there). In a
  // trace, stage s's thread is the lane "stage s" (with `replica` >= 0, "replica R stage s":
  // the hybrid runner's pipelines), its communication thread "stage comm s".
  PipelineThreads(int stages, std::chrono::milliseconds timeout = std::chrono::seconds(300),
                  std::vector<runtime::CpuTeam> teams = {},
                  std::function<void(int, const std::string&)> on_failure = {}, int replica = -1);

  int stages() const { return threads_.size(); }
  // --recompute for the batches from now on (StageWork::set_recompute).
  void set_recompute(bool on) { recompute_ = on; }
  // --batchnorm sync for the batches from now on (StageWork::set_batch_norm_groups).
  void set_batch_norm_groups(std::vector<ReplicaBatchNormGroup*> groups) { batch_norm_groups_ = std::move(groups); }

  // pipeline_accumulate_gradients' contract, each stage on its thread. Each stage's thread
  // charges the tensors it allocates to the stage's memory account (engine/memory_account.h):
  // `stats` gets each stage's peak in this batch.
  Tensor accumulate_gradients(Model& model, const std::vector<Stage>& stages, Schedule schedule, int micro_batches,
                              const Tensor& x, const Tensor& y, double grad_scale, BatchStart start,
                              PipelineStepStats* stats = nullptr);
  // The same over the micro-batches `rows` of (x, y) (StageWork's second constructor; none:
  // the stages only run `after_stage`), stage s on models[s] (one model for every stage, or
  // StageModels' copies on the stages' GPUs). after_stage(s), if given, runs on stage s's
  // thread once its last backward is done, while the other stages may still be draining
  // (the hybrid runner reduces the stage's gradients there).
  //
  // A stage on a GPU queues its work on a stream of its own (its thread's stream number s
  // of its device), so stages sharing one GPU overlap as stages on several do; each stage
  // waits for its stream before its thread finishes, so the caller reads finished
  // gradients. What the caller queued before the call (the batch's upload) is waited for
  // first, since the stages' streams are not ordered after the caller's.
  Tensor accumulate_gradients(const std::vector<Model*>& models, const std::vector<Stage>& stages, Schedule schedule,
                              const std::vector<MicroBatchRows>& rows, const Tensor& x, const Tensor& y,
                              double grad_scale, BatchStart start, PipelineStepStats* stats,
                              const std::function<void(int)>& after_stage);

  // Per stage, the most bytes of tensors its thread held at once since reset_peaks (or
  // since the pipeline was made).
  std::vector<size_t> peak_bytes() const;
  void reset_peaks();

 private:
  std::vector<std::unique_ptr<comm::Communicator>> comms_;  // comms_[s]: stage s's rank
  std::vector<runtime::CpuTeam> teams_;
  std::vector<std::shared_ptr<MemoryAccount>> accounts_;  // accounts_[s]: stage s's tensors
  // started_[s]: stage s's thread has joined its team and named its trace lane (its own to write)
  std::vector<char> started_;
  int replica_;  // the hybrid runner's replica this pipeline is, for the lanes' names; -1: none
  bool recompute_ = false;
  std::vector<ReplicaBatchNormGroup*> batch_norm_groups_;  // per stage, or empty
  ReplicaThreads threads_;
};

}  // namespace dpcore::train::pipeline
