// Whole-model runs on the GPU against the CPU: 20 training steps of each reference model
// through the single-device runner, with the step captured into a CUDA graph (after its
// warm-up steps) and without. The GPU and the CPU sum in different orders (cuDNN/cuBLAS or
// the hand kernels against im2col + OpenBLAS), and 20 SGD steps with momentum compound
// those rounding differences, so the bound is 1e-4 of each buffer's scale rather than the
// 1e-5 of a single kernel. The next test feeds a run from pinned and from plain memory; the
// last trains 4 replicas on 4 devices (GPUs, or the host build's emulated ones).
#include <gtest/gtest.h>

#include "engine/backend.h"
#include "engine/runtime.h"
#include "engine/data/loader.h"
#include "engine/data/synthetic.h"
#include "train/runners/runner.h"
#include "layers/zoo.h"
#include "support/test_support.h"
#include "train/tiny_job.h"

namespace dpcore {
namespace {

using namespace dpcore::train;

struct Data {
  std::vector<float> images;
  std::vector<int64_t> labels;
  data::Batch batch;
};

Data make_data(const Shape& in, int64_t n, uint64_t seed) {
  Data d;
  d.images = testing::random_vector<float>(size_t(n * in[0] * in[1] * in[2]), seed);
  for (int64_t i = 0; i < n; ++i) d.labels.push_back((i * 3 + int64_t(seed)) % 10);
  d.batch.size = n, d.batch.sample = in;
  d.batch.images = d.images.data(), d.batch.labels = d.labels.data();
  return d;
}

std::vector<float> train_steps(const std::string& model, Device device, int steps, int64_t batch) {
  layers::ModelDef def = layers::reference_model(model);
  Shape in = def.input_shape;
  auto m = std::make_unique<layers::Model>(std::move(def.net), in, device, DType::Float32, 3);
  train::SingleDeviceRunner runner(std::move(m), SgdConfig{0.01, 0.9, 0.0, 0.0, false}, 2);
  for (int step = 0; step < steps; ++step) {
    Data d = make_data(in, batch, uint64_t(step));
    runner.step(d.batch);
  }
  return runner.model().parameters().values().to_vector<float>();
}

void expect_gpu_matches_cpu(const std::string& model, int steps, int64_t batch) {
  Backend& cuda = backend_for(Device::cuda(0));
  auto cpu = train_steps(model, Device::cpu(), steps, batch);
  for (const char* graph : {"on", "off"}) {
    cuda.set_option("cuda-graph", graph);
    auto gpu = train_steps(model, Device::cuda(0), steps, batch);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      worst = std::max(worst, std::abs(double(gpu[i]) - double(cpu[i])));
      scale = std::max(scale, std::abs(double(cpu[i])));
    }
    EXPECT_LE(worst / scale, 1e-4) << model << " with --cuda-graph " << graph;
    std::cout << model << " --cuda-graph " << graph << ": relative difference " << worst / scale << "\n";
  }
  cuda.set_option("cuda-graph", "on");
}

class GpuTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuTraining, TwentyStepsMatchTheCpuWithAndWithoutCudaGraphs) {
  if (!testing::cuda_available()) GTEST_SKIP() << "no CUDA device: whole-model GPU runs are checked on the GPU machine";
  expect_gpu_matches_cpu(GetParam(), 20, 16);
}

INSTANTIATE_TEST_SUITE_P(ReferenceModels, GpuTraining, ::testing::Values("simplenet", "fashioncnn", "vggs"));

// The host build's size of the run above, which its sanitizer stages run (scripts/test.sh;
// the 20 steps take minutes there under ThreadSanitizer): simplenet, 3 steps of 4 samples,
// the two warm-up steps and one recorded into a graph and launched.
TEST(GpuTraining, SimplenetThreeSmallStepsMatchTheCpuWithAndWithoutCudaGraphs) {
  if (!testing::cuda_available()) GTEST_SKIP() << "no CUDA device: whole-model GPU runs are checked on the GPU machine";
  expect_gpu_matches_cpu("simplenet", 3, 4);
}

// Batches from pinned buffers are copied asynchronously (no host wait per upload); the
// loader refills a buffer only once the copy out of it has run. Were it to refill one
// earlier, a step would train on the next batch's data, and the run would differ from
// the same run fed from plain memory.
std::vector<float> train_from_loader(Device device, bool pinned) {
  const data::Dataset set = data::make_synthetic({3, 32, 32, 10}, 40 * 64, 1, 2, "synthetic");
  data::LoaderOptions lo;
  lo.batch_size = 64, lo.seed = 5;
  if (pinned) {
    Backend* host = &backend_for(device);
    lo.allocator = {[host](size_t bytes) { return host->alloc_host(bytes); },
                    [host](void* p) { host->free_host(p); },
                    [host](const void* p) { host->await_host_reads(p); }};
  }
  data::DataLoader loader(set, lo);
  layers::ModelDef def = layers::reference_model("simplenet");
  auto m = std::make_unique<layers::Model>(std::move(def.net), def.input_shape, device, DType::Float32, 3);
  train::SingleDeviceRunner runner(std::move(m), SgdConfig{0.01, 0.9, 0.0, 0.0, false}, 1);
  data::Batch batch;
  while (loader.next(batch)) runner.step(batch);
  return runner.model().parameters().values().to_vector<float>();
}

