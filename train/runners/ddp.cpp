#include "train/runners/ddp.h"

#include <chrono>
#include <cmath>

#include "engine/backend.h"
#include "engine/runtime.h"
#include "engine/seconds_since.h"
#include "engine/trace.h"
#include "train/step/gradient_wire.h"
#include "train/step/loss_scaling.h"
#include "train/step/step.h"

namespace dpcore::train {

using Clock = std::chrono::steady_clock;

std::vector<std::vector<size_t>> bucket_params(const std::vector<int64_t>& bytes, size_t first_cap_bytes,
                                               size_t cap_bytes) {
  std::vector<std::vector<size_t>> buckets;
  size_t filled = 0;
  for (size_t k = bytes.size(); k-- > 0;) {
    const bool full = !buckets.empty() && filled >= (buckets.size() == 1 ? first_cap_bytes : cap_bytes);
    if (buckets.empty() || full) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(k);
    filled += size_t(bytes[k]);
  }
  return buckets;
}

std::vector<Bucket> make_buckets(const FlatParameters& params, size_t first_cap_bytes, size_t cap_bytes) {
  const auto& entries = params.entries();
  const int64_t esize = int64_t(dtype_size(params.dtype()));
  // A tensor's range runs to the start of the next tensor (or the end of the buffer), so
  // the alignment padding between tensors travels with it and the buckets tile the buffer.
  auto end_of = [&](size_t k) { return k + 1 < entries.size() ? entries[k + 1].offset : params.total(); };
  std::vector<int64_t> bytes;
  for (size_t k = 0; k < entries.size(); ++k) bytes.push_back((end_of(k) - entries[k].offset) * esize);
  std::vector<Bucket> buckets;
  for (std::vector<size_t>& indices : bucket_params(bytes, first_cap_bytes, cap_bytes)) {
    Bucket b;
    b.end = end_of(indices.front());
    b.begin = entries[indices.back()].offset;
    b.params = std::move(indices);
    buckets.push_back(std::move(b));
  }
  return buckets;
}

BucketReducer::BucketReducer(Replica& replica, std::vector<Bucket> buckets)
    : replica_(&replica), hooked_(replica.model.get()), buckets_(std::move(buckets)) {
  const auto& params = replica_->model->parameters();
  bucket_of_param_.assign(params.entries().size(), -1);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t p : buckets_[b].params) bucket_of_param_[p] = int(b);
  }
  for (size_t p = 0; p < params.params().size(); ++p) {
    Tensor leaf = params.param(p);
    leaf.add_post_accumulate_hook([this, p](const Tensor&) { on_gradient_ready(p); });
  }
  pending_.assign(buckets_.size(), 0);
}

void BucketReducer::rebind(Replica& replica) {
  std::lock_guard<std::mutex> lock(mutex_);
  DPCORE_CHECK(replica.model.get() == hooked_, "BucketReducer::rebind: not the replica whose model has its hooks");
  replica_ = &replica;
  armed_ = false;
  works_.clear();
  ready_.clear();
}

void BucketReducer::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = true;
  next_to_launch_ = 0;
  works_.clear();
  ready_.clear();
  arrived_ = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = int(buckets_[b].params.size());
}

void BucketReducer::on_gradient_ready(size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  const size_t bucket = size_t(bucket_of_param_[param]);
  ++arrived_;
  if (--pending_[bucket] == 0) ready_.push_back({bucket, arrived_});
  launch_ready_buckets();
}

void BucketReducer::launch_ready_buckets() {
  // Strictly in bucket order, as DDP does: every rank must issue the same collectives in
  // the same order, whatever order its hooks happened to fire in.
  Tensor grads = replica_->model->parameters().grads();
  while (next_to_launch_ < buckets_.size() && pending_[next_to_launch_] == 0) {
    const size_t index = next_to_launch_++;
    const Bucket& b = buckets_[index];
    if (poison_) grads.narrow0(b.begin, b.end).fill_(std::nan(""));
    // The bucket's view of the gradients, or (--grad-dtype bf16) of their 16-bit rounding:
    // the allreduce works in place.
    Tensor slice = outgoing_gradients(replica_->wire_grads, grads, b.begin, b.end);
    trace::CollectiveLabel purpose([&] { return bucket_label(index, slice); });
    works_.push_back(replica_->comm->allreduce(slice, ReduceOp::Sum));
  }
}

