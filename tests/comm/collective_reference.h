// Serial references for the collectives, shared by the local and mpi tests: each rank's
// input is generated from (rank, count), so every process and thread can compute every
// rank's data and the expected results without communicating.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "support/test_support.h"

namespace dpcore::testing {

// The element counts the collective tests sweep: empty, smaller than the world size,
// uneven splits, and large buffers.
inline const std::vector<int64_t> kCounts = {0, 1, 2, 3, 7, 1000, 1001, 65537, 1000000};

template <class T>
std::vector<T> rank_input(int rank, int64_t count) {
  return random_vector<T>(size_t(count), uint64_t(rank) * 7919 + uint64_t(count));
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
    for (int step = 2; step <= world; ++step) acc = inputs[size_t((c + step) % world)][i] + acc;
    out[i] = op == comm::ReduceOp::Average ? T(1.0 / world) * acc : acc;
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
