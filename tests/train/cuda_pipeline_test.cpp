// Pipeline stages on GPUs (--stages "0-2@cuda:0,3-10@cuda:1", train/pipeline/stage_models.h):
// naive, gpipe and 1f1b with stages on several devices, on one device (each stage on a
// stream of its own), with the first stage away from the model's device and with
// --recompute train the parameters and batch norm's running statistics of one device
// accumulating the same micro-batches, bit for bit: every stage runs the same kernels on
// the same kind of device in the same order, and only copies cross between devices. The
// host build runs them on its emulated devices (under the sanitizers in CI); a real
// machine needs as many GPUs as a case names. --explain says what each step copies to and
// from the copies; --pipeline P times the layers on the GPU and puts the stages on the GPUs
// in turn. What the GPU pipeline does not take is refused, naming it.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "engine/runtime.h"
#include "layers/zoo.h"
#include "support/error_of.h"
#include "train/equivalence.h"
#include "train/observe/explain.h"
#include "train/pipeline/balanced_stages.h"
#include "train/pipeline/pipeline_runner.h"

namespace dpcore::train::pipeline {
namespace {

using dpcore::testing::error_of;

// 11 layers: conv bn relu pool conv relu flatten linear relu linear logsoftmax.
constexpr const char* kCnn = "conv(4,3,p1) bn relu pool(2) conv(8,3,p1) relu flatten linear(16) relu linear(10)";
const Shape kSample{3, 8, 8};
constexpr int64_t kBatch = 10;  // 4+3+3 in 3 micro-batches: uneven
constexpr int kSteps = 2;

std::unique_ptr<Model> cnn(Device device, DType precision = DType::Float32) {
  auto model = std::make_unique<Model>(layers::parse_layer_spec(kCnn, kSample), kSample, device, DType::Float32, 5);
  model->set_precision(precision);
  return model;
}

ParallelOptions pipeline_options(const std::string& stages, const std::string& schedule, int micro_batches,
                                 bool recompute = false) {
  ParallelOptions o;
  o.timeout_s = 120;
  o.pipeline.stages = stages, o.pipeline.schedule = schedule, o.pipeline.micro_batches = micro_batches;
  o.pipeline.recompute = recompute;
  return o;
}

testing::HostBatch batch_of_step(int s) { return testing::make_batch(kBatch, uint64_t(300 + s), {3, 8, 8}); }

// Each step's loss, then the parameters and buffers of the runner's model after kSteps
// steps. The loss comes back on the model's device (the root device), where the trainer adds it up.
std::vector<float> trained(StepRunner& runner) {
  std::vector<float> out;
  for (int s = 0; s < kSteps; ++s) {
    testing::HostBatch b = batch_of_step(s);
    runner.set_step_number(s + 1);
    const StepStats stats = runner.step(b.batch);
    EXPECT_EQ(stats.loss_sum.device().str(), runner.model().device().str());
    out.push_back(float(stats.loss_sum.item()));
  }
  for (const Tensor* t : {&runner.model().parameters().values(), &runner.model().buffers().values()}) {
    const std::vector<float> values = t->to_vector<float>();
    out.insert(out.end(), values.begin(), values.end());
  }
  return out;
}

struct GpuCase {
  const char* stages;
  const char* schedule;
  int micro_batches;
  int devices;  // the GPUs it names
  bool recompute = false;
};

const GpuCase kCases[] = {
    {"0-4@cuda:0,5-10@cuda:0", "gpipe", 3, 1},                  // one GPU: two stages on two streams
    {"0-2@cuda:0,3-10@cuda:1", "gpipe", 3, 2},                  // the stem, then the rest
    {"0-9@cuda:0,10@cuda:1", "naive", 1, 2},                    // the last stage only the loss
    {"0@cuda:1,1-6@cuda:0,7-10@cuda:2", "1f1b", 3, 3},          // stage 0 on a copy, not on the model's GPU
    {"0-3@cuda:2,4@cuda:1,5-8@cuda:1,9-10@cuda:3", "1f1b", 2, 4, true},  // two stages on one copy; recompute
};

TEST(CudaPipeline, StagesOnGpusTrainOneDevicesParametersBitForBit) {
  const int gpus = runtime::cuda_device_count();
  if (gpus < 1) GTEST_SKIP() << "no CUDA device: GPU pipelines are checked on the GPU machine and in the host build";
  int ran = 0;
  std::map<int, std::vector<float>> references;  // by micro-batch count: one run each
  for (const GpuCase& c : kCases) {
    if (c.devices > gpus) continue;  // (a real machine of fewer GPUs; the host build has 4)
    SCOPED_TRACE(std::string(c.stages) + " " + c.schedule + " M " + std::to_string(c.micro_batches) +
                 (c.recompute ? " recompute" : ""));
    // One device: the same micro-batches accumulated on cuda:0.
    if (!references.count(c.micro_batches)) {
      auto one = make_runner(cnn(Device::cuda(0)), testing::kSgd, c.micro_batches, ParallelOptions{});
      references[c.micro_batches] = trained(*one);
    }
    const std::vector<float>& reference = references.at(c.micro_batches);
    auto piped = make_runner(cnn(Device::cuda(0)), testing::kSgd, 1,
                             pipeline_options(c.stages, c.schedule, c.micro_batches, c.recompute));
    EXPECT_EQ(trained(*piped), reference);
    ++ran;
  }
  std::cout << ran << " of " << std::size(kCases) << " cases on " << gpus << " CUDA devices\n";
}

// --precision bf16 and fp16 (each copy's 16-bit parameters cast after its stages' new
// parameters arrive, the 16-bit activations crossing between GPUs): one GPU's parameters,
// bit for bit, over 2 steps (the second reads what the first step's update pulled), with the
// first stage on a copy, and fp16's loss scaler in the step.
TEST(CudaPipeline, StagesOnGpusUnderBf16AndFp16TrainOneGpusParametersBitForBit) {
  if (runtime::cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices (GPUs, or the host build's emulated ones)";
  struct HalfCase {
    const char* stages;
    const char* schedule;
    int micro_batches;
    DType precision;
  };
  for (const HalfCase& c : {HalfCase{"0@cuda:1,1-10@cuda:0", "1f1b", 2, DType::BFloat16},
                            HalfCase{"0-2@cuda:0,3-10@cuda:1", "gpipe", 3, DType::Float16}}) {
    SCOPED_TRACE(std::string(c.stages) + " " + dtype_name(c.precision));
    auto one = make_runner(cnn(Device::cuda(0), c.precision), testing::kSgd, c.micro_batches, ParallelOptions{});
    auto piped = make_runner(cnn(Device::cuda(0), c.precision), testing::kSgd, 1,
                             pipeline_options(c.stages, c.schedule, c.micro_batches));
    EXPECT_EQ(trained(*piped), trained(*one));
  }
}

TEST(CudaPipeline, ExplainSaysWhatEachStepMovesToAndFromEachCopy) {
  if (runtime::cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices (GPUs, or the host build's emulated ones)";
  const std::string stages = "0@cuda:0,1-10@cuda:1";  // the batch norm (layer 1) on the copy
  auto runner = make_runner(cnn(Device::cuda(0)), testing::kSgd, 1, pipeline_options(stages, "1f1b", 2));
  testing::HostBatch b = batch_of_step(0);
  runner->set_step_number(1);
  const StepStats stats = runner->step(b.batch);
  const Explanation e = explain_step(*runner, b.batch, stats);
  Model& model = runner->model();
  const auto parsed = parse_stages(stages, int(model.net().size()), {1, runtime::cuda_device_count()});
  const FlatRange params = stage_parameter_ranges(model, parsed)[1], buffers = stage_buffer_ranges(model, parsed)[1];
  ASSERT_EQ(e.stage_copies.size(), 1u);
  EXPECT_EQ(e.stage_copies[0].device, "cuda:1");
  EXPECT_EQ(e.stage_copies[0].parameter_bytes, params.size * 4);
  EXPECT_EQ(e.stage_copies[0].buffer_bytes, buffers.size * 4);
  EXPECT_GT(buffers.size, 0);
  EXPECT_TRUE(e.stage_cores.empty());  // a GPU stage's thread only queues its work
  const std::string text = render(e);
  EXPECT_NE(text.find("queueing its GPU's work on a stream of its own"), std::string::npos) << text;
  EXPECT_NE(text.find("and the copy on cuda:1: its gradients zeroed"), std::string::npos) << text;
  EXPECT_NE(text.find("then the copy on cuda:1 hands back its stages' gradients"), std::string::npos) << text;
}

TEST(CudaPipeline, PipelinePBalancesTheLayersOverTheGpusInTurn) {
  const int gpus = runtime::cuda_device_count();
  if (gpus < 1) GTEST_SKIP() << "no CUDA device: --pipeline P on GPUs is checked on the GPU machine and in the host build";
  auto probe = cnn(Device::cuda(0));
  testing::HostBatch b = batch_of_step(0);
  auto [x, y] = batch_tensors(b.batch, Device::cuda(0));
  const BalancedStages balanced = balance_pipeline(*probe, x, y, 3, 1);
  ASSERT_EQ(balanced.stages.size(), 3u);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(balanced.stages[size_t(s)].device.str(), "cuda:" + std::to_string(s % gpus));
  for (double seconds : balanced.layer_seconds) EXPECT_GT(seconds, 0.0);
  // The split trains one device's parameters, as any split does.
  auto one = make_runner(cnn(Device::cuda(0)), testing::kSgd, 2, ParallelOptions{});
  auto piped = make_runner(cnn(Device::cuda(0)), testing::kSgd, 1, pipeline_options(stages_text(balanced.stages), "1f1b", 2));
  EXPECT_EQ(trained(*piped), trained(*one));
}

TEST(CudaPipeline, WhatStagesOnGpusCannotTakeIsRefusedNamingIt) {
  if (runtime::cuda_device_count() < 1) GTEST_SKIP() << "no CUDA device: the GPU stages' checks need one to name";
  const int gpus = runtime::cuda_device_count();
  // A stage on a GPU with the model on the CPU, and the other way round.
  std::string error =
      error_of([&] { make_runner(cnn(Device::cpu()), testing::kSgd, 1, pipeline_options("0-4@cpu:0,5-10@cuda:0", "gpipe", 2)); });
  EXPECT_NE(error.find("the stage of layers 5-10 on cuda:0 with the model on cpu"), std::string::npos) << error;
  error = error_of(
      [&] { make_runner(cnn(Device::cuda(0)), testing::kSgd, 1, pipeline_options("0-4@cuda:0,5-10@cpu:0", "gpipe", 2)); });
  EXPECT_NE(error.find("the stage of layers 5-10 on cpu:0 with the model on cuda:0"), std::string::npos) << error;
  // A GPU that does not exist.
  const std::string missing = "cuda:" + std::to_string(gpus);
  error = error_of(
      [&] { make_runner(cnn(Device::cuda(0)), testing::kSgd, 1, pipeline_options("0-4@cuda:0,5-10@" + missing, "gpipe", 2)); });
  EXPECT_NE(error.find(missing), std::string::npos) << error;
  // Pipeline x data parallel stays on the CPU.
  ParallelOptions hybrid = pipeline_options("0-4@cuda:0,5-10@cuda:0", "gpipe", 2);
  hybrid.replicas = 2;
  error = error_of([&] { make_runner(cnn(Device::cuda(0)), testing::kSgd, 1, hybrid); });
  EXPECT_NE(error.find("with the model on cuda:0 and --replicas 2"), std::string::npos) << error;
}

}  // namespace
}  // namespace dpcore::train::pipeline
