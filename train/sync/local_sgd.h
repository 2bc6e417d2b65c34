// --sync local:K: local SGD, also called periodic model averaging.
//
// Every step, each replica (a thread with --backend local, a process with mpi or nccl)
// computes the mean gradient of ITS OWN share of the global batch (the mean over the share's
// counted targets: train/step/step.h) and steps its own optimizer: no communication at all. A
// replica whose share of a step is empty, or holds no counted target, takes no step
// (momentum and weight decay would otherwise move it on data it never saw). After steps K,
// 2K, 3K, ... (as the log numbers them, so a resumed run keeps the schedule), the replicas
// average their parameters and their optimizer's state (SGD's momentum buffer, Adam's two
// moments), replica r weighted by
//     w_r = (targets r counted since the last averaging) / (targets all counted),
// the targets being the samples for one class per sample, the tokens not ignored per token
// (so that K = 1 is the step on the mean over the global batch's counted targets),
// as one allreduce per buffer (each replica scales its buffers by w_r, then SUM). Batch norm's running
// statistics are rank 0's, broadcast at each averaging (DDP's broadcast_buffers, at the
// averaging instead of every step). Every replica then takes the run's step count.
//
// Why momentum is averaged too: SGD's update is linear in the gradient, so with K = 1 the
// weighted average of the replicas' steps IS the step on the mean gradient of the whole
// batch (`--sync full`), up to float rounding; keeping local momentum instead (as some local
// SGD papers do) would make K = 1 a different algorithm. Adam's moments are averaged the
// same way; Adam's update is not linear in the gradient (nor is the average of
// exp_avg_sq the square of an average), so with Adam K = 1 is not --sync full.
//
// Between averagings the replicas differ, and model() is replica 0's. When the trainer needs
// one model between averagings (to evaluate, at an epoch's end, to save: settle()), the
// replicas are averaged as above, and model() shows that average until the next step, which
// first puts every replica back as it was: evaluating or saving never changes the schedule
// or the result. A checkpoint holds one model, which local SGD has only at an averaging, so
// --checkpoint-every must be a multiple of K (the trainer refuses others) and a resumed run
// is the run that never stopped; the final checkpoint of a run that ends between averagings
// holds the average (a run resumed from it starts from there). The replicas' shares come
// from --split even or weights (adaptive needs the timings of a synchronous step, and is
// refused).
#pragma once

#include "train/runners/data_parallel.h"

namespace dpcore::train {

class LocalSgdRunner : public ReplicatedRunner {
 public:
  LocalSgdRunner(std::unique_ptr<layers::Model> model, const OptimizerConfig& optimizer, int64_t accum,
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
  // The scheduled averagings so far (settle()'s averaged view is not one).
  int64_t averagings() const { return averagings_; }

 private:
  // A replica as it was before settle() averaged it, put back by the next step.
  struct KeptReplica {
    Tensor values, buffers;     // (buffers: undefined when the run has none)
    std::vector<Tensor> state;  // the optimizer's (Optimizer::state)
    int64_t steps = 0;
  };

  // Every replica's parameters and optimizer state replaced by the weighted average over the
  // replicas, each replica's step count set to the run's; the time each spent in it goes to
  // `lanes`, if any.
  void average(std::vector<ReplicaLane>* lanes = nullptr);
  // Puts the replicas back as settle() found them (nothing when it did not average).
  void restore_kept();

  int64_t period_;
  int world_size_ = 1;
  int64_t steps_taken_ = 0;  // the run's steps, resumed ones included
  int64_t steps_since_average_ = 0;
  std::vector<int64_t> targets_since_average_;  // counted targets, per global replica
  std::vector<KeptReplica> kept_;               // per local replica, while model() is settle()'s average
  int64_t averagings_ = 0, epoch_averagings_ = 0;
};

}  // namespace dpcore::train
