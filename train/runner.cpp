#include "train/runner.h"

#include "engine/runtime.h"
#include "train/step.h"

namespace dpcore::train {

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
  RunnerDescription d;
  d.devices = {model_->device()};
  d.accum = accum_;
  return describe_runner(d);
}

data::Batch batch_rows(const data::Batch& batch, int64_t begin, int64_t end) {
  DPCORE_CHECK(0 <= begin && begin <= end && end <= batch.size, "batch rows [", begin, ", ", end,
               ") of a batch of ", batch.size);
  data::Batch rows = batch;  // keeps the shape and which batch of which epoch it is
  rows.size = end - begin;
  rows.images = batch.images + begin * batch.c * batch.h * batch.w;
  rows.labels = batch.labels + begin;
  return rows;
}

std::pair<Tensor, Tensor> batch_tensors(const data::Batch& batch, Device device) {
  Tensor x = Tensor::from_host(batch.images, {batch.size, batch.c, batch.h, batch.w}, DType::Float32, device);
  return {x, batch_labels(batch, device)};
}

Tensor batch_labels(const data::Batch& batch, Device device) {
  return Tensor::from_host(batch.labels, {batch.size}, DType::Int64, device);
}

std::string describe_runner(const RunnerDescription& d) {
  std::string devices;
  for (const Device& device : d.devices) devices += (devices.empty() ? "" : ",") + device.str();
  std::string text = d.parallelism.empty()
                         ? "1 replica on " + devices
                         : d.parallelism + " over " + std::to_string(d.replicas) + " replicas [" + devices +
                               (d.devices_here ? " here" : "") + "]";
  for (const std::string& detail : d.details) text += ", " + detail;
  if (d.accum > 1) text += ", " + std::to_string(d.accum) + " micro-batches";
  return text;
}

}  // namespace dpcore::train
