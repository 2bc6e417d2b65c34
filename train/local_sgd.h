// --sync local:K: local SGD, also called periodic model averaging.
//
// Every step, each replica (a thread with --backend local, a process with mpi or nccl)
// computes the mean gradient of ITS OWN share of the global batch and steps its own
// optimizer: no communication at all. After steps K, 2K, 3K, ... (as the log numbers them,
// so a resumed run keeps the schedule), and whenever the trainer needs one model (before
// evaluating, checkpointing or saving: StepRunner::settle), the replicas average their parameters and momentum buffers, replica r weighted by
//     w_r = (samples r saw since the last averaging) / (samples all saw),
// as two allreduces (each replica scales its buffers by w_r, then SUM). Batch norm's running
// statistics are rank 0's, broadcast at each averaging (DDP's broadcast_buffers, at the
// averaging instead of every step).
//
// Why momentum is averaged too: SGD's update is linear in the gradient, so with K = 1 the
// weighted average of the replicas' steps IS the step on the mean gradient of the whole
// batch (`--sync full`), up to float rounding; keeping local momentum instead (as some local
// SGD papers do) would make K = 1 a different algorithm.
//
// Between averagings the replicas differ, and model() is replica 0's: read it after
// settle(). The replicas' shares come from --split even or weights (adaptive needs the
// timings of a synchronous step, and is refused).
#pragma once

#include "train/data_parallel.h"

namespace dpcore::train {

class LocalSgdRunner : public ReplicatedRunner {
 public:
  LocalSgdRunner(std::unique_ptr<layers::Model> model, const SgdConfig& sgd, int64_t accum,
                 const ParallelOptions& options, int64_t period);
  // Each replica's own step on its own share. The loss reported is the sum over this
  // process's replicas (all of them with --backend local; with mpi, this rank's share:
  // reporting the global loss would cost a collective every step).
  StepStats step(const data::Batch& batch) override;
  StepStats settle() override;
  void sync_replicas() override;
  bool is_primary() const override;
  std::string describe() const override;
  std::vector<std::pair<std::string, std::vector<int64_t>>> epoch_counters() override;

  int64_t period() const { return period_; }
  // Averagings so far (periodic and settle()'s).
  int64_t averagings() const { return averagings_; }

 private:
  // The weighted average over the replicas; the time each spent in it goes to `lanes`, if any.
  void average(std::vector<ReplicaLane>* lanes = nullptr);

  int64_t period_;
  int world_size_ = 1;
  int64_t steps_since_average_ = 0;
  std::vector<int64_t> samples_since_average_;  // per global replica
  int64_t averagings_ = 0, epoch_averagings_ = 0;
};

}  // namespace dpcore::train
