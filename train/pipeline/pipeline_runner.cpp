#include "train/pipeline/pipeline_runner.h"

#include <algorithm>

#include "engine/runtime.h"
#include "kernels/error.h"
#include "train/step/loss_scaling.h"

namespace dpcore::train::pipeline {

std::string pipeline_flag(const PipelineOptions& pipeline) {
  if (pipeline.balanced_stages > 0) return "--pipeline " + std::to_string(pipeline.balanced_stages);
  return "--stages " + pipeline.stages;
}

void check_pipeline_flags(const Model& model, int64_t accum, const ParallelOptions& o) {
  const std::string flag = pipeline_flag(o.pipeline);
  DPCORE_CHECK(accum == 1, flag, " with --accum ", accum, ": the pipeline's micro-batches are --micro-batches");
  DPCORE_CHECK(o.sync == "full", flag, " with --sync ", o.sync, ": a pipeline takes one synchronous step");
  DPCORE_CHECK(o.backend == "local" || o.backend == "mpi", flag, " with --backend ", o.backend,
               ": the stages are threads of this process (--backend local) or processes of an mpirun job "
               "(--backend mpi)");
  DPCORE_CHECK(o.faults.empty() && !o.guards.skip_nonfinite, flag,
               " with --inject or --skip-nonfinite: they act on replicas, and a pipeline has stages");
  DPCORE_CHECK(model.device().is_cpu() || (o.backend == "local" && o.replicas == 1), flag, " with the model on ",
               model.device().str(), " and ",
               o.backend == "mpi" ? std::string("--backend mpi") : "--replicas " + std::to_string(o.replicas),
               ": stages on GPUs are threads of one process with one replica; pipeline x data parallel and the "
               "stage processes of an mpirun job run on the CPU (--device cpu)");
  if (o.backend == "local" && o.replicas > 1) check_pipeline_replica_flags(o, o.replicas);
}

void check_pipeline_replica_flags(const ParallelOptions& o, int replicas) {
  const std::string with = pipeline_flag(o.pipeline) + " with " +
                           (o.backend == "mpi" ? std::to_string(replicas) + " replicas of each stage (mpirun)"
                                               : "--replicas " + std::to_string(replicas));
  DPCORE_CHECK(o.mode == "ddp", with, " --mode ", o.mode,
               ": a pipeline's replicas reduce each stage's gradients among themselves, as ddp does (--mode dp "
               "gathers every output on one root)");
  DPCORE_CHECK(o.split != "adaptive", with, " --split adaptive: the shares follow --split even or weights:...");
  DPCORE_CHECK(!o.failure.shrink(), with, " --on-replica-failure shrink: a failing stage ends the pipeline's step");
  for (const Device& d : o.devices)
    DPCORE_CHECK(d.is_cpu(), with, " --devices ", d.str(), ": this runner's replicas and stages are on the CPU");
}

std::string PipelinePlan::describe(const std::string& detail) const {
  return "pipeline (" + schedule_name(schedule) + ") of " + std::to_string(stages.size()) + " stages [" +
         stages_text(stages) + "]" + detail + ", " + std::to_string(micro_batches) + " micro-batches" +
         (recompute ? ", recomputing activations" : "");
}

PipelinePlan plan_pipeline(Model& model, int64_t accum, const ParallelOptions& o, int cpu_teams) {
  check_pipeline_flags(model, accum, o);
  DPCORE_CHECK(!o.pipeline.stages.empty(), pipeline_flag(o.pipeline),
               ": the stages come from measuring the model on a batch (balance_pipeline, "
               "train/pipeline/balanced_stages.h): give the runner the stages it chose");
  std::vector<Stage> out = parse_stages(o.pipeline.stages, int(model.net().size()), {cpu_teams, runtime::cuda_device_count()});
  for (const Stage& s : out)
    DPCORE_CHECK(s.device.device.is_cuda() == model.device().is_cuda(), "--stages ", o.pipeline.stages,
                 ": the stage of layers ", s.first_layer, "-", s.last_layer, " on ", s.device.str(), " with the model on ",
                 model.device().str(), ": a pipeline's stages are all CPU thread teams (cpu:N, with --device cpu) or "
                 "all GPUs (cuda:N, with --device cuda)");
  stage_parameter_ranges(model, out);  // refuses a weight tied across stages, naming it
  PipelinePlan plan{std::move(out), parse_schedule(o.pipeline.schedule), int(pipeline_micro_batches(o.pipeline)),
                    o.pipeline.recompute};
  stage_order(plan.schedule, 0, int(plan.stages.size()), plan.micro_batches);  // refuses naive with M > 1
  return plan;
}

PipelineRunner::PipelineRunner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                               const ParallelOptions& options)
    : model_(std::move(model)),
      optimizer_(make_optimizer(model_->parameters(), optimizer)),
      plan_(plan_pipeline(*model_, accum, options, int(runtime::allowed_cpus().size()))),
      stage_models_(*model_, plan_.stages),
      threads_(int(plan_.stages.size()), std::chrono::milliseconds(int64_t(options.timeout_s * 1000)),
               model_->device().is_cpu()
                   ? stage_cpu_teams(plan_.stages, runtime::allowed_cpus(), runtime::cpu_threads())
                   : std::vector<runtime::CpuTeam>{}),
      scaler_(make_loss_scaler(*model_)) {
  DPCORE_CHECK(options.replicas == 1, pipeline_flag(options.pipeline), " with --replicas ", options.replicas,
               ": a pipeline of several replicas is HybridRunner's (train/pipeline/hybrid_runner.h)");
  threads_.set_recompute(plan_.recompute);
}

StepStats PipelineRunner::step(const data::Batch& batch) {
  auto [x, y] = batch_tensors(batch, model_->device());
  const int64_t counted = counted_targets(batch);
  // A short last batch may hold fewer samples than M, as with --accum.
  const int micro_batches = int(std::min<int64_t>(plan_.micro_batches, batch.size));
  model_->zero_grad();
  stage_models_.pull();
  Tensor loss = threads_.accumulate_gradients(stage_models_.models(), plan_.stages, plan_.schedule,
                                              micro_batch_rows(batch.size, micro_batches), x, y,
                                              backward_seed(counted, scaler_.get()), {uint64_t(step_number()), 0},
                                              &last_step_, {});
  stage_models_.push();
  StepStats stats{loss.to(model_->device()), batch.size, counted};  // (from the last stage's device)
  if (scaler_)
    stats.overflow = scaled_step(*scaler_, *optimizer_, model_->parameters().grads());
  else
    optimizer_->step();
  return stats;
}

void PipelineRunner::set_rates(double lr, double momentum) {
  optimizer_->set_lr(lr);
  optimizer_->set_momentum(momentum);
}

std::string PipelineRunner::describe() const { return plan_.describe(); }

}  // namespace dpcore::train::pipeline
