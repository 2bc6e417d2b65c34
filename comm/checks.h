// Argument checks shared by every backend, so that a bad call fails with the same message
// whichever transport runs it. `op` names the collective: "local allreduce".
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace dpcore::comm {

void check_defined(const std::string& op, const char* what, const Tensor& t);
// Sum needs float32/float64 (local, whose reductions are the Backend's float kernels) or
// also int32/int64 (`integers_ok`: mpi, nccl). Average always needs a float dtype.
void check_reducible(const std::string& op, const Tensor& t, ReduceOp reduce, bool integers_ok);
void check_root(const std::string& op, int root, int size);
// send/recv: `peer` (the `role`: "destination", "source") is another rank of the group of
// `size` than this `rank`, the tag is not negative, the message tensor is defined.
void check_point_to_point(const std::string& op, const char* role, int peer, int tag, const Tensor& t, int rank,
                          int size);
// allgather: out has size x in.numel() elements; reduce_scatter: in has size x
// out.numel(). Both: in and out of the same dtype and on the same device.
void check_allgather_args(const std::string& op, const Tensor& in, const Tensor& out, int size);
void check_reduce_scatter_args(const std::string& op, const Tensor& in, const Tensor& out, int size);
// `gpus[r]` names rank r's GPU ("cuda:0", "cuda:0 on host n1"); fails naming the first two
// ranks that share one, since NCCL would refuse them (with a less helpful message).
void check_distinct_gpus(const std::vector<std::string>& gpus);

}  // namespace dpcore::comm
