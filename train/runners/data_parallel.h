// Data parallelism made explicit. The five moves of nn.DataParallel, each a function you
// can read on its own (docs/data-parallel.md walks through them):
//
//   scatter         split the global batch's rows among the replicas (train/step/split.h)
//                   and copy each share to its replica's device;
//   replicate       copy the root model to every replica ONCE, then broadcast the
//                   parameters from rank 0 (the reduce keeps them equal afterwards);
//   parallel_apply  run each replica's forward (or backward) on its own thread
//                   (ReplicaThreads);
//   gather          concatenate the replicas' outputs on the root device, where the loss
//                   is computed; its gradient is scattered back the same way;
//   reduce          allreduce the replicas' flat gradient buffers (SUM: each replica's
//                   gradients were already scaled by 1/M, M the counted targets of the
//                   global batch: N for one class per sample), then every
//                   replica takes the same SGD step.
//
// DataParallelRunner strings these together for --mode dp. --mode ddp (train/runners/ddp.h)
// keeps scatter, replicate and reduce but drops gather: each replica computes the loss of
// its own share, and the reduce is split into buckets that overlap the backward pass.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "train/step/batch_norm_group.h"
#include "train/runners/replica_threads.h"
#include "train/step/split.h"
#include "engine/data/loader.h"
#include "train/runners/runner.h"
#include "train/step/step_snapshot.h"

namespace dpcore::train {

using comm::CommConfig;
using comm::Communicator;
using comm::ReduceOp;
using comm::Work;

// One replica of this process: its model (parameters in flat buffers on its device), its
// optimizer, its communicator (rank = global replica index), and with --batchnorm sync the
// group its batch norms combine statistics over.
struct Replica {
  std::unique_ptr<layers::Model> model;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<ReplicaBatchNormGroup> batch_norm_group;  // null: --batchnorm local
  std::unique_ptr<GradScaler> scaler;  // --precision fp16's loss scaler (train/step/loss_scaling.h); null otherwise
  // --grad-dtype bf16: the gradients as the allreduce moves them (train/step/gradient_wire.h);
  // undefined for float32.
  Tensor wire_grads;
  // Its rank at the start of the run, which --inject, the log and the trace lanes name it
  // by: after a shrink (--on-replica-failure shrink) its rank may be lower.
  int id = 0;
  Device device() const { return model->device(); }
  int rank() const { return comm->rank(); }
};

// Builds this process's replicas: replica 0 keeps `root`, the others are copies on their
// devices. Call broadcast_parameters afterwards, on every replica's thread.
std::vector<Replica> replicate(std::unique_ptr<layers::Model> root, const std::vector<Device>& devices,
                               std::vector<std::unique_ptr<Communicator>> comms, const OptimizerConfig& optimizer);
// Rank 0's parameters, buffers and optimizer state (momentum buffer, step count) to every
// replica (runs on replica r's thread). `steps` is rank 0's step count, known to every
// process: the processes of an mpi run resume from the same checkpoint.
void broadcast_state(Replica& r, int64_t steps);
// Rank 0's buffers (batch norm's running statistics) to every replica, at the start of
// each step, as DDP's broadcast_buffers: with --batchnorm local each replica updated its
// own from its share. Nothing to do for a model without buffers.
void broadcast_buffers(Replica& r);
// Before a micro-batch's forward: with --batchnorm sync, the group's rows (`pieces`, each
// replica's share of the micro-batch, all of them non-empty: checked, naming the replica).
void prepare_batch_norm(Replica& r, const std::vector<int64_t>& pieces);
// The samples of a micro-batch over the group that shares it as `pieces` (each replica's),
// refusing an empty piece, naming the replica, the shares and `micro_batches_flag` (fewer of
// which would give each replica more).
int64_t batch_norm_group_rows(const std::vector<int64_t>& pieces, const char* micro_batches_flag);

// A replica's share of the rows [begin, begin + count) of a host batch, on its device.
struct Shard {
  Tensor x, y;
  int64_t begin = 0, size = 0;  // rows of the batch
};
// The shares of rows [begin, begin + count) for replicas with `shares` and `devices`.
std::vector<Shard> scatter(const data::Batch& batch, int64_t begin, const std::vector<int64_t>& shares,
                           const std::vector<Device>& devices);
// Concatenates [n_r, ...] tensors ([n_r, C], or [n_r, T, C] per token) along dim 0 into one
// tensor on `device` (empty parts skipped).
Tensor gather(const std::vector<Tensor>& parts, Device device);
// Sums the flat gradient buffers of all replicas into every replica (runs on replica r's thread).
void reduce_gradients(Replica& r);

// What both data-parallel runners share: this process's replicas, one thread each
// (ReplicaThreads), and the splitter that shares out each batch.
class ReplicatedRunner : public StepRunner {
 public:
  layers::Model& model() override { return *replicas_[0].model; }
  Optimizer& optimizer() override { return *replicas_[0].optimizer; }
  // Every replica of this process (the other processes of an mpi run set the same rates).
  void set_rates(double lr, double momentum) override;
  // Rank 0's parameters and optimizer state to every replica.
  void sync_replicas() override;
  // The replicas' loss scalers (--precision fp16): each unscales the same reduced gradient,
  // so all hold the same state; replica 0's is reported (loss_scaler()) and every one is set.
  void set_loss_scale(const GradScalerState& state) override;
  // With mpi (or nccl under mpirun): this process's one replica's communicator, on its thread.
  bool across_processes(const std::function<void(Communicator&, Device)>& fn) override;
  // This process's replica number `replica` (0 is model()).
  const layers::Model& replica_model(size_t replica) const { return *replicas_[replica].model; }
  size_t local_replicas() const { return replicas_.size(); }
  // Read-only views of the runner's state, for --explain (train/observe/explain.h), which must
  // describe what ran rather than what the options asked for.
  const Replica& replica(size_t local) const { return replicas_[local]; }
  const Splitter& splitter() const { return splitter_; }
  int64_t accum() const { return accum_; }
  bool sync_batch_norm() const { return sync_batch_norm_; }
  // The shares the last step used, [micro-batch][rank] (global ranks: with mpi, also the
  // other processes' replicas, which the splitter gives every rank alike).
  const std::vector<std::vector<int64_t>>& last_shares() const { return last_shares_; }

