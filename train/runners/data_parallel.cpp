#include "train/runners/data_parallel.h"

#include <chrono>
#include <optional>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/runtime.h"
#include "engine/seconds_since.h"
#include "engine/trace.h"
#include "train/step/gradient_wire.h"
#include "train/step/loss_scaling.h"
#include "train/step/step.h"

namespace dpcore::train {

std::vector<Replica> replicate(std::unique_ptr<layers::Model> root, const std::vector<Device>& devices,
                               std::vector<std::unique_ptr<Communicator>> comms, const OptimizerConfig& optimizer) {
  DPCORE_CHECK(devices.size() == comms.size() && !devices.empty(), "replicate: ", devices.size(), " devices for ",
               comms.size(), " communicators");
  trace::Span span("replicate", [&] {
    return trace::Label{"replicate", {{"replicas", int64_t(devices.size())},
                                      {"bytes", int64_t(root->parameters().values().nbytes())}}};
  });
  std::vector<Replica> replicas(devices.size());
  for (size_t r = 0; r < devices.size(); ++r) {
    replicas[r].model = r == 0 ? std::move(root) : replicas[0].model->replicate(devices[r]);
    if (r == 0 && replicas[0].model->device() != devices[0]) replicas[0].model = replicas[0].model->replicate(devices[0]);
    replicas[r].optimizer = make_optimizer(replicas[r].model->parameters(), optimizer);
    replicas[r].scaler = make_loss_scaler(*replicas[r].model);
    replicas[r].comm = std::move(comms[r]);
    replicas[r].id = replicas[r].comm->rank();
  }
  // The copies and zero fills above (parameters, gradients, optimizer state) are queued on
  // this thread's current stream of each device, the legacy default one; the collectives
  // that come next (broadcast_state) run on the replica threads' and the communicators'
  // non-blocking streams, which CUDA does not order after the legacy stream. Waiting for
  // that stream of each device here orders all of it before the first collective.
  for (Replica& r : replicas) finish_device_work(r);
  return replicas;
}

namespace {
// Rank 0's `t` to every replica, waiting for it, as one span named "broadcast WHAT" on
// the replica's lane (and on its communication lane).
void broadcast_from_rank0(Replica& r, Tensor& t, const char* what) {
  auto label = [&] {
    return trace::Label{std::string("broadcast ") + what, {{"bytes", int64_t(t.nbytes())}, {"on", comm_lane(r)}}};
  };
  trace::Span span("wait", label);  // the replica waits; its comm lane runs the broadcast
  trace::CollectiveLabel purpose([&] { return trace::Label{what, {}}; });
  r.comm->broadcast(t, 0).wait();
}
}  // namespace

void broadcast_state(Replica& r, int64_t steps) {
  Tensor values = r.model->parameters().values();
  broadcast_from_rank0(r, values, "parameters");
  broadcast_buffers(r);
  for (OptimizerState& s : r.optimizer->state()) broadcast_from_rank0(r, s.tensor, s.name.c_str());
  r.optimizer->set_steps_taken(steps);
}

void broadcast_buffers(Replica& r) {
  if (!r.model->has_batch_norm()) return;
  Tensor buffers = r.model->buffers().values();
  broadcast_from_rank0(r, buffers, "buffers");
}

int64_t batch_norm_group_rows(const std::vector<int64_t>& pieces, const char* micro_batches_flag) {
  int64_t rows = 0;
  std::string listed;
  for (int64_t p : pieces) rows += p, listed += (listed.empty() ? "" : ",") + std::to_string(p);
  for (size_t g = 0; g < pieces.size(); ++g) {
    DPCORE_CHECK(pieces[g] > 0, "--batchnorm sync: replica ", g, " gets no samples of a micro-batch of ", rows,
                 " (shares ", listed, "), but every replica must join every synchronised batch norm: use a larger ",
                 "--batch, or fewer ", micro_batches_flag, " or --replicas");
  }
  return rows;
}

void prepare_batch_norm(Replica& r, const std::vector<int64_t>& pieces) {
  if (r.batch_norm_group) r.batch_norm_group->set_rows(batch_norm_group_rows(pieces, "--accum"));
}

std::vector<Shard> scatter(const data::Batch& batch, int64_t begin, const std::vector<int64_t>& shares,
                           const std::vector<Device>& devices) {
  trace::Span span("scatter", [&] {
    const int64_t row_bytes = batch.sample_numel() * int64_t(batch.ids ? sizeof(int64_t) : sizeof(float)) +
                              batch.labels_per_sample * int64_t(sizeof(int64_t));
    std::vector<int64_t> bytes;
    for (int64_t share : shares) bytes.push_back(share * row_bytes);
    return trace::Label{"scatter", {{"first_row", begin}, {"rows", shares}, {"bytes", bytes}}};
  });
  std::vector<Shard> shards(shares.size());
  int64_t row = begin;
  for (size_t r = 0; r < shares.size(); ++r) {
    Shard& s = shards[r];
    s.begin = row, s.size = shares[r];
    if (s.size > 0) std::tie(s.x, s.y) = batch_tensors(batch_rows(batch, row, row + s.size), devices[r]);
    row += s.size;
  }
  return shards;
}

Tensor gather(const std::vector<Tensor>& parts, Device device) {
  trace::Span span("gather", [&] {
    std::vector<int64_t> rows, bytes;
    for (const Tensor& p : parts) {
      rows.push_back(p.defined() ? p.size(0) : 0);
      bytes.push_back(p.defined() ? int64_t(p.nbytes()) : 0);
    }
    return trace::Label{"gather", {{"rows", rows}, {"bytes", bytes}, {"to", device.str()}}};
  });
  int64_t rows = 0;
  Shape row_shape;  // of one row: [C], or [T, C] per token
  bool first = true;
  DType dtype = DType::Float32;
  for (const Tensor& p : parts) {
    if (!p.defined()) continue;
    const Shape shape(p.shape().begin() + 1, p.shape().end());
    DPCORE_CHECK(p.dim() >= 2 && (first || shape == row_shape), "gather: part ", p.str(), " does not match");
    rows += p.size(0), row_shape = shape, dtype = p.dtype(), first = false;
  }
  Shape out_shape{rows};
  out_shape.insert(out_shape.end(), row_shape.begin(), row_shape.end());
  Tensor out = Tensor::empty(out_shape, dtype, device);
  int64_t row = 0;
  for (const Tensor& p : parts) {
    if (!p.defined()) continue;
    out.narrow0(row, row + p.size(0)).copy_(p.detach());
    row += p.size(0);
  }
  return out;
}

void reduce_gradients(Replica& r) {
  Tensor grads = r.model->parameters().grads();
  Tensor outgoing = outgoing_gradients(r.wire_grads, grads, 0, grads.numel());  // grads, or their 16-bit copy
  trace::Span span("wait", [&] {
    return trace::Label{"allreduce gradients (wait)", {{"bytes", int64_t(outgoing.nbytes())},
                                                       {"on", comm_lane(r)}}};
  });
  trace::CollectiveLabel purpose([&] { return trace::Label{"all gradients", {}}; });
  r.comm->allreduce(outgoing, ReduceOp::Sum).wait();
  receive_gradients(r.wire_grads, grads);
}

std::vector<Device> replica_devices(const ParallelOptions& options, Device model_device) {
  if (!options.devices.empty()) {
    DPCORE_CHECK(int(options.devices.size()) == options.replicas, "data parallel: ", options.devices.size(),
                 " devices for ", options.replicas, " replicas");
    return options.devices;
  }
  return comm::place_replicas(options.replicas, model_device.type);
}

std::vector<Device> process_replica_devices(const ParallelOptions& options, Device model_device) {
  // In a job started by mpirun (--backend mpi, or nccl with one process per GPU), this
  // process holds one replica and mpirun decides how many there are; a GPU replica goes to
  // the GPU of its rank on this host.
  std::optional<comm::Launch> launch = comm::mpirun_launch();
  if (options.backend == "mpi" || (options.backend == "nccl" && launch && launch->size > 1)) {
    Device d = model_device;
    if (d.is_cuda() && launch) d = Device::cuda(launch->local_rank % std::max(1, runtime::cuda_device_count()));
    return {d};
  }
  return replica_devices(options, model_device);
}

void use_replica_streams(ReplicaThreads& pool, std::vector<Replica>& replicas) {
  pool.run([&](int r) {
    Device d = replicas[size_t(r)].device();
    backend_for(d).use_thread_stream(d.index, r);
  });
}

void finish_device_work(Replica& r) { runtime::synchronize_stream(r.device()); }

std::string comm_lane(const Replica& r) { return "comm " + std::to_string(r.rank()); }

void abort_all(std::vector<Replica>& replicas, int failed, const std::string& message) {
  for (Replica& r : replicas) r.comm->abort("replica " + std::to_string(failed) + " failed: " + message);
}

CommConfig comm_config(const ParallelOptions& options, std::vector<Device> devices) {
  CommConfig config;
  config.backend = options.backend;
  config.devices = std::move(devices);
  config.local.timeout = std::chrono::milliseconds(int64_t(options.timeout_s * 1000));
  return config;
}

ReplicatedRunner::ReplicatedRunner(const ParallelOptions& options, int64_t accum)
    : splitter_(options.split, options.replicas),
      accum_(accum),
      sync_batch_norm_(options.batchnorm == "sync"),
      faults_(options.faults),
      guards_(options.guards),
      options_(options) {
  DPCORE_CHECK(options.batchnorm == "local" || options.batchnorm == "sync", "--batchnorm '", options.batchnorm,
               "': expected local or sync");
}

void ReplicatedRunner::check_faults(int world_size, const ParallelOptions& options) const {
  faults_.check(world_size,
                world_size != options.replicas ? std::to_string(world_size) + " processes (mpirun -np)"
                                               : "--replicas " + std::to_string(world_size));
}

void ReplicatedRunner::start(std::unique_ptr<layers::Model> model, const std::vector<Device>& devices,
                             std::vector<std::unique_ptr<Communicator>> comms, const OptimizerConfig& optimizer) {
  replicas_ = replicate(std::move(model), devices, std::move(comms), optimizer);
  for (Replica& r : replicas_) r.wire_grads = make_wire_gradients(grad_dtype_of(options_.grad_dtype), r.model->parameters().grads());
  // Processes of one job: each its rank in a trace, as rank 0's file of them all shows them
  // (train/observe/job_trace.h).
  const int rank = replicas_[0].rank();
  if (replicas_[0].comm->size() > int(replicas_.size())) trace::set_process(rank, "rank " + std::to_string(rank));
  make_batch_norm_groups();
  start_threads();
  sync_replicas();
}

void ReplicatedRunner::make_batch_norm_groups() {
  if (!sync_batch_norm_) return;
  for (Replica& r : replicas_) {
    r.batch_norm_group = std::make_unique<ReplicaBatchNormGroup>(*r.comm);
    r.model->set_batch_norm_group(r.batch_norm_group.get());
  }
}

void ReplicatedRunner::start_threads() {
  threads_ = std::make_unique<ReplicaThreads>(int(replicas_.size()),
                                        [this](int r, const std::string& m) {
                                          abort_all(replicas_, r, m);
                                          faults_.release_hangs();  // an injected hang ends too
                                        });
  use_replica_streams(*threads_, replicas_);
  threads_->run([this](int r) {
    const int id = replicas_[size_t(r)].id;  // after a shrink, the lane keeps its name
    trace::set_lane("replica " + std::to_string(id), trace::kReplicaLanes + id);
  });
}

void ReplicatedRunner::set_rates(double lr, double momentum) {
  for (Replica& r : replicas_) {
    r.optimizer->set_lr(lr);
    r.optimizer->set_momentum(momentum);
  }
}

bool ReplicatedRunner::across_processes(const std::function<void(Communicator&, Device)>& fn) {
  if (replicas_[0].comm->size() == int(replicas_.size())) return false;  // every rank is in this process
  DPCORE_CHECK(replicas_.size() == 1, "across_processes: ", replicas_.size(),
               " replicas in one process of a multi-process run; expected one");
  threads_->run([&](int) { fn(*replicas_[0].comm, replicas_[0].device()); });
  return true;
}

void ReplicatedRunner::sync_replicas() {
  int64_t steps = replicas_[0].optimizer->steps_taken();
  threads_->run([this, steps](int r) { broadcast_state(replicas_[size_t(r)], steps); });
}

void ReplicatedRunner::set_loss_scale(const GradScalerState& state) {
  StepRunner::set_loss_scale(state);  // replica 0's (or the refusal, without a scaler)
  for (size_t r = 1; r < replicas_.size(); ++r) replicas_[r].scaler->load_state(state);
}

GradScaler* ReplicatedRunner::loss_scaler() const { return replicas_[0].scaler.get(); }

// ----------------------------------------------------------------------------- --mode dp

DataParallelRunner::DataParallelRunner(std::unique_ptr<layers::Model> model, const OptimizerConfig& optimizer, int64_t accum,
                                       const ParallelOptions& options)
    : ReplicatedRunner(options, accum) {
  DPCORE_CHECK(options.backend != "mpi", "--mode dp runs its replicas in one process; with --backend mpi use --mode ddp");
  devices_ = replica_devices(options, model->device());
  check_faults(options.replicas, options);
  start(std::move(model), devices_, comm::make_communicators(comm_config(options, devices_)), optimizer);
}

StepStats DataParallelRunner::step(const data::Batch& batch) {
  return surviving_failures([&] { return attempt_step(batch); });
}

void DataParallelRunner::replicas_dropped(const std::vector<int>& ranks) {
  for (size_t i = ranks.size(); i-- > 0;) devices_.erase(devices_.begin() + ranks[i]);
}

StepStats DataParallelRunner::attempt_step(const data::Batch& batch) {
  const int64_t n = batch.size;
  const int64_t counted = counted_targets(batch);
  const int64_t step = step_number();
  const size_t R = replicas_.size();
  const Device root = replicas_[0].device();
  std::vector<double> seconds(R, 0.0);
  std::vector<int64_t> computed(R, 0);
  Tensor loss_sum = Tensor::zeros({}, replicas_[0].model->dtype(), root);
  // The main thread's time in the phases the replicas run (forward, backward): a replica
  // idles for what of it it does not compute (train/observe/step_times.h).
  double apply_seconds = 0;
  std::vector<ReplicaLane> lanes(R);

  threads_->run([this](int r) {
    broadcast_buffers(replicas_[size_t(r)]);
    replicas_[size_t(r)].model->zero_grad();
  });
  int64_t begin = 0;
  last_shares_.clear();
  for (int64_t micro : even_split(n, std::min<int64_t>(accum_, n))) {
    // scatter
    std::vector<int64_t> shares = splitter_.shares(batch, begin, micro);
    last_shares_.push_back(shares);
    for (Replica& r : replicas_) prepare_batch_norm(r, shares);
    std::vector<Shard> shards = scatter(batch, begin, shares, devices_);
    // The shards were copied on this thread's stream; the replicas read them on their own
    // (non-blocking) streams, which a pageable copy still in flight would not wait for.
    for (const Device& d : devices_) runtime::synchronize(d);
    // parallel_apply: forward
    std::vector<Tensor> outputs(R);
    SteadyClock::time_point applied = SteadyClock::now();
    threads_->run([&](int r) {
      auto t0 = std::chrono::steady_clock::now();
      const Shard& s = shards[size_t(r)];
      if (s.size > 0) {
        trace::Span span("forward", [&] { return trace::Label{"forward", {{"rows", s.size}}}; });
        replicas_[size_t(r)].model->set_batch_position(uint64_t(step), s.begin);
        outputs[size_t(r)] = replicas_[size_t(r)].model->forward_logits(s.x);
      }
      finish_device_work(replicas_[size_t(r)]);  // gather reads the outputs from another thread
      seconds[size_t(r)] += seconds_since(t0);
    });
    apply_seconds += seconds_since(applied);
    // gather, and the loss on the root
    Tensor logits = gather(outputs, root).set_requires_grad(true);
    Tensor y = batch_labels(batch_rows(batch, begin, begin + micro), root);
    Tensor loss = loss_of(logits, y, /*logits=*/true);
    loss.backward(Tensor::full({}, backward_seed(counted, replicas_[0].scaler.get()), loss.dtype(), root));
    backend_for(root).add(loss_sum, loss.detach(), loss_sum);
    // scatter the loss gradient back; parallel_apply: backward
    Tensor dlogits = logits.grad();
    runtime::synchronize(root);  // the replicas' streams read what the root's stream wrote
    applied = SteadyClock::now();
    threads_->run([&](int r) {
      const Shard& s = shards[size_t(r)];
      if (s.size == 0) return;
      auto t0 = std::chrono::steady_clock::now();
      Tensor d;
      {
        trace::Span span("scatter", [&] { return trace::Label{"scatter loss gradient", {{"rows", s.size}}}; });
        d = dlogits.narrow0(s.begin - begin, s.begin - begin + s.size).to(replicas_[size_t(r)].device());
      }
      outputs[size_t(r)].backward(d);
      finish_device_work(replicas_[size_t(r)]);
      seconds[size_t(r)] += seconds_since(t0);
      computed[size_t(r)] += s.size;
    });
    apply_seconds += seconds_since(applied);
    begin += micro;
  }
  // reduce, then the same step everywhere. The step's faults (--inject) all happen here, on
  // the replica's thread after its last backward and before the reduction: dp's forward
  // and backward are phases the main thread drives, and this is the first point where a
  // replica meets the others in a collective, whose timeout notices a hang.
  const bool loss_finite = !guards_.skip_nonfinite || all_finite(loss_sum);  // the root's: one for all
  std::vector<char> skipped(R, 0), overflowed(R, 0);
  std::vector<std::string> diverged(R);
  threads_->run([&](int r) {
    Replica& rep = replicas_[size_t(r)];
    faults_.before(rep.id, step);
    const SteadyClock::time_point injected = SteadyClock::now();
    faults_.after(rep.id, step, *rep.model, seconds[size_t(r)]);
    // An injected slowdown is part of this replica's compute, for --split adaptive too.
    seconds[size_t(r)] += seconds_since(injected);
    const SteadyClock::time_point reducing = SteadyClock::now();
    reduce_gradients(rep);
    ReplicaLane& lane = lanes[size_t(r)];
    lane.blocked = seconds_since(reducing);
    // Every replica decides from the reduced gradients, the same bits on all of them.
    skipped[size_t(r)] = guards_.skip_nonfinite && (!loss_finite || !all_finite(rep.model->parameters().grads()));
    if (skipped[size_t(r)]) {
    } else if (rep.scaler) {
      overflowed[size_t(r)] = scaled_step(*rep.scaler, *rep.optimizer, rep.model->parameters().grads());
    } else {
      rep.optimizer->step();
    }
    lane.optimizer = skipped[size_t(r)] || overflowed[size_t(r)] ? 0 : rep.optimizer->last_step_seconds();
    finish_device_work(rep);
    faults_.after_step(rep.id, step);
    if (guards_.check_due(step)) diverged[size_t(r)] = check_replicas(*rep.comm, *rep.model, *rep.optimizer, step);
  });
  for (size_t r = 1; r < R; ++r)
    DPCORE_CHECK(skipped[r] == skipped[0], "--skip-nonfinite: at step ", step, " replica ", r,
                 skipped[r] ? " skipped" : " took", " the step and replica 0 did not: their reduced gradients differ");
  check_replicas_agree_on_overflow(overflowed, step);
  DPCORE_CHECK(diverged[0].empty(), diverged[0]);
  for (size_t r = 0; r < R; ++r) {
    lanes[r].compute = seconds[r];
    lanes[r].idle = std::max(0.0, apply_seconds - seconds[r]);
    lanes[r].samples = computed[r];
  }
  splitter_.observe(seconds, computed);
  StepStats stats{loss_sum, n, counted, skipped[0] != 0, combine_lanes(lanes)};
  stats.overflow = overflowed[0] != 0;
  return stats;
}

std::string DataParallelRunner::describe() const {
  RunnerDescription d;
  d.parallelism = "data parallel (dp, " + replicas_[0].comm->backend() + ")";
  d.replicas = int(replicas_.size());
  d.devices = devices_;
  d.details = {"split " + splitter_.describe()};
  if (sync_batch_norm_) d.details.push_back("batchnorm sync");
  d.accum = accum_;
  return describe_runner(d);
}

}  // namespace dpcore::train
