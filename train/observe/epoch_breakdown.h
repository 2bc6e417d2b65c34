// Where an epoch's training time went: compute, communication the overlap did not hide,
// waiting for the slowest replica, waiting for data, the optimizer; samples/s of each
// replica; the shares in use. The trainer feeds it every step (train/observe/step_times.h says how
// a step is cut) and every wait for the loader; the epoch's log line, its metrics record and
// the progress line (the two biggest parts) read it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "train/observe/step_times.h"

namespace dpcore::train {

// Seconds of an epoch. Their sum stays within the epoch's wall time: each part is a slice
// of the main thread's time (a step's slices, averaged over the replicas, of that step).
struct TimeParts {
  double compute = 0, communication = 0, waiting = 0, data = 0, optimizer = 0;
  double sum() const { return compute + communication + waiting + data + optimizer; }
};

class EpochBreakdown {
 public:
  EpochBreakdown() { reset(); }
  // A new epoch: everything to zero, the wall clock from now.
  void reset();
  // The main thread waited this long for the loader's next batch.
  void add_data(double seconds) { parts_.data += seconds; }
  // A step of `wall` seconds with the runner's times; `root_optimizer`, the root's SGD
  // seconds, stands for the optimizer when the runner does not break its step down.
  void add_step(double wall, const StepTimes& times, double root_optimizer, int64_t samples);

  const TimeParts& parts() const { return parts_; }
  double wall_seconds() const;  // since reset()
  // Samples per second of each replica of this process, over its own compute time.
  std::vector<double> replica_samples_per_s() const;
  // The rows each replica of this process computed at the epoch's last full-size step.
  const std::vector<int64_t>& shares() const { return shares_; }
  // "compute 81%  comm 9%": the two biggest parts, as fractions of their sum.
  std::string biggest_two() const;

 private:
  TimeParts parts_;
  std::vector<double> replica_compute_;
  std::vector<int64_t> replica_samples_, shares_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace dpcore::train
