#include "layers/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/backend.h"
#include "engine/data/spec.h"
#include "engine/runtime.h"
#include "layers/train/checkpoint.h"
#include "layers/train/step.h"
#include "layers/weights.h"
#include "layers/zoo.h"

namespace dpcore::nn {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Device resolve_device(const std::string& flag) {
  if (flag == "auto") return runtime::best_device();
  try {
    return Device::parse(flag);
  } catch (const std::invalid_argument& e) {
    fail("--device: ", e.what(), " (or auto)");
  }
}

std::unique_ptr<Model> build_model(const std::string& flag, const data::Dataset& sample_of, Device device,
                                   uint64_t seed) {
  ModelDef def = model_from_flag(flag, {sample_of.c, sample_of.h, sample_of.w});
  auto model = std::make_unique<Model>(std::move(def.net), def.input_shape, device, DType::Float32, seed);
  DPCORE_CHECK(model->num_classes() == sample_of.num_classes, "--model ", flag, " has ", model->num_classes(),
               " outputs but the data has ", sample_of.num_classes, " classes");
  return model;
}

// Test loss and accuracy over a whole dataset, in evaluation mode.
EpochMetrics evaluate_dataset(Model& model, const data::Dataset& test, int64_t batch) {
  EvalResult total;
  for (int64_t begin = 0; begin < test.n; begin += batch) {
    int64_t n = std::min(batch, test.n - begin);
    data::Batch b;
    b.size = n, b.c = test.c, b.h = test.h, b.w = test.w;
    b.images = test.image(begin), b.labels = test.labels.data() + begin;
    auto [x, y] = batch_tensors(b, model.device());
    EvalResult r = evaluate_batch(model, x, y);
    total.loss_sum += r.loss_sum, total.correct += r.correct, total.samples += r.samples;
  }
  EpochMetrics m;
  m.test_loss = total.samples ? total.loss_sum / double(total.samples) : 0;
  m.test_accuracy = total.samples ? double(total.correct) / double(total.samples) : 0;
  return m;
}

std::string format_duration(double s) {
  char buf[32];
  int t = int(s + 0.5);
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

std::string format_bytes(size_t b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << double(b) / (1 << 20) << " MiB";
  return os.str();
}

// The flags a resumed run must share with the run that wrote the checkpoint.
std::map<std::string, std::string> resume_settings(const TrainOptions& o) {
  std::ostringstream lr;
  lr << o.sgd.lr << "," << o.sgd.momentum << "," << o.sgd.dampening << "," << o.sgd.weight_decay << ","
     << o.sgd.nesterov;
  return {{"model", o.model},     {"data", o.data},
          {"batch_size", std::to_string(o.batch)}, {"seed", std::to_string(o.seed)},
          {"shuffle", o.shuffle ? "1" : "0"},     {"normalize", o.normalize ? "1" : "0"},
          {"drop_last", o.drop_last ? "1" : "0"}, {"sgd", lr.str()}};
}

class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append) {
    if (path.empty()) return;
    file_.open(path, append ? std::ios::app : std::ios::trunc);
    DPCORE_CHECK(file_.good(), "--metrics: cannot open ", path, " for writing");
  }
  void write(const EpochMetrics& m) {
    if (!file_.is_open()) return;
    nlohmann::json j = {{"epoch", m.epoch},          {"step", m.step},
                        {"train_loss", m.train_loss}, {"test_loss", m.test_loss},
                        {"test_accuracy", m.test_accuracy}, {"samples_per_s", m.samples_per_s},
                        {"seconds", m.seconds},       {"peak_bytes", m.peak_bytes}};
    file_ << j.dump() << "\n";
    file_.flush();
  }

 private:
  std::ofstream file_;
};

}  // namespace

