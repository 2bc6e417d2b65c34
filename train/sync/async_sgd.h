// --sync async: asynchronous SGD with a parameter server, inside one process.
//
// The master holds the parameters and the optimizer (model() and optimizer() are the
// master's). Each global batch is cut into R equal pieces (torch.chunk) and queued. Each
// replica, on its own thread, repeatedly
//   1. takes the next piece and a SNAPSHOT of the master's parameters (and batch norm
//      buffers), noting the master's version v (the updates applied so far);
//   2. computes the mean gradient of its piece from the snapshot (over the piece's counted
//      targets: train/step/step.h);
//   3. hands it to the master, which applies it at once as one SGD step (and keeps the
//      replica's batch norm running statistics: the last writer's), version v' -> v' + 1.
// There is no barrier between replicas: a fast replica takes the next piece while a slow
// one still computes. The gradient applied at version v' was computed at v, so it is
// STALE by v' - v updates.
//
// --max-staleness S bounds that lag, by two waits (each a span "wait" in a trace):
//   * a replica starts a piece only while at most S gradients are in flight, and
//   * a replica applies its gradient only if every gradient still in flight could then be
//     applied, oldest snapshot first, within S: otherwise it waits for the older ones.
// The replica holding the oldest snapshot can always apply, so the waits never deadlock,
// and no applied gradient is ever staler than S (updates() records each one's staleness;
// epoch_counters() gives the histogram the metrics show). S = 0 is serial SGD.
//
// One replica equals `--sync full` on one device bit for bit: its one piece is the whole
// batch, with the same micro-batches, seeds 1/n and SGD arithmetic. S = 0 with R > 1 is
// serial SGD too, but on the pieces: one piece in flight at a time, from the newest
// parameters, so R steps per global batch, each on one piece's mean gradient at that
// batch's rates; bit for bit the one-device steps on those pieces in order (not `--sync
// full` with the same --batch, which takes one step per batch). With S > 0 and several
// replicas the data order is seeded but the order of the updates depends on timing;
// updates() logs it.
//
// step() queues the batch's pieces and returns once fewer than R pieces wait to be started
// (so the loader keeps at most one batch ahead); the loss it returns is that of the pieces
// applied since the previous call. settle() waits for every piece to be applied. A replica
// that throws fails the run (naming it); one that stops making progress for --replica-timeout
// seconds does too. Which pieces a replica gets depends on timing, so for --inject a
// replica's step S is the S-th piece IT computes (train/faults/fault_injection.h). Threads on one device type: CPU replicas, or GPUs (each replica on
// its own stream, the master on the first).
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "train/runners/runner.h"
#include "train/step/split.h"

namespace dpcore::train {

struct AppliedUpdate {
  int64_t version = 0;    // the master's version this update made (1, 2, ...)
  int replica = 0;        // who computed it
  int64_t step = 0;       // the step (global batch) the piece belongs to, as the log counts steps
  int64_t first_row = 0;  // the piece: rows [first_row, first_row + rows) of that batch
  int64_t rows = 0;
  int64_t snapshot = 0;   // the master's version the gradient was computed from
  int64_t staleness() const { return version - 1 - snapshot; }
};

class AsyncRunner : public StepRunner {
 public:
  AsyncRunner(std::unique_ptr<layers::Model> model, const OptimizerConfig& optimizer, int64_t accum,
              const ParallelOptions& options);
  ~AsyncRunner() override;
  StepStats step(const data::Batch& batch) override;
  StepStats settle() override;
  Model& model() override;
  Optimizer& optimizer() override;
  void set_rates(double lr, double momentum) override;
  void sync_replicas() override {}  // every piece starts from a fresh snapshot of the master
  std::string describe() const override;
  std::vector<std::pair<std::string, std::vector<int64_t>>> epoch_counters() override;

  // Every update applied so far, in order (read after settle()).
  const std::vector<AppliedUpdate>& updates() const;
  int64_t max_staleness() const;
  // Tests: `hook` runs on replica r's thread before it takes its snapshot ("snapshot"),
  // before it computes ("compute", the only one called without the runner's lock) and before
  // it applies its gradient ("apply"); what it throws fails the run as an error there would.
  void set_phase_hook_for_testing(std::function<void(int replica, const char* phase)> hook);

  struct State;  // shared with the replica threads (train/sync/async_sgd.cpp)

 private:
  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

}  // namespace dpcore::train
