#include "train/pipeline/stage_process_runner.h"

#include <algorithm>

#include "engine/backend.h"
#include "kernels/error.h"
#include "train/pipeline/hybrid_runner.h"
#include "train/pipeline/pipeline_runner.h"
#include "train/pipeline/pipeline_threads.h"
#include "train/step/loss_scaling.h"

namespace dpcore::train::pipeline {

namespace {

// This process's communicator among all of the job's.
std::unique_ptr<comm::Communicator> world_of(const ParallelOptions& options) {
  return std::move(comm::make_communicators(comm_config(options, {Device::cpu()})).front());
}

// The replicas of each stage: the processes / P, refused unless P divides them.
int replicas_of(const comm::Communicator& world, int stages, const ParallelOptions& options) {
  DPCORE_CHECK(world.size() % stages == 0, pipeline_flag(options.pipeline), " with --backend mpi over ", world.size(),
               " processes: a process runs one stage of one replica, so the processes (mpirun -np) must be a "
               "multiple of the ", stages, " stages");
  const int replicas = world.size() / stages;
  if (replicas > 1) check_pipeline_replica_flags(options, replicas);
  return replicas;
}

// Elements [range.first, range.first + range.size) of flat `t` from `root` to every rank.
void broadcast_range(comm::Communicator& comm, const Tensor& t, const FlatRange& range, int root) {
  if (range.size == 0) return;
  Tensor part = t.narrow0(range.first, range.first + range.size);  // a view: in place
  comm.broadcast(part, root).wait();
}

}  // namespace

StageProcessRunner::StageProcessRunner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                                       const ParallelOptions& options)
    : model_(std::move(model)),
      optimizer_(make_optimizer(model_->parameters(), optimizer)),
      // A stage is a process, on the cores mpirun gave it: its cpu:N names no team (any N
      // a stage could have is taken).
      plan_(plan_pipeline(*model_, accum, options, int(model_->net().size()))),
      world_(world_of(options)),
      stage_(world_->rank() % int(plan_.stages.size())),
      replica_(world_->rank() / int(plan_.stages.size())),
      replicas_(replicas_of(*world_, int(plan_.stages.size()), options)),
      splitter_(options.split, replicas_),
      parameter_ranges_(stage_parameter_ranges(*model_, plan_.stages)),
      buffer_ranges_(stage_buffer_ranges(*model_, plan_.stages)),
      account_(std::make_shared<MemoryAccount>()),
      scaler_(make_loss_scaler(*model_)) {
  pipeline_ = world_->split(replica_, stage_);       // rank s: this replica's stage s
  data_parallel_ = world_->split(stage_, replica_);  // rank d: this stage's replica d
  if (options.batchnorm == "sync" && replicas_ > 1) {
    // This process runs its stage's batch norms only: those are synchronised over the
    // stage's replicas. (One replica's statistics are already the whole micro-batch's, as
    // in the in-process pipeline.)
    batch_norm_group_ = std::make_unique<ReplicaBatchNormGroup>(*data_parallel_);
    const Stage& mine = plan_.stages[size_t(stage_)];
    model_->set_batch_norm_group(batch_norm_group_.get(), size_t(mine.first_layer), size_t(mine.last_layer) + 1);
  }
  sync_replicas();
}

