#include "train/sync/local_sgd.h"

#include <algorithm>
#include <chrono>

#include "engine/backend.h"
#include "engine/seconds_since.h"
#include "engine/trace.h"
#include "train/step/step.h"

namespace dpcore::train {

using Clock = SteadyClock;

LocalSgdRunner::LocalSgdRunner(std::unique_ptr<layers::Model> model, const OptimizerConfig& optimizer, int64_t accum,
                               const ParallelOptions& options, int64_t period)
    : ReplicatedRunner(options, accum), period_(period) {
  DPCORE_CHECK(period >= 1, "--sync local:", period, ": K must be at least 1");
  DPCORE_CHECK(options.mode == "ddp", "--sync local:K with --mode ", options.mode,
               ": local SGD runs one worker per replica, each with its own loss (--mode ddp); --mode dp "
               "gathers every output for one loss");
  DPCORE_CHECK(!splitter_.adaptive(), "--sync local:K with --split adaptive: adaptive re-weights from the "
               "timings of synchronous steps; use --split even or weights:...");
  DPCORE_CHECK(!options.guards.skip_nonfinite && options.guards.check_replicas == 0,
               "--sync local:K with --skip-nonfinite or --check-replicas: the guards judge the one reduced "
               "gradient and the identical replicas of --sync full, which local SGD does not have");
  DPCORE_CHECK(options.batchnorm == "local", "--sync local:K with --batchnorm ", options.batchnorm,
               ": synchronised batch norm combines the replicas' statistics inside one step over the global "
               "batch, but under local SGD each replica steps on its own share; use --batchnorm local");
  for (const Fault& f : options.faults.faults()) {
    DPCORE_CHECK(f.kind != Fault::Kind::Hang, "--inject ", train::describe(f), " with --sync local:K: between averagings no ",
                 "replica waits for another, so nothing would notice the hang; try it with --sync full");
  }
  std::vector<Device> devices = process_replica_devices(options, model->device());
  auto comms = comm::make_communicators(comm_config(options, devices));
  world_size_ = comms[0]->size();
  if (world_size_ != options.replicas) splitter_ = Splitter(options.split, world_size_);  // set by mpirun
  check_faults(world_size_, options);
  targets_since_average_.assign(size_t(world_size_), 0);
  start(std::move(model), devices, std::move(comms), optimizer);
}

StepStats LocalSgdRunner::step(const data::Batch& batch) {
  restore_kept();
  const std::vector<int64_t> shares = splitter_.shares(batch, 0, batch.size);  // the same on every rank
  // Each share's counted targets (its samples, for one class per sample), known to every
  // rank: each holds the whole batch.
  std::vector<int64_t> counted(shares.size());
  for (size_t g = 0, row = 0; g < shares.size(); row += size_t(shares[g]), ++g) {
    counted[g] = counted_targets(batch_rows(batch, int64_t(row), int64_t(row) + shares[g]));
  }
  const int64_t step = step_number();
  std::vector<double> losses(replicas_.size(), 0.0);
  std::vector<ReplicaLane> lanes(replicas_.size());
  threads_->run([&](int local) {
    Replica& rep = replicas_[size_t(local)];
    const int rank = rep.rank();
    int64_t row = 0;
    for (int g = 0; g < rank; ++g) row += shares[size_t(g)];
    const int64_t size = shares[size_t(rank)];
    const Clock::time_point started = Clock::now();
    rep.model->zero_grad();
    // A share without counted targets (empty, or every token ignored) takes no step: a zero
    // gradient, and weight 0 at the averaging.
    const bool steps = counted[size_t(rank)] > 0;
    faults_.run(rank, step, *rep.model, [&] {
      if (!steps) return;
      trace::Span span("step", [&] { return trace::Label{"local step", {{"rows", size}, {"first_row", row}}}; });
      auto [x, y] = batch_tensors(batch_rows(batch, row, row + size), rep.device());
      // The mean over this replica's own share: its step is a whole SGD step of its own.
      Tensor loss = accumulate_gradients(*rep.model, x, y, std::min(accum_, size),
                                         gradient_scale(counted[size_t(rank)]), {uint64_t(step), row});
      losses[size_t(local)] = loss.item();
    });
    ReplicaLane& lane = lanes[size_t(local)];
    lane.compute = seconds_since(started);  // (an injected slowdown included)
    if (steps) {
      rep.optimizer->step();
      finish_device_work(rep);
      lane.optimizer = rep.optimizer->last_step_seconds();
    }
    faults_.after_step(rank, step);
    lane.samples = size;
  });
  for (int g = 0; g < world_size_; ++g) targets_since_average_[size_t(g)] += counted[size_t(g)];
  ++steps_since_average_, ++steps_taken_;
  // The replicas meet only at the end of the step (and at an averaging): whoever finished
  // first waited for the slowest there.
  double slowest = 0;
  for (const ReplicaLane& lane : lanes) slowest = std::max(slowest, lane.compute + lane.optimizer);
  for (ReplicaLane& lane : lanes) lane.idle = slowest - lane.compute - lane.optimizer;
  if (step % period_ == 0) {  // on the steps the log numbers K, 2K, ... (resumes included)
    average(&lanes);
    steps_since_average_ = 0;
    std::fill(targets_since_average_.begin(), targets_since_average_.end(), 0);
    ++averagings_, ++epoch_averagings_;
  }

  double loss = 0;
  int64_t samples = 0, targets = 0;
  for (size_t local = 0; local < replicas_.size(); ++local) {
    loss += losses[local];
    samples += shares[size_t(replicas_[local].rank())];
    targets += counted[size_t(replicas_[local].rank())];
  }
  StepStats stats{Tensor::full({}, loss, replicas_[0].model->dtype(), replicas_[0].device()), samples, targets};
  stats.times = combine_lanes(lanes);
  return stats;
}

void LocalSgdRunner::average(std::vector<ReplicaLane>* lanes) {
  int64_t total = 0;
  for (int64_t s : targets_since_average_) total += s;
  threads_->run([&](int local) {
    Replica& rep = replicas_[size_t(local)];
    const int64_t mine = targets_since_average_[size_t(rep.rank())];
    const double weight = total > 0 ? double(mine) / double(total) : 1.0 / double(world_size_);
    const Clock::time_point started = Clock::now();
    Backend& backend = backend_for(rep.device());
    Tensor values = rep.model->parameters().values();
    std::vector<OptimizerState> state = rep.optimizer->state();  // (none for SGD without momentum)
    backend.scale(weight, values, values);
    for (OptimizerState& s : state) backend.scale(weight, s.tensor, s.tensor);
    {
      trace::Span span("wait", [&] {
        return trace::Label{"average parameters (wait)", {{"weight", weight}, {"on", comm_lane(rep)}}};
      });
      trace::CollectiveLabel purpose([] { return trace::Label{"local SGD averaging", {}}; });
      Work params = rep.comm->allreduce(values, ReduceOp::Sum);
      std::vector<Work> moments;
      for (OptimizerState& s : state) moments.push_back(rep.comm->allreduce(s.tensor, ReduceOp::Sum));
      params.wait();
      for (Work& w : moments) w.wait();
    }
    broadcast_buffers(rep);
    rep.optimizer->set_steps_taken(steps_taken_);  // (one that sat out steps has the others' momentum now)
    finish_device_work(rep);
    if (lanes) (*lanes)[size_t(local)].blocked = seconds_since(started);
  });
}

StepStats LocalSgdRunner::settle() {
  if (steps_since_average_ == 0 || !kept_.empty()) return {};  // one model already, or its average shown
  kept_.resize(replicas_.size());
  threads_->run([&](int local) {
    Replica& rep = replicas_[size_t(local)];
    KeptReplica& kept = kept_[size_t(local)];
    kept.values = rep.model->parameters().values().clone();
    kept.state.clear();
    for (const OptimizerState& s : rep.optimizer->state()) kept.state.push_back(s.tensor.clone());
    if (!rep.model->buffers().empty()) kept.buffers = rep.model->buffers().values().clone();
    kept.steps = rep.optimizer->steps_taken();
    finish_device_work(rep);
  });
  average();
  return {};
}

void LocalSgdRunner::restore_kept() {
  if (kept_.empty()) return;
  threads_->run([&](int local) {
    Replica& rep = replicas_[size_t(local)];
    KeptReplica& kept = kept_[size_t(local)];
    rep.model->parameters().values().copy_(kept.values);
    if (kept.buffers.defined()) rep.model->buffers().values().copy_(kept.buffers);
    rep.optimizer->restore(kept.state, kept.steps);
    finish_device_work(rep);
  });
  kept_.clear();
}

void LocalSgdRunner::sync_replicas() {
  kept_.clear();  // (the root's state was replaced: every replica starts from it)
  ReplicatedRunner::sync_replicas();
  steps_taken_ = replicas_[0].optimizer->steps_taken();
  steps_since_average_ = 0;
  std::fill(targets_since_average_.begin(), targets_since_average_.end(), 0);
}

bool LocalSgdRunner::is_primary() const { return replicas_[0].rank() == 0; }

std::string LocalSgdRunner::describe() const {
  RunnerDescription d;
  d.parallelism = "local SGD (local:" + std::to_string(period_) + ", " + replicas_[0].comm->backend() + ")";
  d.replicas = world_size_;
  for (const Replica& r : replicas_) d.devices.push_back(r.device());
  d.devices_here = true;
  d.details = {"averaging every " + std::to_string(period_) + (period_ == 1 ? " step" : " steps"),
               "split " + splitter_.describe()};
  d.accum = accum_;
  return describe_runner(d);
}

std::vector<std::pair<std::string, std::vector<int64_t>>> LocalSgdRunner::epoch_counters() {
  std::vector<std::pair<std::string, std::vector<int64_t>>> counters = {{"averagings", {epoch_averagings_}}};
  epoch_averagings_ = 0;
  return counters;
}

}  // namespace dpcore::train
