#include "train/pipeline/hybrid_runner.h"

#include <algorithm>

#include "engine/backend.h"
#include "engine/runtime.h"
#include "engine/trace.h"
#include "kernels/error.h"
#include "train/step/loss_scaling.h"

namespace dpcore::train::pipeline {

namespace {

std::chrono::milliseconds timeout_of(const ParallelOptions& o) {
  return std::chrono::milliseconds(int64_t(o.timeout_s * 1000));
}

}  // namespace

std::vector<std::vector<MicroBatchRows>> replica_micro_batches(const data::Batch& batch, int micro_batches,
                                                               const Splitter& splitter, int replicas,
                                                               std::vector<std::vector<int64_t>>* shares) {
  std::vector<std::vector<MicroBatchRows>> rows(static_cast<size_t>(replicas));
  if (shares) shares->clear();
  int64_t begin = 0;
  for (int64_t size : even_split(batch.size, std::min<int64_t>(micro_batches, batch.size))) {
    const std::vector<int64_t> pieces = splitter.shares(batch, begin, size);
    int64_t row = begin;
    for (int d = 0; d < replicas; ++d) {
      if (pieces[size_t(d)] > 0) rows[size_t(d)].push_back({row, pieces[size_t(d)], size});
      row += pieces[size_t(d)];
    }
    if (shares) shares->push_back(pieces);
    begin += size;
  }
  return rows;
}

void check_batch_norm_shares(const std::vector<std::vector<int64_t>>& shares) {
  for (const std::vector<int64_t>& pieces : shares) batch_norm_group_rows(pieces, "--micro-batches");
}

HybridRunner::HybridRunner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                           const ParallelOptions& options)
    : ReplicatedRunner(options, accum),
      plan_(plan_pipeline(*model, accum, options, int(runtime::allowed_cpus().size()))),
      ranges_(stage_parameter_ranges(*model, plan_.stages)) {
  const int P = int(plan_.stages.size()), D = options.replicas;
  // Stage s of replica d is rank d of group s.
  const std::vector<runtime::CpuTeam> teams = stage_cpu_teams(plan_.stages, runtime::allowed_cpus(), runtime::cpu_threads());
  // (In a trace, rank d of stage s's group is the lane "stage s group comm d"; its thread
  // runs on stage s's team, as the stage's threads do.)
  for (int s = 0; s < P; ++s) {
    comm::LocalOptions group;
    group.timeout = timeout_of(options);
    group.lanes = "stage " + std::to_string(s) + " group comm";
    group.first_lane = trace::kStageGroupCommLanes + s * D;
    group.thread_start = [team = teams[size_t(s)]](int) { runtime::join_cpu_team(team); };
    groups_.push_back(comm::make_local_group(D, group));
  }
  for (int d = 0; d < D; ++d) {
    pipelines_.push_back(std::make_unique<PipelineThreads>(
        P, timeout_of(options), teams, [this, d](int s, const std::string& message) { stage_failed(d, s, message); },
        d));
    pipelines_.back()->set_recompute(plan_.recompute);
  }
  // (start() makes the batch norm groups, over groups_, and gives them to pipelines_.)
  const std::vector<Device> devices(size_t(D), Device::cpu());
  start(std::move(model), devices, comm::make_communicators(comm_config(options, devices)), optimizer);
}

void HybridRunner::make_batch_norm_groups() {
  if (!sync_batch_norm_) return;
  batch_norm_groups_.clear();
  for (size_t d = 0; d < replicas_.size(); ++d) {
    batch_norm_groups_.emplace_back();
    std::vector<ReplicaBatchNormGroup*> per_stage;
    for (size_t s = 0; s < plan_.stages.size(); ++s) {
      auto& group = batch_norm_groups_[d].emplace_back(std::make_unique<ReplicaBatchNormGroup>(*groups_[s][d]));
      replicas_[d].model->set_batch_norm_group(group.get(), size_t(plan_.stages[s].first_layer),
                                               size_t(plan_.stages[s].last_layer) + 1);
      per_stage.push_back(group.get());
    }
    pipelines_[d]->set_batch_norm_groups(std::move(per_stage));
  }
}

