// Where a step's time went, for the per-epoch breakdown (train/observe/epoch_breakdown.h): read off
// the host's steady clock a few times per replica per step, always on (a clock read costs
// tens of nanoseconds; a step, milliseconds).
//
// Each replica thread records a ReplicaLane; the runner turns its lanes into StepTimes:
//   waiting        a replica's idle time while the slowest replica still computes: the
//                  slowest one's compute minus its own (on average over the replicas),
//                  taken out of the time it spent blocked in collectives;
//   communication  the rest of that blocked time (ddp: the allreduce the overlap did not
//                  hide, the loss, the buffers' broadcast; dp: the gradient allreduce);
//   optimizer      the optimizer step (SGD or Adam, with --clip-grad-norm its clip).
// What is left of the step's wall time is compute (the trainer subtracts: train/trainer.cpp).
// Times are host times: on a GPU, device work the host did not wait for shows up where the
// host next waits for it.
#pragma once

#include <cstdint>
#include <vector>

namespace dpcore::train {

// One replica's step, in seconds.
struct ReplicaLane {
  double compute = 0;    // zero_grad, forward and backward of its shares
  double idle = 0;       // known to be waiting for other replicas (dp: its thread's idle time
                         // in the phases the main thread drives)
  double blocked = 0;    // in collectives, where a wait for a late replica hides in the
                         // transfer (ddp: its whole step but compute and optimizer)
  double optimizer = 0;  // its optimizer step
  int64_t samples = 0;   // rows it computed
};

struct StepTimes {
  bool measured = false;  // false: the runner did not break its step down (the trainer then
                          // counts the whole step as compute, less the root's optimizer step)
  double communication = 0, waiting = 0, optimizer = 0;  // averages over this process's replicas
  std::vector<double> replica_compute;                   // seconds, per replica of this process
  std::vector<int64_t> replica_samples;                  // rows, per replica of this process
};

// The lanes of this process's replicas, combined as the header says.
StepTimes combine_lanes(const std::vector<ReplicaLane>& lanes);

}  // namespace dpcore::train
