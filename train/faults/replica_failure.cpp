#include "train/faults/replica_failure.h"

#include <numeric>

#include "comm/communicator.h"

namespace dpcore::train {

void check_failure_policy(const ReplicaFailurePolicy& policy, int replicas, const std::string& backend,
                          const std::string& sync) {
  DPCORE_CHECK(policy.on_failure == "stop" || policy.shrink(), "--on-replica-failure ", policy.on_failure,
               ": expected stop or shrink");
  DPCORE_CHECK(policy.min_replicas >= 1 && policy.min_replicas <= replicas, "--min-replicas ", policy.min_replicas,
               " must be between 1 and --replicas ", replicas);
  if (!policy.shrink()) return;
  DPCORE_CHECK(backend != "mpi", "--on-replica-failure shrink: with --backend mpi a rank's failure ends the whole ",
               "mpirun job, and an MPI communicator cannot be rebuilt over the survivors (that needs ULFM); run ",
               "under `dpcore launch --min-nproc M`, which restarts the job from its newest checkpoint on fewer ",
               "ranks (docs/fault-tolerance.md)");
  DPCORE_CHECK(backend == "local", "--on-replica-failure shrink: needs --backend local (with --backend ", backend,
               ", a collective that times out cannot tell which rank hung, so the failed replica cannot be told ",
               "from the ones that waited for it)");
  DPCORE_CHECK(sync == "full", "--on-replica-failure shrink: needs --sync full (with --sync ", sync,
               " the replicas step on their own, so there is no one step to abandon and run again)");
  DPCORE_CHECK(replicas >= 2, "--on-replica-failure shrink: needs --replicas 2 or more (with one replica, a failure ",
               "leaves none to go on with)");
}

std::string shrink_log_line(const ReplicaDropped& d) {
  const size_t left = d.survivors.size();
  std::string line = "replica " + std::to_string(d.replica);
  if (d.rank != d.replica) line += " (rank " + std::to_string(d.rank) + ")";
  line += " failed at step " + std::to_string(d.step) + ": " + d.reason + "; dropped it: step " +
          std::to_string(d.step) + " runs again over the same batch on " + std::to_string(left) +
          (left == 1 ? " replica" : " replicas");
  std::vector<int> ranks(left);
  std::iota(ranks.begin(), ranks.end(), 0);
  if (d.survivors == ranks) return line;  // nobody was renumbered
  return line + (left == 1 ? " (replica " : " (replicas ") + list_numbers(d.survivors) +
         (left == 1 ? " is rank " : " are ranks ") + list_numbers(ranks) + " now)";
}

std::string list_numbers(const std::vector<int>& numbers) {
  std::string text;
  for (size_t i = 0; i < numbers.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == numbers.size() ? " and " : ", ") + std::to_string(numbers[i]);
  }
  return text;
}

std::vector<FailedReplica> failed_replicas(const ReplicasFailed& failed) {
  const std::vector<ReplicaFailure>& failures = failed.failures();
  DPCORE_CHECK(!failures.empty(), "failed_replicas: no failure recorded");
  const ReplicaFailure* cause = nullptr;
  for (const ReplicaFailure& f : failures) {
    try {
      std::rethrow_exception(f.error);
    } catch (const comm::ReplicasMissing& timeout) {
      std::vector<FailedReplica> missing;
      for (int rank : timeout.missing) missing.push_back({rank, timeout.what()});
      return missing;
    } catch (const comm::GroupAborted&) {
      // an echo
    } catch (...) {
      if (!cause) cause = &f;
    }
  }
  if (!cause) cause = &failures.front();
  return {{cause->replica, cause->message}};
}

}  // namespace dpcore::train
