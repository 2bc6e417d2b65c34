#include "train/runners/runner.h"

#include <algorithm>

#include <iostream>

#include "engine/runtime.h"
#include "train/step/loss_scaling.h"
#include "train/step/step.h"

namespace dpcore::train {

SingleDeviceRunner::SingleDeviceRunner(std::unique_ptr<Model> model, const OptimizerConfig& optimizer, int64_t accum,
                                       const ParallelOptions& options)
    : model_(std::move(model)),
      optimizer_(make_optimizer(model_->parameters(), optimizer)),
      accum_(accum),
      faults_(options.faults),
      guards_(options.guards),
      scaler_(make_loss_scaler(*model_)),
      guarded_(!options.faults.empty() || options.guards.skip_nonfinite || scaler_) {
  DPCORE_CHECK(accum >= 1, "--accum ", accum, " must be at least 1");
  faults_.check(1, "one replica");
  if (guarded_ && backend_for(model_->device()).make_graph(model_->device().index)) {
    std::cerr << "dpcore: note: --inject, --skip-nonfinite and --precision fp16's loss scaling run every step "
                 "without a CUDA graph (they act between backward and the optimizer step, where a recorded step "
                 "cannot stop)\n";
  }
  eager_only_ = guarded_ || !optimizer_->replayable();
}

SingleDeviceRunner::~SingleDeviceRunner() {
  // The graph's replays may still be running: let them finish before its memory goes.
  if (graph_) runtime::synchronize(model_->device());
}

StepStats SingleDeviceRunner::step(const data::Batch& batch) {
  const Device device = model_->device();
  const int64_t accum = std::min<int64_t>(accum_, batch.size);  // a short last batch may hold fewer samples than A
  const int64_t counted = counted_targets(batch);
  const BatchStart start{uint64_t(step_number()), 0};  // (one device: the batch's first sample is its row 0)
  const bool new_rates = rates_changed();
  if (graph_ && (new_rates || graph_outdated())) {
    drop_graph();  // graph_batch_ stays: the next step of the recorded size records anew,
    warmup_steps_ = kWarmupSteps - 1;  // warming the new graph's stream up first
  }
  if (graph_ && batch.size == static_x_.size(0) && counted == graph_counted_) {
    Backend& backend = backend_for(device);
    backend.copy_bytes(static_x_.raw_data(), device, batch.token_ids() ? static_cast<const void*>(batch.ids)
                                                                        : static_cast<const void*>(batch.images),
                       Device::cpu(), static_x_.nbytes());
    backend.copy_bytes(static_y_.raw_data(), device, batch.labels, Device::cpu(), static_y_.nbytes());
    graph_->replay();
    optimizer_->count_replayed_step();
    // The next replay overwrites static_loss_: the caller gets a copy, queued after this
    // replay on the same stream (no host wait).
    return {static_loss_.clone(), batch.size, counted};
  }
  auto [x, y] = batch_tensors(batch, device);
  // (Not at a step whose rates just changed: they may change again at the next. Not for a
  // model that draws random numbers: a replay would draw the recorded step's dropout masks.)
  if (!graph_ && !eager_only_ && !new_rates && !model_->draws_random_numbers() &&
      (graph_batch_ == 0 || graph_batch_ == batch.size)) {
    graph_batch_ = batch.size;
    if (++warmup_steps_ == kWarmupSteps) return {warm_up_and_record(x, y, accum, counted, start), batch.size, counted};
  }
  if (guarded_) return guarded_step(x, y, accum, batch.size, counted, start);
  return {accumulate_and_step(*model_, *optimizer_, x, y, accum, counted, start), batch.size, counted};
}

StepStats SingleDeviceRunner::guarded_step(const Tensor& x, const Tensor& y, int64_t accum, int64_t samples,
                                           int64_t counted, BatchStart start) {
  Tensor loss;
  model_->zero_grad();
  faults_.run(0, step_number(), *model_,
              [&] { loss = accumulate_gradients(*model_, x, y, accum, backward_seed(counted, scaler_.get()), start); });
  if (guards_.skip_nonfinite && step_is_nonfinite(loss, model_->parameters().grads())) {
    return {loss, samples, counted, true};
  }
  if (scaler_ && scaled_step(*scaler_, *optimizer_, model_->parameters().grads())) {
    StepStats overflowed{loss, samples, counted};
    overflowed.overflow = true;
    return overflowed;
  }
  if (!scaler_) optimizer_->step();
  faults_.after_step(0, step_number());
  return {loss, samples, counted};
}

Tensor SingleDeviceRunner::warm_up_and_record(const Tensor& x, const Tensor& y, int64_t accum, int64_t counted,
                                              BatchStart start) {
  const Device device = model_->device();
  std::unique_ptr<Backend::Captured> graph = backend_for(device).make_graph(device.index);
  if (!graph) {
    eager_only_ = true;
    return accumulate_and_step(*model_, *optimizer_, x, y, accum, counted, start);
  }
  Tensor loss;
  graph->warm_up([&] { loss = accumulate_and_step(*model_, *optimizer_, x, y, accum, counted, start); });
  static_x_ = x.clone();
  static_y_ = y.clone();
  graph_counted_ = counted;
  recorded_first_step_ = optimizer_->steps_taken() == 0;
  try {
    graph->record([&] {
      static_loss_ = accumulate_and_step(*model_, *optimizer_, static_x_, static_y_, accum, counted, start);
      optimizer_->uncount_recorded_step();  // here, so that a capture failing after the body still leaves the count right
    });
  } catch (const std::exception& e) {
    std::cerr << "dpcore: warning: " << e.what() << "; training goes on without a CUDA graph\n";
    graph.reset();
    static_x_ = static_y_ = static_loss_ = Tensor();
    eager_only_ = true;
    return loss;
  }
  graph_ = std::move(graph);
  return loss;
}

bool SingleDeviceRunner::graph_outdated() const {
  return graph_->stale() || (optimizer_->steps_taken() == 0) != recorded_first_step_;
}

bool SingleDeviceRunner::rates_changed() {
  const std::vector<double> now = optimizer_->hyper_parameters();
  const bool changed = stepped_ && now != last_hyper_parameters_;
  if (changed && rates_were_changing_ && !noted_changing_ && !eager_only_) {
    noted_changing_ = true;
    if (backend_for(model_->device()).make_graph(model_->device().index)) {
      std::cerr << "dpcore: note: the learning rate or momentum changes at every step (--lr-schedule, "
                   "--warmup-steps); such steps run without a CUDA graph, which would have to be recorded anew "
                   "for each\n";
    } else {
      eager_only_ = true;  // the backend cannot record: nothing to note
    }
  }
  last_hyper_parameters_ = now;
  stepped_ = true;
  rates_were_changing_ = changed;
  return changed;
}

std::optional<GradScalerState> StepRunner::loss_scale() const {
  const GradScaler* scaler = loss_scaler();
  if (!scaler) return std::nullopt;
  return scaler->state();
}

void StepRunner::set_loss_scale(const GradScalerState& state) {
  GradScaler* scaler = loss_scaler();
  DPCORE_CHECK(scaler, "this run has no loss scaler (only --precision fp16 has one): ", describe());
  scaler->load_state(state);
}

void SingleDeviceRunner::set_rates(double lr, double momentum) {
  optimizer_->set_lr(lr);
  optimizer_->set_momentum(momentum);
}

void SingleDeviceRunner::drop_graph() {
  graph_.reset();  // first: it waits for its replays, which read the buffers
  static_x_ = static_y_ = static_loss_ = Tensor();
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
  data::Batch rows = batch;  // keeps the shapes and which batch of which epoch it is
  rows.size = end - begin;
  const int64_t sample = batch.sample_numel();
  if (batch.images) rows.images = batch.images + begin * sample;
  if (batch.ids) rows.ids = batch.ids + begin * sample;
  rows.labels = batch.labels + begin * batch.labels_per_sample;
  if (batch.lengths) rows.lengths = batch.lengths + begin;
  return rows;
}

std::pair<Tensor, Tensor> batch_tensors(const data::Batch& batch, Device device) {
  DPCORE_CHECK((batch.images == nullptr) != (batch.ids == nullptr), "batch of ", batch.size,
               " samples: exactly one of float inputs and token ids must be set, got ",
               batch.images ? "both" : "neither");
  DPCORE_CHECK(batch.labels_per_sample >= 1, "batch of ", batch.size, " samples: ", batch.labels_per_sample,
               " labels per sample; expected at least 1");
  Shape shape{batch.size};
  shape.insert(shape.end(), batch.sample.begin(), batch.sample.end());
  Tensor x = batch.ids ? Tensor::from_host(batch.ids, shape, DType::Int64, device)
                       : Tensor::from_host(batch.images, shape, DType::Float32, device);
  return {x, batch_labels(batch, device)};
}

Tensor batch_labels(const data::Batch& batch, Device device) {
  const Shape shape = batch.labels_per_sample == 1 ? Shape{batch.size} : Shape{batch.size, batch.labels_per_sample};
  return Tensor::from_host(batch.labels, shape, DType::Int64, device);
}

int64_t counted_targets(const data::Batch& batch) {
  return counted_targets(batch.labels, batch.size * batch.labels_per_sample);
}

int64_t pipeline_micro_batches(const PipelineOptions& pipeline) {
  if (!is_pipeline(pipeline)) return 1;
  if (pipeline.micro_batches > 0) return pipeline.micro_batches;
  if (pipeline.schedule == "naive") return 1;
  if (pipeline.balanced_stages > 0) return pipeline.balanced_stages;
  return int64_t(std::count(pipeline.stages.begin(), pipeline.stages.end(), ',')) + 1;
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
