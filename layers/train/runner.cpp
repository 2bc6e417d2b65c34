#include "layers/train/runner.h"

#include <map>
#include <mutex>

#include "layers/train/step.h"

namespace dpcore::nn {

SingleDeviceRunner::SingleDeviceRunner(std::unique_ptr<Model> model, const SgdConfig& sgd, int64_t accum)
    : model_(std::move(model)), sgd_(std::make_unique<Sgd>(model_->parameters(), sgd)), accum_(accum) {
  DPCORE_CHECK(accum >= 1, "--accum ", accum, " must be at least 1");
}

StepStats SingleDeviceRunner::step(const data::Batch& batch) {
  auto [x, y] = batch_tensors(batch, model_->device());
  int64_t accum = std::min<int64_t>(accum_, batch.size);  // a short last batch may hold fewer samples than A
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
