// Guards against bad steps and silent divergence (docs/fault-tolerance.md), used by every
// runner the same way:
//
//   --skip-nonfinite   a step whose global loss or reduced gradient holds a NaN or Inf is
//                      not applied (parameters, momentum and step count untouched). Every
//                      replica decides from data that is the same on all of them after the
//                      reduction (the summed loss and the reduced gradient buffer), so all
//                      skip alike; the trainer counts, logs and stops after --max-skipped
//                      in a row.
//   --check-replicas N every N steps, after the optimizer step, the replicas compare bit
//                      checksums of their parameters and momentum, tensor by tensor, through
//                      one small allgather, and the run stops naming the differing replica
//                      and the first differing tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/optimizer.h"
#include "layers/model.h"

namespace dpcore::train {

struct GuardOptions {
  bool skip_nonfinite = false;
  // Skipped steps in a row that stop the run. A NaN from a passing cause (one bad batch, a
  // flipped bit in a gradient) spoils one step; ten in a row, with the parameters held
  // still, means the cause stays (diverged rates, broken data, broken hardware).
  int64_t max_skipped = 10;
  int64_t check_replicas = 0;  // every this many steps; 0: never
  bool check_due(int64_t step) const { return check_replicas > 0 && step % check_replicas == 0; }
};

// Whether every element of `t` (float32 or float64, any device) is finite: read on the host
// from the raw bits (an exponent of all ones is Inf or NaN), so the answer is exact.
bool all_finite(const Tensor& t);
// Whether a step must be skipped: its summed loss or its reduced gradient buffer is not
// all finite.
bool step_is_nonfinite(const Tensor& loss_sum, const Tensor& grads);

// The tensors --check-replicas compares, in order: each parameter (as the model names it,
// "conv1.weight"), then its momentum ("momentum of conv1.weight") when there is a buffer.
std::vector<std::string> checked_tensor_names(const layers::Model& model, const Optimizer& optimizer);
// One 64-bit checksum of the raw bits of each of those tensors. Each 8-byte word goes
// through h = (h ^ word) * odd constant, a bijection for a fixed h: a difference in any
// one word, a single flipped bit included, always changes the checksum.
std::vector<uint64_t> replica_checksums(const layers::Model& model, const Optimizer& optimizer);

// What every replica concludes from everyone's checksums[rank] (one list per rank, the
// same tensors in each): "" when all agree, else which replicas differ, from whom, and the
// first tensor where they do, e.g. "--check-replicas: after step 3, replica 1 differs from
// replica 0: first in conv1.weight (bit checksum ...)". With three replicas or more the
// replicas outside the majority are named; with two, replica 1 is named against replica 0
// (which of two is wrong cannot be told).
std::string compare_checksums(const std::vector<std::vector<uint64_t>>& checksums,
                              const std::vector<std::string>& names, int64_t step);
// The whole check on one replica: its checksums allgathered over `comm` (all ranks call
// it at the same step), then compare_checksums. The same answer on every rank.
std::string check_replicas(comm::Communicator& comm, const layers::Model& model, const Optimizer& optimizer, int64_t step);

}  // namespace dpcore::train
