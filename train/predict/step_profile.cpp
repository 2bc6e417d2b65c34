// measure_step_profile: one replica's step, timed piece by piece (train/predict/step_profile.h).
#include "train/predict/step_profile.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/median.h"
#include "engine/runtime.h"
#include "kernels/error.h"
#include "train/runners/runner.h"
#include "train/step/step.h"

namespace dpcore::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The times of `steps` runner steps on `batch` after `warmup` untimed ones.
std::vector<double> runner_step_seconds(StepRunner& runner, const data::Batch& batch, int warmup, int steps) {
  std::vector<double> seconds;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = Clock::now();
    runner.step(batch);
    if (i >= warmup) seconds.push_back(seconds_between(t0, Clock::now()));
  }
  return seconds;
}

}  // namespace

double measure_busy_slowdown(const std::function<std::unique_ptr<layers::Model>()>& make_model,
                             const std::vector<float>& images, const std::vector<int64_t>& labels,
                             const Shape& sample, const SgdConfig& config, int copies, int warmup, int steps) {
  DPCORE_CHECK(copies >= 1 && warmup >= 0 && steps >= 1, "busy slowdown: ", copies, " replicas, ", warmup,
               " warm-up and ", steps, " timed steps; expected >= 1, >= 0 and >= 1");
  DPCORE_CHECK(sample.size() == 3 && !labels.empty() && images.size() == labels.size() * size_t(shape_numel(sample)),
               "busy slowdown: ", images.size(), " pixels for ", labels.size(), " samples of ", shape_str(sample));
  // The replicas' global batch: the one replica's batch once per replica.
  std::vector<float> all_images;
  std::vector<int64_t> all_labels;
  for (int c = 0; c < copies; ++c) {
    all_images.insert(all_images.end(), images.begin(), images.end());
    all_labels.insert(all_labels.end(), labels.begin(), labels.end());
  }
  auto batch_of = [&](const std::vector<float>& x, const std::vector<int64_t>& y) {
    data::Batch b;
    b.size = int64_t(y.size()), b.sample = sample;
    b.images = x.data(), b.labels = y.data();
    return b;
  };
  // Local SGD that never averages within the measurement: the data-parallel runner, its
  // threads and its scatter, without any communication.
  ParallelOptions together;
  together.replicas = copies;
  together.sync = "local:" + std::to_string(int64_t(warmup) + steps + 1);
  ParallelOptions one;
  std::unique_ptr<StepRunner> alone = make_runner(make_model(), config, 1, one);
  std::unique_ptr<StepRunner> replicas = make_runner(make_model(), config, 1, together);
  // Alone before and after the replicas, so that a slow spell of the machine weighs on both.
  std::vector<double> alone_s = runner_step_seconds(*alone, batch_of(images, labels), warmup, steps);
  const std::vector<double> together_s = runner_step_seconds(*replicas, batch_of(all_images, all_labels), warmup, steps);
  const std::vector<double> after = runner_step_seconds(*alone, batch_of(images, labels), 0, steps);
  alone_s.insert(alone_s.end(), after.begin(), after.end());
  return median(together_s) / median(alone_s);
}

scaling::StepProfile measure_step_profile(layers::Model& model, const Tensor& x, const Tensor& y,
                                          const SgdConfig& config, int warmup, int steps) {
  DPCORE_CHECK(model.device().is_cpu(), "step profile: the model is on ", model.device().str(),
               "; gradient ready times are measured on the CPU only (a GPU's hooks run when work is queued)");
  DPCORE_CHECK(warmup >= 0 && steps >= 1, "step profile: ", warmup, " warm-up and ", steps,
               " timed steps; expected >= 0 and >= 1");
  FlatParameters& params = model.parameters();
  const size_t count = params.params().size();
  // The hooks write the time each gradient was last accumulated into `ready`; the model is
  // the profile's own, so they stay on it harmlessly afterwards.
  auto ready = std::make_shared<std::vector<Clock::time_point>>(count);
  for (size_t p = 0; p < count; ++p) {
    Tensor leaf = params.param(p);
    leaf.add_post_accumulate_hook([ready, p](const Tensor&) { (*ready)[p] = Clock::now(); });
  }
  Sgd optimizer(params, config);
  std::vector<double> forward, backward, step;
  std::vector<std::vector<double>> ready_after(count);
  const double grad_scale = gradient_scale(counted_targets(y));  // as a training step seeds it
  int64_t output_bytes = 0;
  for (int i = 0; i < warmup + steps; ++i) {
    model.zero_grad();
    const auto t0 = Clock::now();
    const bool logits = model.ends_in_log_softmax();
    const Tensor output = logits ? model.forward_logits(x) : model.forward(x);
    Tensor loss = loss_of(output, y, logits);
    const auto t1 = Clock::now();
    output_bytes = output.numel() * int64_t(dtype_size(output.dtype()));
    loss.backward(Tensor::full({}, grad_scale, loss.dtype(), loss.device()));
    const auto t2 = Clock::now();
    optimizer.step();
    const auto t3 = Clock::now();
    if (i < warmup) continue;
    forward.push_back(seconds_between(t0, t1));
    backward.push_back(seconds_between(t1, t2));
    step.push_back(seconds_between(t2, t3));
    for (size_t p = 0; p < count; ++p) ready_after[p].push_back(seconds_between(t1, (*ready)[p]));
  }
  scaling::StepProfile profile;
  profile.forward_s = median(forward);
  profile.backward_s = median(backward);
  profile.optimizer_s = median(step);
  const int64_t element = int64_t(dtype_size(params.dtype()));
  for (size_t p = 0; p < count; ++p) {
    profile.param_bytes.push_back(params.entries()[p].numel * element);
    profile.grad_ready_s.push_back(median(ready_after[p]));
  }
  profile.input_bytes = x.numel() * int64_t(dtype_size(x.dtype()));
  profile.threads = runtime::cpu_threads();
  profile.output_bytes = output_bytes;
  return profile;
}

}  // namespace dpcore::train