StepStats StageProcessRunner::step(const data::Batch& batch) {
  DPCORE_CHECK(optimizer_->clip_grad_norm() < 0, "--clip-grad-norm ", optimizer_->clip_grad_norm(),
               " with pipeline stages in processes of their own: the norm is over every stage's gradients, and "
               "each process has its own stage's");
  const int64_t counted = counted_targets(batch);
  const auto rows =
      replica_micro_batches(batch, plan_.micro_batches, splitter_, replicas_, &last_shares_)[size_t(replica_)];
  if (batch_norm_group_) check_batch_norm_shares(last_shares_);  // alike on every process: the shares are every rank's
  auto [x, y] = batch_tensors(batch, Device::cpu());
  // DDP's broadcast_buffers, within the stage: its replica 0's running statistics.
  broadcast_range(*data_parallel_, model_->buffers().values(), buffer_ranges_[size_t(stage_)], 0);
  model_->zero_grad();
  Tensor loss = Tensor::zeros({}, model_->dtype(), Device::cpu());
  int64_t live = 0;
  account_->begin_window();
  if (!rows.empty()) {
    const MemoryAccount::Scope charged(account_);
    StageWork work(*model_, plan_.stages, rows, x, y, backward_seed(counted, scaler_.get()),
                   {uint64_t(step_number()), 0});
    work.set_recompute(plan_.recompute);
    if (batch_norm_group_) {
      std::vector<ReplicaBatchNormGroup*> groups(plan_.stages.size(), nullptr);
      groups[size_t(stage_)] = batch_norm_group_.get();
      work.set_batch_norm_groups(std::move(groups));
    }
    run_stage_ops(work, plan_.schedule, stage_, *pipeline_);
    loss = work.loss_sum();  // the last stage's; zero on the others
    live = work.peak_live_activations()[size_t(stage_)];
  }
  gather_measurements(live);
  const FlatRange& mine = parameter_ranges_[size_t(stage_)];
  if (mine.size > 0) {
    Tensor grads = model_->parameters().grads().narrow0(mine.first, mine.first + mine.size);
    data_parallel_->allreduce(grads, comm::ReduceOp::Sum).wait();
  }
  world_->allreduce(loss, comm::ReduceOp::Sum).wait();
  StepStats stats{loss, batch.size, counted};
  if (!scaler_) {
    optimizer_->step();
    return stats;
  }
  // This process unscales its stage's gradients (the rest of its buffer is zero); an Inf or
  // NaN that any process found skips the step on every one (ShardedGradScaler's way), so
  // all keep one scale.
  Tensor found = Tensor::full({1}, scaler_->unscale(model_->parameters().grads()) ? 1.0 : 0.0, DType::Float32,
                              Device::cpu());
  world_->allreduce(found, comm::ReduceOp::Sum).wait();
  scaler_->set_found_inf_anywhere(found.item() != 0.0);
  stats.overflow = scaled_step(*scaler_, *optimizer_, model_->parameters().grads());
  return stats;
}

void StageProcessRunner::gather_measurements(int64_t live) {
  const int P = int(plan_.stages.size());
  Tensor mine = Tensor::from_vector(std::vector<int64_t>{live, int64_t(account_->window_peak_bytes()),
                                                         int64_t(account_->peak_bytes())}, {3});
  Tensor all = Tensor::empty({3 * int64_t(world_->size())}, DType::Int64, Device::cpu());
  world_->allgather(mine, all).wait();
  gathered_ = all.to_vector<int64_t>();
  last_step_ = {};
  for (int s = 0; s < P; ++s) {  // replica 0's stage s is rank s
    last_step_.peak_live_activations.push_back(int(gathered_[size_t(3 * s)]));
    last_step_.peak_bytes.push_back(size_t(gathered_[size_t(3 * s + 1)]));
  }
}

std::vector<size_t> StageProcessRunner::stage_peak_bytes() const {
  const int P = int(plan_.stages.size());
  std::vector<size_t> out(size_t(P), 0);
  for (size_t r = 0; 3 * r < gathered_.size(); ++r)  // rank r is stage r mod P
    out[r % size_t(P)] = std::max(out[r % size_t(P)], size_t(gathered_[3 * r + 2]));
  return out;
}

void StageProcessRunner::set_rates(double lr, double momentum) {
  optimizer_->set_lr(lr);
  optimizer_->set_momentum(momentum);
}

void StageProcessRunner::sync_replicas() {
  const int64_t steps = optimizer_->steps_taken();
  const int64_t everything = model_->parameters().total();
  broadcast_range(*world_, model_->parameters().values(), {0, everything}, 0);
  broadcast_range(*world_, model_->buffers().values(), {0, model_->buffers().total()}, 0);
  for (OptimizerState& s : optimizer_->state()) broadcast_range(*world_, s.tensor, {0, s.tensor.numel()}, 0);
  optimizer_->set_steps_taken(steps);
}

StepStats StageProcessRunner::settle() {
  const int P = int(plan_.stages.size());
  std::vector<OptimizerState> state = optimizer_->state();
  for (int s = 0; s < P; ++s) {  // stage s's replica 0 is rank s
    broadcast_range(*world_, model_->parameters().values(), parameter_ranges_[size_t(s)], s);
    broadcast_range(*world_, model_->buffers().values(), buffer_ranges_[size_t(s)], s);
    // The optimizer's state is laid out as the parameters (engine/flat_parameters.h).
    for (OptimizerState& o : state) broadcast_range(*world_, o.tensor, parameter_ranges_[size_t(s)], s);
  }
  return {};
}

bool StageProcessRunner::across_processes(const std::function<void(comm::Communicator&, Device)>& fn) {
  fn(*world_, Device::cpu());
  return true;
}

std::string StageProcessRunner::describe() const {
  return plan_.describe(" x " + std::to_string(replicas_) + " replicas, a process each (mpi, " +
                        std::to_string(world_->size()) + " processes; this one: stage " + std::to_string(stage_) +
                        " of replica " + std::to_string(replica_) + "), split " + splitter_.describe());
}

}  // namespace dpcore::train::pipeline
