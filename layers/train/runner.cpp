#include "layers/train/runner.h"

#include <map>
#include <mutex>

#include "engine/runtime.h"
#include "layers/train/step.h"

namespace dpcore::nn {

SingleDeviceRunner::SingleDeviceRunner(std::unique_ptr<Model> model, const SgdConfig& sgd, int64_t accum)
    : model_(std::move(model)), sgd_(std::make_unique<Sgd>(model_->parameters(), sgd)), accum_(accum) {
  DPCORE_CHECK(accum >= 1, "--accum ", accum, " must be at least 1");
}

SingleDeviceRunner::~SingleDeviceRunner() {
  // The graph's replays may still be running: let them finish before its memory goes.
  if (graph_) runtime::synchronize(model_->device());
}

StepStats SingleDeviceRunner::step(const data::Batch& batch) {
  const Device device = model_->device();
  const int64_t accum = std::min<int64_t>(accum_, batch.size);  // a short last batch may hold fewer samples than A
  if (graph_ && batch.size == static_x_.size(0)) {
    Backend& backend = backend_for(device);
    backend.copy_bytes(static_x_.raw_data(), device, batch.images, Device::cpu(), static_x_.nbytes());
    backend.copy_bytes(static_y_.raw_data(), device, batch.labels, Device::cpu(), static_y_.nbytes());
    graph_->replay();
    sgd_->count_replayed_step();
    return {static_loss_, batch.size};
  }
  auto [x, y] = batch_tensors(batch, device);
  // Capture once, at the size of the first batch, after warm-up steps at that size: they
  // choose algorithms and fill the allocator, which cannot happen during a capture.
  if (!capture_tried_ && (graph_batch_ == 0 || graph_batch_ == batch.size)) {
    graph_batch_ = batch.size;
    if (++warmup_steps_ > kWarmupSteps) {
      capture_tried_ = true;
      static_x_ = x.clone();
      static_y_ = y.clone();
      graph_ = backend_for(device).capture(device.index, [&] {
        static_loss_ = accumulate_and_step(*model_, *sgd_, static_x_, static_y_, accum);
      });
      if (graph_) {  // the capture recorded the step (and counted it in sgd_); now run it
        graph_->replay();
        return {static_loss_, batch.size};
      }
    }
  }
  return {accumulate_and_step(*model_, *sgd_, x, y, accum), batch.size};
}

std::string SingleDeviceRunner::describe() const {
  return "1 replica on " + model_->device().str() + (accum_ > 1 ? ", " + std::to_string(accum_) + " micro-batches" : "");
}

namespace {
std::map<std::string, RunnerFactory>& factories() {
  static std::map<std::string, RunnerFactory> f;
  return f;
}
std::mutex factories_mutex;
}  // namespace

void register_runner(const std::string& mode, RunnerFactory factory) {
  std::lock_guard<std::mutex> lock(factories_mutex);
  factories()[mode] = std::move(factory);
}

std::unique_ptr<StepRunner> make_runner(std::unique_ptr<Model> model, const SgdConfig& sgd, int64_t accum,
                                        const ParallelOptions& options) {
  DPCORE_CHECK(options.replicas >= 1, "--replicas ", options.replicas, " must be at least 1");
  if (options.replicas == 1 && options.backend == "local" && options.split == "even") {
    return std::make_unique<SingleDeviceRunner>(std::move(model), sgd, accum);
  }
  RunnerFactory factory;
  {
    std::lock_guard<std::mutex> lock(factories_mutex);
    auto it = factories().find(options.mode);
    DPCORE_CHECK(it != factories().end(), "--mode ", options.mode, ": unknown (expected dp or ddp)");
    factory = it->second;
  }
  return factory(std::move(model), sgd, accum, options);
}

std::pair<Tensor, Tensor> batch_tensors(const data::Batch& batch, Device device) {
  Tensor x = Tensor::from_host(batch.images, {batch.size, batch.c, batch.h, batch.w}, DType::Float32, device);
  Tensor y = Tensor::from_host(batch.labels, {batch.size}, DType::Int64, device);
  return {x, y};
}

}  // namespace dpcore::nn
