// Data parallelism per step: one replica on the global batch against R replicas, --mode dp
// against --mode ddp, and how much of the gradient allreduce DDP's buckets hide behind the
// backward pass.
//
//   dpcore_ddp_overlap_bench [--model fashioncnn] [--batch 64] [--replicas 2] [--steps 20]
//                            [--bucket-mb 0.25] [--first-bucket-mb 1] [--device cpu]
//
// hidden = 1 - exposed / alone, where `alone` is one allreduce of the whole gradient buffer
// with nothing else running and `exposed` is the time replica 0 still waits for its buckets
// after its backward has finished. That wait includes waiting for a slower replica's
// backward; `hidden_last` takes the wait of the replica whose backward ended last instead
// (the least wait of a step), which is communication only. Prints a table, then one JSON line.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/communicator.h"
#include "train/runners/ddp.h"
#include "engine/random.h"
#include "engine/runtime.h"
#include "layers/zoo.h"

using namespace dpcore;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::unique_ptr<layers::Model> build(const std::string& name, Device device) {
  layers::ModelDef def = layers::reference_model(name);
  return std::make_unique<layers::Model>(std::move(def.net), def.input_shape, device, DType::Float32, 1);
}

// Median seconds per step of `runner` on a fixed random batch.
double time_steps(train::StepRunner& runner, const data::Batch& batch, int steps, Device device) {
  for (int i = 0; i < 3; ++i) runner.step(batch);  // warm-up
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    auto t0 = Clock::now();
    runner.step(batch).loss_sum.item();  // reading the loss waits for the step
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(times);
}

// Median seconds of one allreduce of `elements` floats over `replicas` local replicas.
double time_allreduce(int64_t elements, int replicas, Device device, int repeats) {
  auto comms = comm::make_local_group(replicas);
  std::vector<Tensor> buffers;
  for (int r = 0; r < replicas; ++r) buffers.push_back(Tensor::full({elements}, 1.0, DType::Float32, device));
  std::vector<double> times;
  for (int i = 0; i < repeats + 2; ++i) {
    auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int r = 0; r < replicas; ++r) {
      threads.emplace_back([&, r] {
        comms[size_t(r)]->allreduce(buffers[size_t(r)]).wait();
        runtime::synchronize(device);
      });
    }
    for (auto& t : threads) t.join();
    if (i >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  dpcore::runtime::use_native_blas_kernels(argv);  // OpenBLAS's fast kernels (engine/runtime.h)
  CLI::App app{"dpcore data-parallel step benchmark: 1 replica vs R, dp vs ddp, allreduce overlap"};
  std::string model = "fashioncnn", device_flag = "cpu";
  int64_t batch = 64;
  int replicas = 2, steps = 20;
  double bucket_mb = 0.25, first_bucket_mb = 1;
  app.add_option("--model", model)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--replicas", replicas)->capture_default_str();
  app.add_option("--steps", steps)->capture_default_str();
  app.add_option("--bucket-mb", bucket_mb, "DDP bucket cap (small, so that there are buckets to overlap)")
      ->capture_default_str();
  app.add_option("--first-bucket-mb", first_bucket_mb, "the first bucket's cap (PyTorch's 1 MiB)")->capture_default_str();
  app.add_option("--device", device_flag)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    Device device = Device::parse(device_flag);
    Shape in = layers::reference_model(model).input_shape;
    Generator gen(7);
    std::vector<float> images(size_t(batch * in[0] * in[1] * in[2]));
    for (float& v : images) v = float(gen.uniform(-1, 1));
    std::vector<int64_t> labels(static_cast<size_t>(batch));
    for (auto& l : labels) l = int64_t(gen.below(10));
    data::Batch b;
    b.size = batch, b.sample = in, b.images = images.data(), b.labels = labels.data();
    SgdConfig sgd{0.01, 0.9, 0.0, 0.0, false};

    train::SingleDeviceRunner one(build(model, device), sgd, 1);
    double t_one = time_steps(one, b, steps, device);
    train::ParallelOptions o;
    o.replicas = replicas, o.bucket_mb = bucket_mb, o.first_bucket_mb = first_bucket_mb;
    o.mode = "dp";
    train::DataParallelRunner dp(build(model, device), sgd, 1, o);
    double t_dp = time_steps(dp, b, steps, device);
    o.mode = "ddp";
    train::DistributedRunner ddp(build(model, device), sgd, 1, o);
    std::vector<double> exposed, exposed_last;
    for (int i = 0; i < 3; ++i) ddp.step(b);
    std::vector<double> t_ddp_all;
    for (int i = 0; i < steps; ++i) {
      auto t0 = Clock::now();
      ddp.step(b).loss_sum.item();
      t_ddp_all.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      exposed.push_back(ddp.reducer(0).exposed_seconds());
      double least = exposed.back();
      for (size_t r = 1; r < ddp.local_replicas(); ++r) least = std::min(least, ddp.reducer(r).exposed_seconds());
      exposed_last.push_back(least);
    }
    double t_ddp = median(t_ddp_all), t_exposed = median(exposed);
    double t_alone = time_allreduce(one.model().parameters().total(), replicas, device, steps);
    double hidden = std::max(0.0, 1.0 - t_exposed / t_alone);
    double t_exposed_last = median(exposed_last), hidden_last = std::max(0.0, 1.0 - t_exposed_last / t_alone);

    std::printf("%s, batch %ld, %d replicas on %s, %zu DDP buckets of <= %.2f MiB (the first %.2f MiB)\n", model.c_str(),
                long(batch), replicas, device.str().c_str(), ddp.reducer(0).buckets().size(), bucket_mb, first_bucket_mb);
    std::printf("  1 replica, whole batch   %9.2f ms/step\n", 1e3 * t_one);
    std::printf("  dp,  %d replicas          %9.2f ms/step  (%.2fx)\n", replicas, 1e3 * t_dp, t_one / t_dp);
    std::printf("  ddp, %d replicas          %9.2f ms/step  (%.2fx)\n", replicas, 1e3 * t_ddp, t_one / t_ddp);
    std::printf("  allreduce alone          %9.3f ms; still waited after backward %.3f ms: %.0f%% hidden\n",
                1e3 * t_alone, 1e3 * t_exposed, 100 * hidden);
    std::printf("  the replica whose backward ended last waited %.3f ms: %.0f%% hidden\n", 1e3 * t_exposed_last,
                100 * hidden_last);
    nlohmann::json j = {{"model", model},     {"batch", batch},          {"replicas", replicas},
                        {"device", device.str()}, {"one_ms", 1e3 * t_one}, {"dp_ms", 1e3 * t_dp},
                        {"ddp_ms", 1e3 * t_ddp}, {"allreduce_ms", 1e3 * t_alone}, {"exposed_ms", 1e3 * t_exposed},
                        {"hidden_fraction", hidden}, {"buckets", ddp.reducer(0).buckets().size()},
                        {"exposed_last_ms", 1e3 * t_exposed_last}, {"hidden_last_fraction", hidden_last},
                        {"bucket_mb", bucket_mb}, {"first_bucket_mb", first_bucket_mb},
                        {"gradient_bytes", one.model().parameters().total() * 4}};
    std::cout << j.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "dpcore_ddp_overlap_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
