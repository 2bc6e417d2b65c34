// --on-replica-failure shrink (train/faults/replica_failure.h): how ReplicatedRunner runs a step
// again without the replicas that failed in it.
#include <algorithm>

#include "train/runners/data_parallel.h"

namespace dpcore::train {

namespace {
std::string failures_text(const std::vector<FailedReplica>& failed, const std::vector<Replica>& replicas,
                          int64_t step) {
  std::string text;
  for (const FailedReplica& f : failed) {
    text += (text.empty() ? "" : "; ") + std::string("replica ") + std::to_string(replicas[size_t(f.rank)].id) +
            " failed at step " + std::to_string(step) + ": " + f.reason;
  }
  return text;
}
}  // namespace

StepStats ReplicatedRunner::surviving_failures(const std::function<StepStats()>& attempt) {
  if (!options_.failure.shrink()) return attempt();
  // The cost of the promise of no partial update: a copy of the root's state every step.
  before_step_.take(*replicas_[0].model, *replicas_[0].optimizer);
  const int64_t step = step_number();
  std::vector<ReplicaDropped> dropped;
  for (;;) {
    try {
      StepStats stats = attempt();
      stats.dropped = std::move(dropped);
      return stats;
    } catch (const ReplicasFailed& failure) {
      const std::vector<FailedReplica> failed = failed_replicas(failure);
      const int left = int(replicas_.size() - failed.size());
      if (left < options_.failure.min_replicas) {
        before_step_.restore(*replicas_[0].model, *replicas_[0].optimizer);  // for the caller's final checkpoint
        throw TooFewReplicas(failures_text(failed, replicas_, step) + "; " + std::to_string(left) +
                                 (left == 1 ? " replica" : " replicas") + " would be left, fewer than --min-replicas " +
                                 std::to_string(options_.failure.min_replicas) +
                                 ", so the run stops with the state from before step " + std::to_string(step),
                             std::move(dropped));
      }
      std::vector<ReplicaDropped> now;
      for (const FailedReplica& f : failed) {
        now.push_back({step, replicas_[size_t(f.rank)].id, f.rank, f.reason, {}});
      }
      drop_replicas(failed);
      for (ReplicaDropped& d : now) {
        for (const Replica& r : replicas_) d.survivors.push_back(r.id);
        dropped.push_back(std::move(d));
      }
      // Later injected hangs hang again; but not on a replica left alone, which nothing
      // would notice (as FaultInjector::check refuses a hang with one replica): there a
      // hang fails at once.
      if (replicas_.size() > 1) faults_.rearm_hangs();
      // Whatever each survivor had done of the step (reduced, stepped, updated its batch
      // norm statistics) is undone: the root gets the state from before the step, the
      // others the root's.
      before_step_.restore(*replicas_[0].model, *replicas_[0].optimizer);
      sync_replicas();
    }
  }
}

void ReplicatedRunner::drop_replicas(const std::vector<FailedReplica>& failed) {
  std::vector<int> ranks;
  for (const FailedReplica& f : failed) ranks.push_back(f.rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  threads_.reset();  // idle since the failed run() returned; the survivors get new ones
  // The aborted group goes first: destroying a communicator drains what its thread still
  // had queued (collectives that now fail at once), before anyone's state is restored.
  for (Replica& r : replicas_) {
    if (r.batch_norm_group) r.model->set_batch_norm_group(nullptr);
    r.batch_norm_group.reset();
    r.comm.reset();
  }
  for (size_t i = ranks.size(); i-- > 0;) replicas_.erase(replicas_.begin() + ranks[i]);
  std::vector<Device> devices;
  for (const Replica& r : replicas_) devices.push_back(r.device());
  std::vector<std::unique_ptr<Communicator>> comms = comm::make_communicators(comm_config(options_, devices));
  for (size_t r = 0; r < replicas_.size(); ++r) replicas_[r].comm = std::move(comms[r]);
  make_batch_norm_groups();
  splitter_ = splitter_.without(ranks);
  replicas_dropped(ranks);
  start_threads();
}

}  // namespace dpcore::train
