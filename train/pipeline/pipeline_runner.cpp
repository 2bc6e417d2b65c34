#include "train/pipeline/pipeline_runner.h"

#include <algorithm>
#include <thread>

#include "engine/runtime.h"
#include "kernels/error.h"

namespace dpcore::train::pipeline {

namespace {

// The stages of --stages for `model`, after the flags a pipeline does not combine with.
std::vector<Stage> checked_stages(Model& model, int64_t accum, const ParallelOptions& o) {
  const std::string stages = "--stages " + o.pipeline.stages;
  DPCORE_CHECK(o.replicas == 1, stages, " with --replicas ", o.replicas,
               ": a pipeline here is one process's stages; pipeline x data parallel needs a layout of both");
  DPCORE_CHECK(accum == 1, stages, " with --accum ", accum, ": the pipeline's micro-batches are --micro-batches");
  DPCORE_CHECK(o.sync == "full", stages, " with --sync ", o.sync, ": a pipeline takes one synchronous step");
  DPCORE_CHECK(o.backend == "local", stages, " with --backend ", o.backend,
               ": the stages are threads of this process, over the local communicator");
  DPCORE_CHECK(o.faults.empty() && !o.guards.skip_nonfinite, stages,
               " with --inject or --skip-nonfinite: they act on replicas, and a pipeline has stages");
  DPCORE_CHECK(model.device().is_cpu(), stages, " with the model on ", model.device().str(),
               ": this runner's stages are CPU thread teams (cpu:N); give --device cpu");
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Stage> out = parse_stages(o.pipeline.stages, int(model.net().size()), {cores, runtime::cuda_device_count()});
  for (const Stage& s : out)
    DPCORE_CHECK(s.device.device.is_cpu(), stages, ": the stage of layers ", s.first_layer, "-", s.last_layer, " on ",
                 s.device.str(), ": this runner's stages are CPU thread teams (cpu:N)");
  return out;
}

}  // namespace

PipelineRunner::PipelineRunner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                               const ParallelOptions& options)
    : model_(std::move(model)),
      optimizer_(make_optimizer(model_->parameters(), optimizer)),
      stages_(checked_stages(*model_, accum, options)),
      schedule_(parse_schedule(options.pipeline.schedule)),
      micro_batches_(int(pipeline_micro_batches(options.pipeline))),
      threads_(int(stages_.size()), std::chrono::milliseconds(int64_t(options.timeout_s * 1000))) {
  stage_order(schedule_, 0, int(stages_.size()), micro_batches_);  // refuses naive with M > 1
}

StepStats PipelineRunner::step(const data::Batch& batch) {
  auto [x, y] = batch_tensors(batch, model_->device());
  const int64_t counted = counted_targets(batch);
  // A short last batch may hold fewer samples than M, as with --accum.
  const int micro_batches = int(std::min<int64_t>(micro_batches_, batch.size));
  model_->zero_grad();
  Tensor loss = threads_.accumulate_gradients(*model_, stages_, schedule_, micro_batches, x, y,
                                              gradient_scale(counted), {uint64_t(step_number()), 0}, &last_step_);
  optimizer_->step();
  return {loss, batch.size, counted};
}

void PipelineRunner::set_rates(double lr, double momentum) {
  optimizer_->set_lr(lr);
  optimizer_->set_momentum(momentum);
}

std::string PipelineRunner::describe() const {
  return "pipeline (" + schedule_name(schedule_) + ") of " + std::to_string(stages_.size()) + " stages [" +
         stages_text(stages_) + "], " + std::to_string(micro_batches_) + " micro-batches";
}

}  // namespace dpcore::train::pipeline