trace::Label BucketReducer::bucket_label(size_t index, const Tensor& slice) const {
  const Bucket& b = buckets_[index];
  const auto& entries = replica_->model->parameters().entries();
  std::string names;
  for (size_t p : b.params) names += (names.empty() ? "" : ",") + entries[p].name;
  return {"bucket " + std::to_string(index),
          {{"bucket", int64_t(index)}, {"bytes", int64_t(slice.nbytes())}, {"params", names},
           {"elements", std::vector<int64_t>{b.begin, b.end}}}};
}

void BucketReducer::finish() {
  Clock::time_point backward_done = Clock::now();
  trace::Span span("wait", [&] {
    return trace::Label{"wait for allreduce", {{"on", comm_lane(*replica_)},
                                               {"buckets", int64_t(buckets_.size())}}};
  });
  std::vector<Work> works;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!armed_) {  // no backward ran on this replica (an empty share): send its zeros
      armed_ = true;
      next_to_launch_ = 0;
      works_.clear();
      ready_.clear();
    }
    span.add("launched_after_backward", int64_t(buckets_.size() - next_to_launch_));
    std::fill(pending_.begin(), pending_.end(), 0);
    launch_ready_buckets();
    armed_ = false;
    works = works_;
  }
  for (Work& w : works) w.wait();
  receive_gradients(replica_->wire_grads, replica_->model->parameters().grads());
  exposed_seconds_ = seconds_since(backward_done);
}

// ----------------------------------------------------------------------------- runner

DistributedRunner::DistributedRunner(std::unique_ptr<layers::Model> model, const OptimizerConfig& optimizer, int64_t accum,
                                     const ParallelOptions& options)
    : ReplicatedRunner(options, accum) {
  std::vector<Device> devices = process_replica_devices(options, model->device());
  auto comms = make_communicators(comm_config(options, devices));
  world_size_ = comms[0]->size();
  if (world_size_ != options.replicas) splitter_ = Splitter(options.split, world_size_);  // set by mpirun
  check_faults(world_size_, options);
  start(std::move(model), devices, std::move(comms), optimizer);
  const size_t mib = size_t(1) << 20;
  // As PyTorch's first bucket (1 MiB by default): small, so that communication starts early.
  first_cap_bytes_ = size_t(options.first_bucket_mb * double(mib));
  cap_bytes_ = size_t(options.bucket_mb * double(mib));
  for (Replica& r : replicas_) {
    reducers_.push_back(
        std::make_unique<BucketReducer>(r, make_buckets(r.model->parameters(), first_cap_bytes_, cap_bytes_)));
  }
}

StepStats DistributedRunner::step(const data::Batch& batch) {
  return surviving_failures([&] { return attempt_step(batch); });
}

void DistributedRunner::replicas_dropped(const std::vector<int>& ranks) {
  // (The dropped replicas' hooks went with their models.)
  for (size_t i = ranks.size(); i-- > 0;) reducers_.erase(reducers_.begin() + ranks[i]);
  for (size_t r = 0; r < replicas_.size(); ++r) reducers_[r]->rebind(replicas_[r]);
  world_size_ = int(replicas_.size());
}

