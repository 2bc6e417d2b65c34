// The meeting point of the local backend's replicas: a reusable barrier that also swaps
// tensor handles, so that each replica can read its neighbours' buffers directly in
// shared memory.
//
// The barrier counts generations: the last replica to arrive starts the next generation
// and wakes the others. Published handles live in two slot arrays used by alternate
// generations: a replica can only be one generation ahead of the slowest reader, so the
// array it writes is never the one still being read. Completing a generation clears the
// previous one's slots.
//
// Failure: the group can be aborted (a replica failed, or someone called abort); every
// wait then ends with a GroupAborted error quoting the first reason, now and forever after.
// A replica that waits longer than the timeout aborts the group naming the replicas that
// did not arrive (it throws ReplicasMissing, which lists them), so one missing replica
// never hangs the others.
//
// Point to point, the rendezvous is also a mailbox: a sender posts a message (its own copy
// of the payload) under (source, destination, tag) and goes on; the receiver takes the
// oldest one under its triple, waiting for it up to the timeout (then the group fails
// naming the sender) or until the group is aborted.
//
// Sub-groups: the members of a split meet their new group's Rendezvous through
// subgroup(), which the first of them to ask creates.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/tensor.h"

namespace dpcore::comm {

// What a replica publishes at a rendezvous: a buffer for its neighbours to read, and/or a
// description of the collective it is in (checked to be the same on every replica), and
// the point its device work had reached (null on the CPU), which readers order after.
struct Slot {
  Slot() = default;
  Slot(Tensor tensor, std::string call) : tensor(std::move(tensor)), call(std::move(call)) {}
  Tensor tensor;
  std::string call;
  std::shared_ptr<Backend::Event> done;
};

class Rendezvous {
 public:
  Rendezvous(int size, std::chrono::milliseconds timeout);
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Publishes `mine`, waits for every replica, returns all their slots in rank order.
  // `op` names the collective in errors ("local allreduce").
  std::vector<Slot> exchange(int rank, Slot mine, const std::string& op);
  void barrier(int rank, const std::string& op) { exchange(rank, Slot{}, op); }

  // Leaves `message` for replica `dst` from `src` under `tag`.
  void post(int src, int dst, int tag, Slot message);
  // The oldest message from `src` to `dst` under `tag`, once there is one.
  Slot take(int src, int dst, int tag, const std::string& op);

  // The Rendezvous of the group of `size` replicas that split number `split` of this group
  // gives `color`: the same object for each of its members, who must each ask once.
  std::shared_ptr<Rendezvous> subgroup(uint64_t split, int color, int size);

  // The first reason wins; later calls keep it.
  void abort(const std::string& reason);
  bool aborted();

 private:
  [[noreturn]] void fail_timeout(const std::string& op);
  void check_not_aborted() const;  // with the mutex held

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable next_generation_;
  uint64_t generation_ = 0;
  int arrived_count_ = 0;
  std::vector<bool> arrived_;
  std::vector<Slot> slots_[2];
  std::string abort_reason_;  // empty while the group is healthy

  std::condition_variable mail_arrived_;
  std::map<std::tuple<int, int, int>, std::deque<Slot>> mailboxes_;  // (src, dst, tag) -> oldest first
  struct Subgroup {
    std::shared_ptr<Rendezvous> rendezvous;
    int members_to_come;
  };
  std::map<std::pair<uint64_t, int>, Subgroup> subgroups_;  // (split, color), until every member has it
};

}  // namespace dpcore::comm