void HybridRunner::stage_failed(int d, int s, const std::string& message) {
  const std::string why = "replica " + std::to_string(d) + " failed: pipeline stage " + std::to_string(s) + " failed: " + message;
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (failure_.empty()) failure_ = why;
  }
  for (auto& group : groups_) group[size_t(d)]->abort(why);
}

void HybridRunner::reduce_stage(int d, int s) {
  const FlatRange& r = ranges_[size_t(s)];
  if (r.size == 0) return;  // a stage without parameters (relu, pooling, the loss)
  Tensor grads = replicas_[size_t(d)].model->parameters().grads().narrow0(r.first, r.first + r.size);
  trace::Span span("wait", [&] {
    return trace::Label{"allreduce stage " + std::to_string(s) + "'s gradients (wait)", {{"bytes", int64_t(grads.nbytes())}}};
  });
  trace::CollectiveLabel purpose([&] { return trace::Label{"stage " + std::to_string(s) + " gradients", {}}; });
  groups_[size_t(s)][size_t(d)]->allreduce(grads, ReduceOp::Sum).wait();  // a view: in place
}

StepStats HybridRunner::step(const data::Batch& batch) {
  const int D = int(replicas_.size());
  const int64_t n = batch.size, counted = counted_targets(batch);
  const auto rows = replica_micro_batches(batch, plan_.micro_batches, splitter_, D, &last_shares_);
  if (sync_batch_norm_) check_batch_norm_shares(last_shares_);
  // Every replica reads its rows of the one host batch: the replicas are all on the CPU.
  auto [x, y] = batch_tensors(batch, Device::cpu());
  const double seed = backward_seed(counted, replicas_[0].scaler.get());  // alike on every replica
  const BatchStart start{uint64_t(step_number()), 0};
  std::vector<Tensor> losses(static_cast<size_t>(D));
  std::vector<char> overflowed(size_t(D), 0);
  failure_.clear();
  try {
    threads_->run([&](int d) {
      Replica& rep = replicas_[size_t(d)];
      broadcast_buffers(rep);
      rep.model->zero_grad();
      losses[size_t(d)] = pipelines_[size_t(d)]->accumulate_gradients(
          std::vector<Model*>(plan_.stages.size(), rep.model.get()), plan_.stages, plan_.schedule, rows[size_t(d)], x, y, seed, start, d == 0 ? &last_step_ : nullptr,
          [this, d](int s) { reduce_stage(d, s); });
      // (Every replica now holds the same reduced gradients: the same decision on each.)
      if (rep.scaler)
        overflowed[size_t(d)] = scaled_step(*rep.scaler, *rep.optimizer, rep.model->parameters().grads());
      else
        rep.optimizer->step();
    });
  } catch (const ReplicasFailed&) {
    // Replicas fail in any order once the groups are aborted; a stage's failure came first.
    if (!failure_.empty()) fail(failure_);
    throw;
  }
  check_replicas_agree_on_overflow(overflowed, int64_t(start.step));
  Tensor loss = Tensor::zeros({}, replicas_[0].model->dtype(), Device::cpu());
  for (const Tensor& l : losses) backend_for(loss.device()).add(loss, l, loss);
  StepStats stats{loss, n, counted};
  stats.overflow = overflowed[0] != 0;
  return stats;
}

std::vector<size_t> HybridRunner::stage_peak_bytes() const {
  std::vector<size_t> out(plan_.stages.size(), 0);
  for (const auto& p : pipelines_) {
    const std::vector<size_t> bytes = p->peak_bytes();
    for (size_t s = 0; s < out.size(); ++s) out[s] = std::max(out[s], bytes[s]);
  }
  return out;
}

void HybridRunner::reset_stage_peak_bytes() {
  for (auto& p : pipelines_) p->reset_peaks();
}

std::string HybridRunner::describe() const {
  return plan_.describe(" x " + std::to_string(replicas_.size()) +
                        " replicas (each stage's gradients reduced among its replicas), split " + splitter_.describe());
}

}  // namespace dpcore::train::pipeline
