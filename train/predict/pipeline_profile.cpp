// measure_pipeline_profile and measure_p2p_link (train/predict/pipeline_profile.h).
#include "train/predict/pipeline_profile.h"

#include <algorithm>
#include <thread>

#include "comm/communicator.h"
#include "engine/median.h"
#include "engine/seconds_since.h"
#include "kernels/error.h"
#include "train/predict/step_profile.h"
#include "train/step/step.h"

namespace dpcore::train {

namespace {
constexpr int kSlowdownRounds = 7;  // of measure_side_by_side_slowdown, alone then together
}  // namespace

scaling::PipelineProfile measure_pipeline_profile(layers::Model& model, const Tensor& x, const Tensor& y,
                                                  const SgdConfig& config, int warmup, int repeats) {
  scaling::PipelineProfile p;
  p.layers = pipeline::measure_layer_costs(model, x, y, warmup, repeats);
  const int layers = int(model.net().size());
  std::vector<pipeline::Stage> one_per_layer;
  for (int i = 0; i < layers; ++i) one_per_layer.push_back({i, i, pipeline::StageDevice{Device::cpu()}});
  const Shape sample(x.shape().begin() + 1, x.shape().end());
  const std::vector<Shape> inputs = pipeline::stage_input_shapes(model, one_per_layer, sample);
  const int64_t element = int64_t(dtype_size(model.dtype()));
  for (int i = 0; i < layers; ++i) {
    // What leaves layer i: the next layer's input (the last layer's output crosses nothing).
    const int64_t per_sample = i + 1 < layers ? shape_numel(inputs[size_t(i) + 1]) : shape_numel(model.output_shape());
    p.output_bytes.push_back(x.size(0) * per_sample * element);
  }
  for (const pipeline::FlatRange& r : pipeline::stage_parameter_ranges(model, one_per_layer))
    p.param_bytes.push_back(r.size * element);
  p.optimizer_s = measure_step_profile(model, x, y, config, warmup, repeats).optimizer_s;
  return p;
}

scaling::Link measure_p2p_link(int64_t bytes, int repeats) {
  DPCORE_CHECK(repeats >= 1 && bytes >= 1, "p2p link: ", repeats, " round trips of ", bytes, " bytes");
  constexpr int64_t kSmall = 4096;
  const int64_t large = std::max(bytes, 2 * kSmall);
  auto comms = comm::make_local_group(2);
  // One-way seconds of `n` bytes: the median round trip's half, after one untimed.
  auto one_way = [&](int64_t n) {
    Tensor there = Tensor::zeros({n / 4}, DType::Float32, Device::cpu());
    Tensor back = Tensor::zeros({n / 4}, DType::Float32, Device::cpu());
    std::thread echo([&] {
      for (int i = 0; i <= repeats; ++i) {
        comms[1]->recv(back, 0, i).wait();
        comms[1]->send(back, 0, i).wait();
      }
    });
    std::vector<double> trips;
    for (int i = 0; i <= repeats; ++i) {
      const SteadyClock::time_point t0 = SteadyClock::now();
      comms[0]->send(there, 1, i).wait();
      comms[0]->recv(there, 1, i).wait();
      if (i > 0) trips.push_back(seconds_since(t0));
    }
    echo.join();
    return median(trips) / 2;
  };
  // One end: half a one-way transfer, latency + n / bandwidth; a large message no slower
  // than a small one (noise) leaves the copies free.
  const double small_s = one_way(kSmall) / 2, large_s = one_way(large) / 2;
  scaling::Link link;
  link.bytes_per_s = large_s > small_s ? double(large - kSmall) / (large_s - small_s) : 1e15;
  link.latency_s = std::max(0.0, small_s - double(kSmall) / link.bytes_per_s);
  return link;
}

double measure_side_by_side_slowdown(const std::function<std::unique_ptr<layers::Model>()>& make_model,
                                     const Tensor& x, const Tensor& y, const std::vector<runtime::CpuTeam>& teams,
                                     int warmup, int repeats) {
  DPCORE_CHECK(!teams.empty() && warmup >= 0 && repeats >= 1, "side-by-side slowdown: ", teams.size(), " teams, ",
               warmup, " warm-up and ", repeats, " timed iterations");
  // The median iteration of a thread on each of `on`, all started at once.
  auto run = [&](const std::vector<runtime::CpuTeam>& on) {
    std::vector<double> medians(on.size());
    std::vector<std::unique_ptr<layers::Model>> models;
    for (size_t t = 0; t < on.size(); ++t) models.push_back(make_model());
    std::vector<std::thread> threads;
    for (size_t t = 0; t < on.size(); ++t) {
      threads.emplace_back([&, t] {
        runtime::join_cpu_team(on[t]);
        std::vector<double> seconds;
        for (int i = 0; i < warmup + repeats; ++i) {
          const SteadyClock::time_point t0 = SteadyClock::now();
          forward_backward(*models[t], x, y, 1.0);
          models[t]->zero_grad();
          if (i >= warmup) seconds.push_back(seconds_since(t0));
        }
        medians[t] = median(seconds);
      });
    }
    for (std::thread& t : threads) t.join();
    return median(medians);
  };
  if (teams.size() == 1) return 1.0;
  // The machine's speed drifts: alone and together alternate, and the median ratio counts.
  std::vector<double> ratios;
  for (int round = 0; round < kSlowdownRounds; ++round) {
    const double alone = run({teams.front()});
    ratios.push_back(run(teams) / alone);
  }
  return median(ratios);
}

}  // namespace dpcore::train
