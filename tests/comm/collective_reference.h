// Serial references for the collectives, shared by the local and mpi tests: each rank's
// input is generated from (rank, count), so every process and thread can compute every
// rank's data and the expected results without communicating.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"
#include "kernels/half_types.h"
#include "support/test_support.h"

namespace dpcore::testing {

// The element counts the collective tests sweep: empty, smaller than the world size,
// uneven splits, and large buffers.
inline const std::vector<int64_t> kCounts = {0, 1, 2, 3, 7, 1000, 1001, 65537, 1000000};

// The 16-bit floats the collectives sum (--grad-dtype bf16's allreduce).
template <class T>
constexpr bool is_half_v = std::is_same_v<T, kernels::BFloat16> || std::is_same_v<T, kernels::Float16>;
inline float widened(kernels::BFloat16 h) { return kernels::bfloat16_to_float(h); }
inline float widened(kernels::Float16 h) { return kernels::float16_to_float(h); }
template <class T>
T rounded_to(float f) {
  if constexpr (std::is_same_v<T, kernels::BFloat16>) return kernels::float_to_bfloat16(f);
  else return kernels::float_to_float16(f);
}

// One step of a reduction as the collectives document it: a + b; for 16-bit floats formed
// in float32 and rounded back to 16 bits, as NCCL's kernels sum them.
template <class T>
T sum_of(T a, T b) {
  if constexpr (is_half_v<T>) return rounded_to<T>(widened(a) + widened(b));
  else return a + b;
}

template <class T>
std::vector<T> rank_input(int rank, int64_t count) {
  const uint64_t seed = uint64_t(rank) * 7919 + uint64_t(count);
  if constexpr (is_half_v<T>) {
    std::vector<T> out;
    for (float x : random_vector<float>(size_t(count), seed)) out.push_back(rounded_to<T>(x));
    return out;
  } else {
    return random_vector<T>(size_t(count), seed);
  }
}

template <class T>
std::vector<std::vector<T>> all_inputs(int world, int64_t count) {
  std::vector<std::vector<T>> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(rank_input<T>(r, count));
  return inputs;
}

// Element i reduced over the ranks in the order the local backend documents
// (docs/collectives.md): for the chunk c that holds i, start at rank c+1 and add the
// ranks to the right, ending with rank c. Average multiplies by 1/world afterwards.
template <class T>
std::vector<T> ring_reduction(const std::vector<std::vector<T>>& inputs, const std::vector<int64_t>& chunk_of,
                              comm::ReduceOp op) {
  const int world = int(inputs.size());
  std::vector<T> out(inputs[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    int c = int(chunk_of[i]);
    T acc = inputs[size_t((c + 1) % world)][i];
    for (int step = 2; step <= world; ++step) acc = sum_of(inputs[size_t((c + step) % world)][i], acc);
    if constexpr (is_half_v<T>) out[i] = acc;  // (16-bit floats are summed only)
    else out[i] = op == comm::ReduceOp::Average ? T(1.0 / world) * acc : acc;
  }
  return out;
}

// Plain left-to-right sum over ranks 0, 1, ... (for transports whose order is their own).
template <class T>
std::vector<T> serial_reduction(const std::vector<std::vector<T>>& inputs, comm::ReduceOp op) {
  std::vector<T> out(inputs[0].size(), T(0));
  for (const auto& x : inputs) {
    for (size_t i = 0; i < out.size(); ++i) out[i] += x[i];
  }
  if (op == comm::ReduceOp::Average) {
    for (T& v : out) v = T(v / T(inputs.size()));
  }
  return out;
}

template <class T>
bool bit_identical(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// The per-rank block of allgather and reduce_scatter for a message of about `count`
// elements in total: ceil(count / world).
inline int64_t block_for(int64_t count, int world) { return (count + world - 1) / world; }

// What waiting on `work` throws, or "" when it completes: the failure tests' view of a Work.
inline std::string error_of(const comm::Work& work) {
  try {
    work.wait();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace dpcore::testing
