#include "train/observe/step_times.h"

#include <algorithm>

namespace dpcore::train {

StepTimes combine_lanes(const std::vector<ReplicaLane>& lanes) {
  StepTimes t;
  t.measured = true;
  double slowest = 0;
  for (const ReplicaLane& lane : lanes) slowest = std::max(slowest, lane.compute);
  for (const ReplicaLane& lane : lanes) {
    // A replica that finished computing before the slowest one waits that long for it;
    // what its idle time does not already cover, it spends at the start of a collective.
    const double late = std::clamp(slowest - lane.compute - lane.idle, 0.0, lane.blocked);
    t.waiting += lane.idle + late;
    t.communication += lane.blocked - late;
    t.optimizer += lane.optimizer;
    t.replica_compute.push_back(lane.compute);
    t.replica_samples.push_back(lane.samples);
  }
  const double n = double(std::max<size_t>(lanes.size(), 1));
  t.waiting /= n, t.communication /= n, t.optimizer /= n;
  return t;
}

}  // namespace dpcore::train