StepStats DistributedRunner::attempt_step(const data::Batch& batch) {
  const int64_t n = batch.size;
  // Every rank holds the whole global batch (each process of an mpi run loads it), so each
  // counts its targets alike: no collective.
  const int64_t counted = counted_targets(batch);
  // The batch is cut into micro-batches first, and each micro-batch shared among the
  // replicas (the same on every rank): micro-batch m of R replicas is then exactly
  // micro-batch m of one replica, which is what makes --batchnorm sync equal one replica.
  const std::vector<int64_t> micro = even_split(n, std::min<int64_t>(accum_, n));
  std::vector<std::vector<int64_t>> pieces;  // [micro-batch][rank]
  std::vector<int64_t> shares(size_t(world_size_), 0);
  int64_t micro_begin = 0;
  for (int64_t size : micro) {
    pieces.push_back(splitter_.shares(batch, micro_begin, size));
    micro_begin += size;
    for (int g = 0; g < world_size_; ++g) shares[size_t(g)] += pieces.back()[size_t(g)];
  }
  last_shares_ = pieces;
  std::vector<double> seconds(size_t(world_size_), 0.0);
  Tensor global_loss;
  const int64_t step = step_number();
  std::vector<char> skipped(replicas_.size(), 0), overflowed(replicas_.size(), 0);
  std::vector<std::string> diverged(replicas_.size());
  std::vector<ReplicaLane> lanes(replicas_.size());

  threads_->run([&](int local) {
    const Clock::time_point started = Clock::now();
    Replica& rep = replicas_[size_t(local)];
    BucketReducer& reducer = *reducers_[size_t(local)];
    const int rank = rep.rank();
    size_t last = 0;  // this replica's last micro-batch with samples: its backward communicates
    for (size_t m = 0; m < micro.size(); ++m) {
      if (pieces[m][size_t(rank)] > 0) last = m;
    }
    // An injected NaN goes into each of this replica's buckets as it is launched, so that
    // the reduction carries it and the collectives keep their order (batch norm's included).
    reducer.poison_gradients(faults_.writes_gradients(rep.id, step));

    faults_.before(rep.id, step);  // throw, hang, exit: before any of the step's work
    broadcast_buffers(rep);
    auto t0 = Clock::now();
    rep.model->zero_grad();
    Tensor loss_sum = Tensor::zeros({}, rep.model->dtype(), rep.device());
    int64_t begin = 0;  // of micro-batch m
    for (size_t m = 0; m < micro.size(); begin += micro[m], ++m) {
      int64_t row = begin;
      for (int g = 0; g < rank; ++g) row += pieces[m][size_t(g)];
      const int64_t size = pieces[m][size_t(rank)];
      prepare_batch_norm(rep, pieces[m]);
      if (size == 0) continue;
      trace::Span span("step", [&] {
        return trace::Label{"micro-batch " + std::to_string(m + 1) + " of " + std::to_string(micro.size()),
                            {{"rows", size}, {"first_row", row}, {"communicates", int64_t(m == last)}}};
      });
      if (m == last) reducer.arm();
      auto [x, y] = batch_tensors(batch_rows(batch, row, row + size), rep.device());
      rep.model->set_batch_position(uint64_t(step), row);
      Tensor l = forward_backward(*rep.model, x, y, backward_seed(counted, rep.scaler.get()));
      backend_for(rep.device()).add(loss_sum, l, loss_sum);
    }
    seconds[size_t(rank)] = seconds_since(t0);
    if (!faults_.empty()) {
      finish_device_work(rep);  // the gradients are final before a fault writes them
      faults_.after(rep.id, step, *rep.model, seconds[size_t(rank)], FaultInjector::kNanWrittenByRunner);
      // An injected slowdown is part of this replica's compute, for --split adaptive too.
      seconds[size_t(rank)] = seconds_since(t0);
    }
    ReplicaLane& lane = lanes[size_t(local)];
    lane.compute = seconds[size_t(rank)];  // (before the adaptive allgather rewrites `seconds`)
    reducer.finish();

    // Bookkeeping all ranks must agree on: the global loss, and (adaptive) the timings.
    // The loss is reduced before the optimizer step, which --skip-nonfinite decides from it.
    {
      trace::Span span("wait", [&] { return trace::Label{"allreduce loss (wait)", {{"on", comm_lane(rep)}}}; });
      trace::CollectiveLabel purpose([] { return trace::Label{"loss", {}}; });
      rep.comm->allreduce(loss_sum, ReduceOp::Sum).wait();
    }
    // From the global loss and the reduced gradients: the same data, so the same decision,
    // on every rank.
    skipped[size_t(local)] = guards_.skip_nonfinite && step_is_nonfinite(loss_sum, rep.model->parameters().grads());
    if (skipped[size_t(local)]) {
    } else if (rep.scaler) {
      overflowed[size_t(local)] = scaled_step(*rep.scaler, *rep.optimizer, rep.model->parameters().grads());
    } else {
      rep.optimizer->step();
    }
    finish_device_work(rep);
    faults_.after_step(rep.id, step);
    if (local == 0) global_loss = loss_sum;
    if (splitter_.adaptive()) {
      Tensor mine = Tensor::full({1}, seconds[size_t(rank)], DType::Float32, rep.device());
      Tensor all = Tensor::empty({world_size_}, DType::Float32, rep.device());
      trace::Span span("wait", [&] { return trace::Label{"allgather timings (wait)", {{"on", comm_lane(rep)}}}; });
      trace::CollectiveLabel purpose([] { return trace::Label{"timings", {}}; });
      rep.comm->allgather(mine, all).wait();
      if (local == 0) {
        auto gathered = all.to_vector<float>();
        seconds.assign(gathered.begin(), gathered.end());
      }
    }
    if (guards_.check_due(step)) diverged[size_t(local)] = check_replicas(*rep.comm, *rep.model, *rep.optimizer, step);
    lane.optimizer = skipped[size_t(local)] || overflowed[size_t(local)] ? 0 : rep.optimizer->last_step_seconds();
    lane.samples = shares[size_t(rank)];
    const double total = seconds_since(started);
    lane.blocked = std::max(0.0, total - lane.compute - lane.optimizer);  // collectives, mostly
  });
  for (size_t r = 1; r < replicas_.size(); ++r) {
    DPCORE_CHECK(skipped[r] == skipped[0], "--skip-nonfinite: at step ", step, " replica ", replicas_[r].rank(),
                 skipped[r] ? " skipped" : " took", " the step and replica ", replicas_[0].rank(),
                 " did not: their reduced gradients differ");
    DPCORE_CHECK(overflowed[r] == overflowed[0], "--precision fp16: at step ", step, " replica ", replicas_[r].rank(),
                 overflowed[r] ? " found" : " did not find", " an Inf or NaN in its gradients and replica ",
                 replicas_[0].rank(), " did not: their reduced gradients differ");
  }
  DPCORE_CHECK(diverged[0].empty(), diverged[0]);
  splitter_.observe(seconds, shares);
  // global_loss was allocated on replica 0's stream, but the caller reads it on its own: it
  // gets a copy made on its stream, and the original goes back to replica 0's free list
  // only once that copy has run (the allocator reuses blocks per stream).
  Tensor loss = global_loss.clone();
  runtime::synchronize(loss.device());
  StepStats stats{loss, n, counted, skipped[0] != 0, combine_lanes(lanes)};
  stats.overflow = overflowed[0] != 0;
  return stats;
}

bool DistributedRunner::is_primary() const { return replicas_[0].rank() == 0; }

std::string DistributedRunner::describe() const {
  RunnerDescription d;
  d.parallelism = "distributed data parallel (ddp, " + replicas_[0].comm->backend() + ")";
  d.replicas = world_size_;
  for (const Replica& r : replicas_) d.devices.push_back(r.device());
  d.devices_here = true;  // with mpi, each process holds only some of the replicas
  d.details = {std::to_string(reducers_[0]->buckets().size()) + " buckets", "split " + splitter_.describe()};
  if (sync_batch_norm_) d.details.push_back("batchnorm sync");
  d.accum = accum_;
  return describe_runner(d);
}

}  // namespace dpcore::train
