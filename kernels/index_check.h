// What Backend::check_indices checks in a tensor of int64 indices, and how its error names
// the offending entry:
//   "nll_loss: target 12 at row 3 is outside [0, 10)"
//   "embedding: id -1 at position 5 is outside [0, 100)"
//   "cross_entropy: target 10 at position 2 is outside [0, 10) and is not ignore_index -100"
// The CPU backend checks on the host, the CUDA backend on the device without a sync
// (kernels/cuda_runtime/target_check.h); both fail through fail_index.
#pragma once

#include <cstdint>
#include <optional>

#include "kernels/error.h"

namespace dpcore::kernels {

// PyTorch's default ignore_index of cross_entropy and nll_loss: never a class.
constexpr int64_t kDefaultIgnoreIndex = -100;

struct IndexCheck {
  const char* op;     // the op that reads the indices
  const char* index;  // what an entry is: "target", "id"
  const char* at;     // what its place is called: "row", "position"
  int64_t limit;      // valid entries lie in [0, limit)
  std::optional<int64_t> ignore = std::nullopt;  // an entry equal to it passes (cross_entropy's ignore_index)
};

inline bool index_passes(const IndexCheck& check, int64_t value) {
  return (value >= 0 && value < check.limit) || (check.ignore && value == *check.ignore);
}

[[noreturn]] inline void fail_index(const IndexCheck& check, int64_t place, int64_t value) {
  if (check.ignore)
    fail(check.op, ": ", check.index, " ", value, " at ", check.at, " ", place, " is outside [0, ", check.limit,
         ") and is not ignore_index ", *check.ignore);
  fail(check.op, ": ", check.index, " ", value, " at ", check.at, " ", place, " is outside [0, ", check.limit, ")");
}

}  // namespace dpcore::kernels
