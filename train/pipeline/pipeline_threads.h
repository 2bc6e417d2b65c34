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
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "engine/cpu_team.h"
#include "engine/memory_account.h"
#include "train/pipeline/pipeline_step.h"
#include "train/runners/replica_threads.h"

namespace dpcore::train::pipeline {

class PipelineThreads {
 public:
  // One thread and one local rank per stage; `timeout`: how long a stage waits in recv.
  // `teams`, one per stage or none: stage s's thread joins teams[s] (engine/cpu_team.h)
  // before its first work, so its kernels run on that team's cores.
  PipelineThreads(int stages, std::chrono::milliseconds timeout = std::chrono::seconds(300),
                  std::vector<runtime::CpuTeam> teams = {});

  int stages() const { return threads_.size(); }

  // pipeline_accumulate_gradients' contract, each stage on its thread. Each stage's thread
  // charges the tensors it allocates to the stage's memory account (engine/memory_account.h):
  // `stats` gets each stage's peak in this batch.
  Tensor accumulate_gradients(Model& model, const std::vector<Stage>& stages, Schedule schedule, int micro_batches,
                              const Tensor& x, const Tensor& y, double grad_scale, BatchStart start,
                              PipelineStepStats* stats = nullptr);

  // Per stage, the most bytes of tensors its thread held at once since reset_peaks (or
  // since the pipeline was made).
  std::vector<size_t> peak_bytes() const;
  void reset_peaks();

 private:
  void run_stage(StageWork& work, Schedule schedule, int s);

  std::vector<std::unique_ptr<comm::Communicator>> comms_;  // comms_[s]: stage s's rank
  std::vector<runtime::CpuTeam> teams_;
  std::vector<std::shared_ptr<MemoryAccount>> accounts_;  // accounts_[s]: stage s's tensors
  std::vector<char> joined_;  // joined_[s]: stage s's thread has joined its team (its own to write)
  ReplicaThreads threads_;
};

}  // namespace dpcore::train::pipeline
