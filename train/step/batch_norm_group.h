// --batchnorm sync: the replicas' batch norms combine their statistics (and, in backward,
// their gradient sums) through the replica's communicator, in the same stream of
// collectives as the gradient buckets. Every replica issues them in the same order: the
// same layers, forward then backward, micro-batch by micro-batch.
#pragma once

#include "comm/communicator.h"
#include "engine/ops.h"

namespace dpcore::train {

class ReplicaBatchNormGroup : public ops::BatchNormGroup {
 public:
  explicit ReplicaBatchNormGroup(comm::Communicator& comm) : comm_(comm) {}
  int size() const override { return comm_.size(); }
  int64_t rows() const override { return rows_; }
  // Samples of the micro-batch about to run, over all replicas (the runner knows every share).
  void set_rows(int64_t rows) { rows_ = rows; }
  void all_gather(const Tensor& in, Tensor& out) override { comm_.allgather(in, out).wait(); }
  void all_sum(Tensor& t) override { comm_.allreduce(t, comm::ReduceOp::Sum).wait(); }

 private:
  comm::Communicator& comm_;
  int64_t rows_ = 0;
};

}  // namespace dpcore::train
