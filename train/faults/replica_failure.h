// What a run does when one of its replicas fails during a step: --on-replica-failure
// stop|shrink and --min-replicas (docs/fault-tolerance.md, "Shrinking past a failed replica").
//
//   stop    (the default) the step fails and the run stops with the error, naming the
//           replica, as PyTorch DDP does.
//   shrink  the step is abandoned with no partial update (every survivor gets back the state
//           from before the step: train/step/step_snapshot.h), the failed replica is dropped, the
//           communicator is rebuilt over the survivors, renumbered 0..R-2 in their order, and
//           the same step runs again over the same global batch, shared among R-1 replicas
//           (train/step/split.h: Splitter::without). Below --min-replicas the run stops with the
//           error instead, after a final checkpoint of the last completed step.
//
// A failure here is a replica's work throwing (a real error, --inject throw) or a replica
// missing a collective by --replica-timeout (a hang, --inject hang: the replica that waited
// names it). A process that exits (--inject exit) is the launcher's case (dpcore launch);
// a NaN or a flipped bit, the guards' (train/faults/guards.h).
//
// Shrink needs the replicas to be threads of one process meeting in a group this process
// can rebuild: --backend local and --sync full. check_failure_policy refuses the rest,
// saying what to use instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "train/runners/replica_threads.h"

namespace dpcore::train {

struct ReplicaFailurePolicy {
  std::string on_failure = "stop";  // --on-replica-failure: stop | shrink
  int min_replicas = 1;             // --min-replicas: shrink no further than this many replicas
  bool shrink() const { return on_failure == "shrink"; }
};

// Refuses, naming the flags and values, a policy this run cannot carry out: an unknown
// --on-replica-failure, --min-replicas outside 1..--replicas, and shrink with one replica,
// with --backend mpi or nccl, or with --sync other than full.
void check_failure_policy(const ReplicaFailurePolicy& policy, int replicas, const std::string& backend,
                          const std::string& sync);

// One replica dropped by a shrink.
struct ReplicaDropped {
  int64_t step = 0;            // the step it failed in, which then ran again without it
  int replica = 0;             // its number at the start of the run (as --inject and the log name it)
  int rank = 0;                // its rank when it failed (lower than `replica` after earlier shrinks)
  std::string reason;          // what it threw, or the timeout that noticed it
  std::vector<int> survivors;  // the replicas left (numbers at the start of the run), in their new rank order
};
// "replica 2 failed at step 5: <reason>; dropped it: step 5 runs again over the same batch
// on 3 replicas (replicas 0, 1 and 3 are ranks 0, 1 and 2 now)".
std::string shrink_log_line(const ReplicaDropped& dropped);
// "0, 1 and 3": replica numbers as the messages list them.
std::string list_numbers(const std::vector<int>& numbers);

// What a run stops with when a failure would leave fewer than --min-replicas replicas. The
// runner has put the state from before the failed step back, so that the caller can still
// write a checkpoint of the last completed step; `dropped` are the replicas dropped earlier
// in the same step, if any (their log lines are still due).
class TooFewReplicas : public Error {
 public:
  TooFewReplicas(const std::string& what, std::vector<ReplicaDropped> dropped)
      : Error(what), dropped(std::move(dropped)) {}
  std::vector<ReplicaDropped> dropped;
};

// A replica that failed in a step, by rank, and why.
struct FailedReplica {
  int rank = 0;
  std::string reason;
};
// Which replicas failed, from what their threads threw. The others' errors are echoes: the
// failure aborted the group, which made every waiting collective fail (comm::GroupAborted).
//   * a collective that timed out names the replicas that never came (comm::ReplicasMissing):
//     those, with the timeout's message (the hung replica itself may only fail later, when
//     the abort releases it);
//   * else the first replica that failed of its own accord (not an echo);
//   * else (echoes only, which nothing in dpcore produces) the first to fail.
std::vector<FailedReplica> failed_replicas(const ReplicasFailed& failed);

}  // namespace dpcore::train
