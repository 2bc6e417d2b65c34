// --mode ddp: PyTorch DistributedDataParallel's schedule, on flat buffers.
//
// Every replica (a thread with --backend local, a process with mpi) runs forward and
// backward on its own share of the global batch. The gradient buffer is cut into buckets
// in REVERSE parameter order (the order backward finalises them): the first bucket holds
// at most 1 MiB, the others --bucket-mb (25 MiB by default), each overshooting by at most
// one tensor. A bucket is a contiguous slice of the persistent flat gradient buffer, so
// its allreduce works in place: no copy in, no copy out (DDP's gradient_as_bucket_view).
//
// When the last gradient of a bucket has been accumulated (a post-accumulate hook on each
// parameter counts them), its allreduce is launched on the communication thread/stream,
// strictly in bucket order, while backward goes on with earlier layers. With --accum A,
// micro-batches 1..A-1 arm no hooks and communicate nothing; the last one does.
//
// Averaging: each replica seeds its backward with 1/N, N the GLOBAL batch (1/M, M its
// counted targets, for per-token labels: train/step/step.h), so the SUM allreduce yields the
// exact mean over all samples (tokens) even when shares differ (DDP divides by the world
// size W instead, which is right only for equal shares). Every process of an mpi run holds
// the whole global batch, so M needs no collective.
#pragma once

#include <atomic>
#include <mutex>
#include <vector>

#include "engine/trace.h"
#include "train/runners/data_parallel.h"

namespace dpcore::train {

struct Bucket {
  int64_t begin = 0, end = 0;     // element range of the flat gradient buffer
  std::vector<size_t> params;     // parameter indices, in the order backward finalises them
};

// Buckets over `params` in reverse order: the first capped at first_cap_bytes, the rest
// at cap_bytes (each may overshoot by one tensor).
std::vector<Bucket> make_buckets(const FlatParameters& params, size_t first_cap_bytes, size_t cap_bytes);
// The same cut over tensors of `bytes` each (in the flat buffer's order), as parameter
// indices: for the profile of a model dpcore does not build (dpcore predict --profile).
std::vector<std::vector<size_t>> bucket_params(const std::vector<int64_t>& bytes, size_t first_cap_bytes,
                                               size_t cap_bytes);

// The buckets of one replica and the hooks that launch their allreduces.
class BucketReducer {
 public:
  BucketReducer(Replica& replica, std::vector<Bucket> buckets);
  // The replica moved to another place (a shrink renumbered the replicas: its model, and so
  // its hooks, stay the same). Also forgets an abandoned step: disarmed, nothing in flight.
  void rebind(Replica& replica);

  // Hooks launch allreduces only between arm() and finish(): during the backward of the
  // last micro-batch.
  void arm();
  // --inject nan: the buckets of this step are set to NaN as they are launched (their
  // gradients are final then), so that the faulty replica issues its collectives in the
  // same order as its peers, between synchronised batch norm's. Until the next call.
  void poison_gradients(bool on) { poison_ = on; }
  // Launches the buckets not launched yet (all of them when this replica ran no backward,
  // e.g. an empty share), waits for every allreduce, and disarms.
  void finish();
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Seconds between the end of the armed backward and the last allreduce finishing: the
  // communication that the overlap did NOT hide (for benchmarks).
  double exposed_seconds() const { return exposed_seconds_; }
  // The buckets whose last gradient arrived during the last armed backward, in the order
  // they became ready, each with how many of the armed gradients had arrived by then
  // (for --explain). A bucket missing here was launched by finish(): this replica ran no
  // backward (an empty share).
  struct Ready {
    size_t bucket;
    int64_t gradients;
  };
  const std::vector<Ready>& ready_order() const { return ready_; }

 private:
  void on_gradient_ready(size_t param);
  void launch_ready_buckets();  // in bucket order; mutex held
  // What a trace shows of bucket `index`'s allreduce: its number, bytes, parameters, range.
  trace::Label bucket_label(size_t index, const Tensor& slice) const;

  Replica* replica_;
  const layers::Model* hooked_;  // the model whose parameters' hooks call this reducer
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_param_;
  std::vector<int> pending_;      // per bucket: gradients still to come
  std::vector<Work> works_;
  size_t next_to_launch_ = 0;
  bool armed_ = false;
  bool poison_ = false;
  std::vector<Ready> ready_;
  int64_t arrived_ = 0;           // gradients since arm()
  std::mutex mutex_;
  double exposed_seconds_ = 0;
};

class DistributedRunner : public ReplicatedRunner {
 public:
  DistributedRunner(std::unique_ptr<layers::Model> model, const OptimizerConfig& optimizer, int64_t accum,
                    const ParallelOptions& options);
  StepStats step(const data::Batch& batch) override;
  bool is_primary() const override;
  std::string describe() const override;
  const BucketReducer& reducer(size_t replica) const { return *reducers_[replica]; }
  // The caps make_buckets cut the gradient buffer with (for --explain).
  size_t first_bucket_cap_bytes() const { return first_cap_bytes_; }
  size_t bucket_cap_bytes() const { return cap_bytes_; }

 private:
  StepStats attempt_step(const data::Batch& batch);
  void replicas_dropped(const std::vector<int>& ranks) override;

  std::vector<std::unique_ptr<BucketReducer>> reducers_;
  int world_size_ = 1;
  size_t first_cap_bytes_ = 0, cap_bytes_ = 0;
};

}  // namespace dpcore::train