TrainResult train(const TrainOptions& o, std::ostream& primary_out) {
  DPCORE_CHECK(o.batch >= 1, "--batch ", o.batch, " must be at least 1");
  DPCORE_CHECK(o.epochs >= 1 || o.steps >= 1, "--epochs or --steps must be at least 1");
  DPCORE_CHECK(o.accum >= 1 && o.accum * o.parallel.replicas <= o.batch, "--batch ", o.batch,
               " cannot be split into --accum ", o.accum, " x --replicas ", o.parallel.replicas, " micro-batches");
  DPCORE_CHECK(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint DIR");
  DPCORE_CHECK(o.checkpoint_every >= 0, "--checkpoint-every ", o.checkpoint_every, " must not be negative");
  if (o.threads > 0) runtime::set_cpu_threads(o.threads);
  Device device = resolve_device(o.device);

  data::DataSplits data = data::load_data(data::parse_data_spec(o.data), o.normalize);
  auto model = build_model(o.model, data.train, device, o.seed);
  if (!o.init.empty()) load_weights(*model, o.init);
  auto runner = make_runner(std::move(model), o.sgd, o.accum, o.parallel);
  // In a multi-process run only rank 0 prints and writes files; the others train silently.
  const bool primary = runner->is_primary();
  std::ostream silent(nullptr);
  std::ostream& out = primary ? primary_out : silent;

  TrainProgress progress;
  if (o.resume) {
    progress = load_checkpoint(o.checkpoint_dir, runner->model(), runner->optimizer(), resume_settings(o));
    runner->sync_replicas();
    out << "resumed from " << checkpoint_path(o.checkpoint_dir) << " at step " << progress.step << " (epoch "
        << progress.position.epoch + 1 << ")\n";
  } else if (!o.init.empty()) {
    runner->sync_replicas();
  }

  data::LoaderOptions lo;
  lo.batch_size = o.batch, lo.shuffle = o.shuffle, lo.drop_last = o.drop_last, lo.seed = o.seed;
  // Batches in memory the device can copy from asynchronously (pinned, on a GPU).
  Backend& host_memory = backend_for(device);
  lo.allocator = {[&host_memory](size_t bytes) { return host_memory.alloc_host(bytes); },
                  [&host_memory](void* p) { host_memory.free_host(p); }};
  data::DataLoader loader(data.train, lo, progress.position);
  const int64_t per_epoch = loader.batches_per_epoch();
  const int64_t total_steps = o.steps > 0 ? o.steps : o.epochs * per_epoch;
  const bool bar = o.progress == 1 || (o.progress == -1 && isatty(STDOUT_FILENO));

  out << "dpcore: " << o.model << " on " << data.train.name << " (" << data::describe(data.train) << "), "
      << runner->describe() << ", batch " << o.batch << ", " << per_epoch << " steps per epoch" << std::endl;
  MetricsLog metrics(primary ? o.metrics : "", o.resume);
  TrainResult result;

  // The epoch's summed loss stays on the device; it is read only when reported.
  Tensor loss_sum = Tensor::zeros({}, DType::Float32, runner->model().device());
  int64_t samples = 0;
  double train_seconds = 0;
  Clock::time_point run_start = Clock::now();
  int64_t steps_at_start = progress.step;
  runtime::reset_peak_bytes(device);

  auto end_epoch = [&](int64_t epoch) {
    EpochMetrics m = evaluate_dataset(runner->model(), data.test, 256);
    m.epoch = epoch + 1, m.step = progress.step;
    m.train_loss = samples ? loss_sum.item() / double(samples) : 0;
    m.seconds = train_seconds;
    m.samples_per_s = train_seconds > 0 ? double(samples) / train_seconds : 0;
    m.peak_bytes = runtime::peak_bytes(device);
    if (bar) out << "\n";
    out << std::fixed << std::setprecision(4) << "epoch " << m.epoch << ": train loss " << m.train_loss
        << ", test loss " << m.test_loss << ", test accuracy " << std::setprecision(2) << 100 * m.test_accuracy
        << "%, " << std::setprecision(0) << m.samples_per_s << " samples/s, " << std::setprecision(1) << m.seconds
        << " s, peak memory " << format_bytes(m.peak_bytes) << std::endl;
    metrics.write(m);
    result.epochs.push_back(m);
    loss_sum.zero_();
    samples = 0, train_seconds = 0;
  };
  auto checkpoint = [&] {
    if (o.checkpoint_dir.empty() || !primary) return;
    save_checkpoint(o.checkpoint_dir, runner->model(), runner->optimizer(), progress, resume_settings(o));
  };

  data::Batch batch;
  int64_t epoch = progress.position.epoch;
  while (progress.step < total_steps) {
    if (!loader.next(batch)) {
      // (Nothing to report when a resumed run starts exactly at an epoch's end.)
      if (samples > 0) end_epoch(epoch);
      progress.position = loader.position();
      ++epoch;
      continue;
    }
    Clock::time_point t = Clock::now();
    StepStats s = runner->step(batch);
    train_seconds += seconds_since(t);
    backend_for(loss_sum.device()).add(loss_sum, s.loss_sum, loss_sum);
    samples += s.samples;
    ++progress.step;
    progress.position = loader.position();
    if (o.checkpoint_every > 0 && progress.step % o.checkpoint_every == 0) checkpoint();

    bool report = bar || progress.step % 100 == 0 || progress.step == total_steps;
    if (report) {
      double elapsed = seconds_since(run_start);
      double rate = double(progress.step - steps_at_start) / std::max(elapsed, 1e-9);
      std::ostringstream line;
      line << std::fixed << "step " << progress.step << "/" << total_steps << "  epoch " << epoch + 1 << "  loss "
           << std::setprecision(4) << s.loss_sum.item() / double(s.samples) << "  " << std::setprecision(0)
           << (train_seconds > 0 ? double(samples) / train_seconds : 0) << " samples/s  ETA "
           << format_duration(double(total_steps - progress.step) / std::max(rate, 1e-9));
      if (bar) out << "\r" << line.str() << "   " << std::flush;
      else out << line.str() << std::endl;
    }
  }
  // A run that stops mid-epoch (--steps) still reports where it got to.
  if (samples > 0) end_epoch(epoch);
  checkpoint();
  if (!o.save.empty() && primary) {
    save_weights(runner->model(), o.save);
    out << "saved weights to " << o.save << "\n";
  }
  result.steps = progress.step;
  return result;
}

EpochMetrics evaluate(const EvalOptions& o, std::ostream& out) {
  DPCORE_CHECK(!o.init.empty(), "eval: --init FILE.safetensors is required");
  if (o.threads > 0) runtime::set_cpu_threads(o.threads);
  Device device = resolve_device(o.device);
  data::DataSplits data = data::load_data(data::parse_data_spec(o.data), o.normalize);
  auto model = build_model(o.model, data.test, device, 0);
  load_weights(*model, o.init);
  EpochMetrics m = evaluate_dataset(*model, data.test, o.batch);
  out << std::fixed << std::setprecision(4) << "test loss " << m.test_loss << ", test accuracy "
      << std::setprecision(2) << 100 * m.test_accuracy << "% on " << data.test.n << " samples\n";
  return m;
}

}  // namespace dpcore::nn
