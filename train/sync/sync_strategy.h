// How the replicas combine their work: --sync full | local:K | async.
//
//   full     one synchronous step over the global batch (--mode dp or ddp): every replica
//            computes its share's gradient, the gradients are summed, every replica takes
//            the same step. What PyTorch's DataParallel and DDP do.
//   local:K  local SGD (periodic averaging, train/sync/local_sgd.h): each replica steps its own
//            optimizer on its own share's mean gradient every step, with no communication;
//            every K steps the parameters and momentum buffers are averaged, each replica
//            weighted by the samples it saw since the last averaging. K = 1 with momentum
//            averaged is `full` up to float rounding (the update is linear in the gradient).
//   async    a parameter server in this process (train/sync/async_sgd.h): a master copy of the
//            parameters; each replica takes a snapshot, computes the gradient of the next
//            piece of data, and the master applies it as soon as it arrives, with no barrier
//            between replicas; --max-staleness bounds how many updates a gradient may lag.
#pragma once

#include <cstdint>
#include <string>

namespace dpcore::train {

struct SyncStrategy {
  enum class Kind { Full, Local, Async };
  Kind kind = Kind::Full;
  int64_t period = 1;  // local: K, the steps between averagings
};

// Parses --sync; throws an Error naming the flag value and what is expected.
SyncStrategy parse_sync(const std::string& flag);

}  // namespace dpcore::train