TEST(GpuTraining, PinnedBatchesTrainAsPlainOnes) {
  if (!testing::cuda_available()) GTEST_SKIP() << "no CUDA device: pinned uploads are checked on the GPU machine";
  EXPECT_EQ(train_from_loader(Device::cuda(0), true), train_from_loader(Device::cuda(0), false));
}

// Replicas on 4 devices over the local ring, against the same replicas on the CPU. The
// replicas' parameters, gradient buffers and optimizer state (SGD's momentum, Adam's
// moments) are made on the constructing thread's stream, and the replicas and the ring then
// work on their own streams: without an order between the two (train::replicate, the async
// runner's constructor), ThreadSanitizer reports the race on the host runtime's devices,
// and a GPU may broadcast or snapshot memory not yet written. `strategy` is --mode dp or
// ddp (--sync full), or ddp with --sync local:2 or async (no staleness: serial SGD on the
// pieces, which replica computes each does not matter), or ddp over NCCL, with and without
// synchronised batch norm. Two steps of the tiny job: a
// kernel's 1e-5 of each buffer's scale, twice over (the CPU and the hand kernels sum in
// different orders).
std::vector<float> four_replicas_two_steps(Device device, const std::string& strategy, const OptimizerConfig& optimizer) {
  ParallelOptions options = tiny_job::parallel(4, strategy == "dp" ? "dp" : "ddp");
  if (strategy == "local2") options.sync = "local:2";
  if (strategy == "async") options.sync = "async", options.max_staleness = 0;
  // nccl: the CUDA replicas allreduce through NCCL (in the host build, its stand-in over
  // threads), the CPU ones through the local ring, the same sums; nccl_syncbn adds batch
  // norm with its statistics synchronised over that communicator (with SGD: the conv bias
  // before batch norm has a gradient that is zero up to rounding, which Adam's first step
  // turns into a step of the learning rate whatever its size, differently on either side).
  if (strategy.rfind("nccl", 0) == 0 && device.is_cuda()) options.backend = "nccl";
  if (strategy == "nccl_syncbn") options.batchnorm = "sync";
  auto net = layers::parse_layer_spec(strategy == "nccl_syncbn" ? tiny_job::kBatchNormNet : tiny_job::kNet, {1, 8, 8});
  auto model = std::make_unique<layers::Model>(std::move(net), Shape{1, 8, 8}, device, DType::Float32, 3);
  std::unique_ptr<StepRunner> runner = make_runner(std::move(model), optimizer, 1, options);
  for (int64_t step = 1; step <= 2; ++step) tiny_job::step(*runner, step);
  runner->settle();
  return tiny_job::params(*runner);
}

class FourCudaReplicas : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(FourCudaReplicas, TwoStepsMatchTheCpu) {
  if (runtime::cuda_device_count() < 4) GTEST_SKIP() << "needs 4 CUDA devices (GPUs, or the host build's emulated ones)";
  const auto& [strategy, optimizer_name] = GetParam();
  const OptimizerConfig optimizer =
      optimizer_name == "adam" ? OptimizerConfig(AdamConfig{}) : OptimizerConfig(tiny_job::kSgd);
  const std::vector<float> cpu = four_replicas_two_steps(Device::cpu(), strategy, optimizer);
  const std::vector<float> cuda = four_replicas_two_steps(Device::cuda(0), strategy, optimizer);
  ASSERT_EQ(cuda.size(), cpu.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    worst = std::max(worst, std::abs(double(cuda[i]) - double(cpu[i])));
    scale = std::max(scale, std::abs(double(cpu[i])));
  }
  EXPECT_LE(worst / scale, 2e-5) << strategy << ", " << optimizer_name;
  std::cout << strategy << ", " << optimizer_name << ": relative difference " << worst / scale << "\n";
}

// Each strategy once, each optimizer's state twice (their races are the same fill, of other
// buffers: under ThreadSanitizer every case takes 10-15 s on the host runtime).
INSTANTIATE_TEST_SUITE_P(StrategiesAndOptimizers, FourCudaReplicas,
                         ::testing::Values(std::make_tuple("dp", "sgd"), std::make_tuple("ddp", "adam"),
                                           std::make_tuple("local2", "adam"), std::make_tuple("async", "sgd"),
                                           std::make_tuple("nccl", "sgd"), std::make_tuple("nccl_syncbn", "sgd")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace dpcore