 protected:
  ReplicatedRunner(const ParallelOptions& options, int64_t accum);
  GradScaler* loss_scaler() const override;  // replica 0's
  // Also makes each replica's batch norm group under --batchnorm sync.
  // Replicates `model` over `devices` with `comms`, starts one thread per replica, each on
  // its own stream, and broadcasts rank 0's state.
  void start(std::unique_ptr<layers::Model> model, const std::vector<Device>& devices,
             std::vector<std::unique_ptr<Communicator>> comms, const OptimizerConfig& optimizer);
  // --inject's faults against the job's replicas (world_size: mpirun's, with mpi), naming
  // the flag that set their number.
  void check_faults(int world_size, const ParallelOptions& options) const;
  // Runs the step `attempt` under --on-replica-failure: with stop, once; with shrink, again
  // without the replicas that failed, each time from the state before the step, until it
  // succeeds (the replicas dropped listed in its StepStats) or too few replicas would be
  // left (TooFewReplicas, with that state back on the root). train/faults/shrink.cpp.
  StepStats surviving_failures(const std::function<StepStats()>& attempt);
  // Drops what a subclass keeps per replica for the replicas at `ranks` (ascending), which
  // were just dropped: replicas_ holds the survivors, with their new communicators, already.
  // (Only the runners that call surviving_failures need it.)
  virtual void replicas_dropped(const std::vector<int>& /*ranks*/) {}
  // --batchnorm sync: each replica's group over its communicator (start() and a shrink call
  // it). The hybrid runner's batch norms are synchronised per stage instead.
  virtual void make_batch_norm_groups();

  std::vector<Replica> replicas_;
  std::unique_ptr<ReplicaThreads> threads_;
  Splitter splitter_;
  int64_t accum_;
  bool sync_batch_norm_;
  FaultInjector faults_;   // --inject; its hangs are released when a replica fails
  GuardOptions guards_;    // --skip-nonfinite, --check-replicas
  std::vector<std::vector<int64_t>> last_shares_;  // set by step()

 private:
  // One thread per replica, each on its own stream and trace lane ("replica ID").
  void start_threads();
  // Drops the replicas at `failed` (ranks) and rebuilds the group over the survivors (their
  // communicators, batch norm groups, threads, the splitter), in rank order. train/faults/shrink.cpp.
  void drop_replicas(const std::vector<FailedReplica>& failed);

  ParallelOptions options_;  // what the group is rebuilt with after a shrink
  StepSnapshot before_step_; // --on-replica-failure shrink: the root's state before the step
};

// --mode dp: one process, R replicas; the loss is computed on the root from gathered outputs.
class DataParallelRunner : public ReplicatedRunner {
 public:
  DataParallelRunner(std::unique_ptr<layers::Model> model, const OptimizerConfig& optimizer, int64_t accum,
                     const ParallelOptions& options);
  StepStats step(const data::Batch& batch) override;
  std::string describe() const override;

 private:
  StepStats attempt_step(const data::Batch& batch);
  void replicas_dropped(const std::vector<int>& ranks) override;

  std::vector<Device> devices_;
};

// The communicator settings for `devices` under the options (backend, timeout).
CommConfig comm_config(const ParallelOptions& options, std::vector<Device> devices);

// Device of each replica for the options: --replicas R local replicas on the model's
// device type (round-robin over GPUs), or the explicit list.
std::vector<Device> replica_devices(const ParallelOptions& options, Device model_device);
// The devices of this process's replicas: one, the GPU of its rank on this host (or the
// CPU), in a job started by mpirun; else replica_devices.
std::vector<Device> process_replica_devices(const ParallelOptions& options, Device model_device);
// Puts each replica's device work on its own stream (replica r's thread, stream r), so
// replicas sharing a GPU run concurrently. Nothing to do on the CPU.
void use_replica_streams(ReplicaThreads& pool, std::vector<Replica>& replicas);
// Waits for the device work the calling thread queued for this replica on its current
// stream (before another thread reads the results). Not the whole device's: a collective
// the replica's buckets launched on the communicator's stream may be waiting on the device
// for a peer that hangs, which only the communicator's timeout (in its wait) may end; a
// device-wide wait would hang with it.
void finish_device_work(Replica& r);
// The trace lane of replica r's communication thread ("comm 2"): whom its waits wait on.
std::string comm_lane(const Replica& r);
// Aborts every communicator of `replicas` (a replica failed: wake the others).
void abort_all(std::vector<Replica>& replicas, int failed, const std::string& message);

}  // namespace dpcore::train
