// The pipeline's reference executor against one device: naive, gpipe and 1f1b over 2, 3
// and 4 uneven stages give the parameters (and batch norm's running statistics) of one
// device accumulating the same micro-batches, float64 within 1e-12 and float32 within 1e-6
// of the largest value; gpipe and 1f1b give each other's bits; the activations each stage
// holds at once are the schedule's (1f1b at most P - s). The stages on threads of their own,
// over send/recv, give the reference executor's bits; a failing stage ends the batch at once,
// naming itself. --pipeline P's split of the measured layers.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <gtest/gtest.h>

#include "engine/sgd.h"
#include "kernels/cpu/kernels.h"
#include "layers/zoo.h"
#include "support/error_of.h"
#include "support/test_support.h"
#include "train/bert_batches.h"
#include "train/equivalence.h"
#include "train/pipeline/balanced_stages.h"
#include "train/pipeline/hybrid_runner.h"
#include "train/pipeline/pipeline_step.h"
#include "train/pipeline/pipeline_threads.h"

namespace dpcore::train::pipeline {
namespace {

using dpcore::testing::error_of;
using layers::Model;

// 11 layers: conv bn relu pool conv relu flatten linear relu linear logsoftmax.
constexpr const char* kCnn = "conv(4,3,p1) bn relu pool(2) conv(8,3,p1) relu flatten linear(16) relu linear(10)";
// 9 layers: conv bn relu res res gap flatten linear logsoftmax (a residual block is one layer).
constexpr const char* kResNet = "conv(8,3,p1,nobias) bn relu res(8) res(16,s2) gap flatten linear(10)";
// 5 layers: flatten linear relu linear logsoftmax; a first stage of the flatten alone has no
// parameters, so no graph and no backward.
constexpr const char* kMlp = "flatten linear(16) relu linear(10)";

struct Job {
  std::unique_ptr<Model> model;
  std::unique_ptr<Sgd> sgd;
  Tensor x, y;
};

Job make_job(const std::string& spec, DType dtype, int64_t batch) {
  Job j;
  j.model = std::make_unique<Model>(layers::parse_layer_spec(spec, {1, 8, 8}), Shape{1, 8, 8}, Device::cpu(), dtype, 5);
  j.sgd = std::make_unique<Sgd>(j.model->parameters(), SgdConfig{0.05, 0.9, 0.0, 1e-3, true});
  const auto values = dpcore::testing::random_vector<double>(size_t(batch * 64), 11);
  j.x = dtype == DType::Float64 ? Tensor::from_vector(values, {batch, 1, 8, 8})
                                : Tensor::from_vector(std::vector<float>(values.begin(), values.end()), {batch, 1, 8, 8});
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch; ++i) labels.push_back((i * 3 + 1) % 10);
  j.y = Tensor::from_vector(labels, {batch});
  return j;
}

// The model's parameters and then its buffers, as doubles.
std::vector<double> state_of(const Model& model) {
  auto read = [](const Tensor& t) {
    return t.dtype() == DType::Float64 ? t.to_vector<double>()
                                       : [&] { auto f = t.to_vector<float>(); return std::vector<double>(f.begin(), f.end()); }();
  };
  std::vector<double> out = read(model.parameters().values());
  const std::vector<double> buffers = read(model.buffers().values());
  out.insert(out.end(), buffers.begin(), buffers.end());
  return out;
}

// Steps on one device: each step zeroes, accumulates M micro-batches, steps.
std::vector<double> one_device(const std::string& spec, DType dtype, int64_t batch, int micro_batches, int steps) {
  Job j = make_job(spec, dtype, batch);
  for (int step = 0; step < steps; ++step)
    accumulate_and_step(*j.model, *j.sgd, j.x, j.y, micro_batches, counted_targets(j.y), {uint64_t(step), 0});
  return state_of(*j.model);
}

enum class Executor { Reference, Threads };

std::vector<double> pipelined(const std::string& spec, DType dtype, int64_t batch, const std::string& stages_text,
                              Schedule schedule, int micro_batches, int steps, PipelineStepStats* stats = nullptr,
                              Executor executor = Executor::Reference, bool recompute = false) {
  Job j = make_job(spec, dtype, batch);
  const auto stages = parse_stages(stages_text, int(j.model->net().size()), {4, 0});
  PipelineThreads threads(int(stages.size()));
  threads.set_recompute(recompute);
  for (int step = 0; step < steps; ++step) {
    j.model->zero_grad();
    const double scale = gradient_scale(counted_targets(j.y));
    const BatchStart start{uint64_t(step), 0};
    if (executor == Executor::Threads)
      threads.accumulate_gradients(*j.model, stages, schedule, micro_batches, j.x, j.y, scale, start, stats);
    else
      pipeline_accumulate_gradients(*j.model, stages, schedule, micro_batches, j.x, j.y, scale, start, stats, recompute);
    j.sgd->step();
  }
  return state_of(*j.model);
}

double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i])), scale = std::max(scale, std::abs(b[i]));
  return worst / scale;
}

struct StageCase {
  const char* spec;
  const char* stages;
};

const StageCase kCases[] = {
    {kCnn, "0-2@cpu:0,3-10@cpu:1"},                          // P 2, uneven
    {kCnn, "0@cpu:0,1-6@cpu:1,7-10@cpu:2"},                  // P 3, a one-layer stage first
    {kCnn, "0-3@cpu:0,4@cpu:1,5-8@cpu:2,9-10@cpu:3"},        // P 4
    {kCnn, "0-9@cpu:0,10@cpu:1"},                            // the last stage only the loss
    {kResNet, "0-3@cpu:0,4-8@cpu:1"},                        // residual blocks whole on a stage
    {kResNet, "0-2@cpu:0,3@cpu:1,4@cpu:2,5-8@cpu:3"},        // one block per stage
    {kMlp, "0@cpu:0,1-4@cpu:1"},                             // a first stage without parameters
};

TEST(PipelineStep, EverySchedulesParametersEqualOneDevice) {
  const int64_t batch = 10;
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tolerance = dtype == DType::Float64 ? 1e-12 : 1e-6;
    for (const StageCase& c : kCases)
      for (int m : {1, 3, 4}) {  // 10 = 4+3+3 = 3+3+2+2: uneven micro-batches
        const auto reference = one_device(c.spec, dtype, batch, m, 3);
        for (Schedule schedule : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB}) {
          if (schedule == Schedule::Naive && m != 1) continue;
          const auto got = pipelined(c.spec, dtype, batch, c.stages, schedule, m, 3);
          EXPECT_LE(relative_difference(got, reference), tolerance)
              << c.stages << " " << schedule_name(schedule) << " M " << m << " " << dtype_name(dtype);
        }
      }
  }
}

TEST(PipelineStep, GPipeAndOneFOneBGiveTheSameBits) {
  for (const StageCase& c : kCases)
    EXPECT_EQ(pipelined(c.spec, DType::Float32, 10, c.stages, Schedule::GPipe, 4, 2),
              pipelined(c.spec, DType::Float32, 10, c.stages, Schedule::OneFOneB, 4, 2))
        << c.stages;
}

// --recompute: the same parameters and running statistics, bit for bit, on either
// executor; a stage holds one micro-batch's graph at most, during its backward.
TEST(PipelineStep, RecomputingActivationsGivesTheSameBits) {
  for (const StageCase& c : kCases) {
    for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) {
      for (Executor executor : {Executor::Reference, Executor::Threads}) {
        SCOPED_TRACE(std::string(c.stages) + " " + schedule_name(schedule) +
                     (executor == Executor::Threads ? " threads" : " reference"));
        PipelineStepStats stats;
        const auto kept = pipelined(c.spec, DType::Float32, 10, c.stages, schedule, 4, 2, nullptr, executor);
        EXPECT_EQ(pipelined(c.spec, DType::Float32, 10, c.stages, schedule, 4, 2, &stats, executor, true), kept);
        for (int peak : stats.peak_live_activations) EXPECT_EQ(peak, 1);
      }
    }
  }
}

TEST(PipelineStep, TheLossIsOneDevicesSummedLoss) {
  Job a = make_job(kCnn, DType::Float64, 10), b = make_job(kCnn, DType::Float64, 10);
  const double scale = gradient_scale(counted_targets(a.y));
  const double one = accumulate_gradients(*a.model, a.x, a.y, 4, scale, {}).item();
  const auto stages = parse_stages("0-4@cpu:0,5-10@cpu:1", 11, {2, 0});
  const double piped = pipeline_accumulate_gradients(*b.model, stages, Schedule::OneFOneB, 4, b.x, b.y, scale, {}).item();
  EXPECT_NEAR(piped, one, 1e-12 * std::abs(one));
}

TEST(PipelineStep, EachStageHoldsTheActivationsItsScheduleSays) {
  const char* four = "0-3@cpu:0,4@cpu:1,5-8@cpu:2,9-10@cpu:3";
  for (int m : {2, 6}) {
    PipelineStepStats gpipe, one_f_one_b;
    pipelined(kCnn, DType::Float32, 12, four, Schedule::GPipe, m, 1, &gpipe);
    pipelined(kCnn, DType::Float32, 12, four, Schedule::OneFOneB, m, 1, &one_f_one_b);
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(gpipe.peak_live_activations[s], m) << "stage " << s;
      EXPECT_EQ(one_f_one_b.peak_live_activations[s], std::min(4 - s, m)) << "stage " << s << " M " << m;
      EXPECT_LE(one_f_one_b.peak_live_activations[s], 4);
    }
  }
}

TEST(PipelineStep, BadInputIsRefusedNamingIt) {
  Job j = make_job(kCnn, DType::Float32, 6);
  const auto stages = parse_stages("0-4@cpu:0,5-10@cpu:1", 11, {2, 0});
  EXPECT_EQ(error_of([&] { pipeline_accumulate_gradients(*j.model, stages, Schedule::GPipe, 8, j.x, j.y, 1.0, {}); }),
            "--micro-batches 8 is larger than the batch (6 samples): a micro-batch would be empty");
  const std::vector<Stage> short_of_the_end = {stages[0]};
  EXPECT_EQ(error_of([&] { pipeline_accumulate_gradients(*j.model, short_of_the_end, Schedule::GPipe, 2, j.x, j.y, 1.0, {}); }),
            "pipeline: stages 0-4@cpu:0 do not cover the model's 11 layers");
}

// --pipeline P's profile: a time for every layer (residual blocks whole, the last layer with
// the loss), the parameters untouched and the gradient buffer left zero, so a step after it
// starts clean; balance_stages splits the model by it. Times are only checked to be times.
TEST(LayerCosts, EveryLayerGetsATimeAndTheModelIsLeftReadyToTrain) {
  for (const char* spec : {kCnn, kResNet, kMlp}) {
    Job j = make_job(spec, DType::Float32, 6);
    const std::vector<float> before = j.model->parameters().values().to_vector<float>();
    std::vector<double> costs;
    for (const LayerCost& cost : measure_layer_costs(*j.model, j.x, j.y, 1, 3)) {
      // (A first layer without parameters has no backward to time.)
      EXPECT_TRUE(std::isfinite(cost.forward_s) && cost.forward_s > 0) << spec;
      EXPECT_TRUE(std::isfinite(cost.backward_s) && cost.backward_s >= 0) << spec;
      costs.push_back(cost.total());
    }
    ASSERT_EQ(costs.size(), j.model->net().size()) << spec;
    EXPECT_EQ(j.model->parameters().values().to_vector<float>(), before) << spec;
    for (float g : j.model->parameters().grads().to_vector<float>()) ASSERT_EQ(g, 0.0f) << spec;
    const auto stages = balance_stages(costs, 3, {StageDevice::parse("cpu:0"), StageDevice::parse("cpu:1"),
                                                  StageDevice::parse("cpu:2")});
    EXPECT_EQ(parse_stages(stages_text(stages), int(costs.size()), {3, 0}), stages) << stages_text(stages);
  }
}

TEST(LayerCosts, BadRepeatsAreRefusedNamingThem) {
  Job j = make_job(kCnn, DType::Float32, 6);
  EXPECT_EQ(error_of([&] { measure_layer_costs(*j.model, j.x, j.y, 1, 0); }),
            "pipeline layer profile: warmup 1 and repeats 0 (need warmup >= 0, repeats >= 1)");
}

// --pipeline P: the measured layers split into P stages that cover the model in order,
// stage i on team i mod the teams there are, by balance_stages over the times measured;
// the log line says what was measured and chosen.
TEST(BalancedStages, TheMeasuredLayersSplitIntoStagesOnTheTeamsInTurn) {
  Job j = make_job(kCnn, DType::Float32, 6);
  const BalancedStages b = balance_pipeline(*j.model, j.x, j.y, 3, 2);
  ASSERT_EQ(b.layer_seconds.size(), j.model->net().size());
  EXPECT_EQ(b.samples, 6);
  ASSERT_EQ(b.stages.size(), 3u);
  EXPECT_EQ(parse_stages(stages_text(b.stages), 11, {2, 0}), b.stages) << stages_text(b.stages);
  const std::vector<StageDevice> teams = {StageDevice::parse("cpu:0"), StageDevice::parse("cpu:1"), StageDevice::parse("cpu:0")};
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(b.stages[i].device, teams[i]) << i;
  EXPECT_EQ(b.stages, balance_stages(b.layer_seconds, 3, teams));
  const std::string log = describe(b);
  EXPECT_EQ(log.rfind("--pipeline 3: per layer on a micro-batch of 6 samples, forward + backward ms (the median of "
                      "3) / KiB held from forward to backward: ", 0), 0u) << log;
  EXPECT_NE(log.find("; balanced into " + stages_text(b.stages) + ", the stages taking "), std::string::npos) << log;
  EXPECT_NE(log.find(" KiB at most (gpipe, 3 micro-batches)\n"), std::string::npos) << log;
  ASSERT_EQ(b.memory.ops.size(), j.model->net().size());
  for (size_t s = 0; s < 3; ++s) EXPECT_GT(b.stage_bytes(s), 0);
  for (float g : j.model->parameters().grads().to_vector<float>()) ASSERT_EQ(g, 0.0f);
}

// What --pipeline P's balance predicts each stage holds (StageMemory: the ops measured on
// one micro-batch, times the schedule's live micro-batches, and one backward) against what
// each stage's thread held at its peak running given stages on a batch of 4 such
// micro-batches, under gpipe, 1f1b and gpipe with --recompute, for a ResNet and for a CNN
// whose conv + relu + pool run fused (whole, and cut by a stage boundary). Tensor sizes,
// not times: the same on every machine. Measured: within 20 bytes of 6-580 KB (the
// loss's scalars, batch norm's statistics), but for the last case, a fused op's backward
// below flatten and linear on one stage, 1,032 bytes under 21,832 (4.7%: the gradient the
// linear's backward makes for the flatten's view, which the per-op measurement counts
// before the fused op's backward begins). Hence 10%.
TEST(BalancedStages, EachStagesPredictedMemoryIsWithinATenthOfWhatItHolds) {
  // 9 layers: conv relu pool (fused) conv relu pool (fused) flatten linear logsoftmax.
  constexpr const char* kFused = "conv(4,3,p1) relu pool(2) conv(8,3,p1) relu pool(2) flatten linear(10)";
  struct Case {
    const char* spec;
    const char* stages;
    const char* schedule;
    bool recompute;
  };
  const Case cases[] = {
      {kResNet, "0-2@cpu:0,3@cpu:0,4-8@cpu:0", "gpipe", false},
      {kResNet, "0-2@cpu:0,3-4@cpu:0,5-8@cpu:0", "1f1b", false},
      {kResNet, "0-2@cpu:0,3-4@cpu:0,5-8@cpu:0", "gpipe", true},
      {kFused, "0-2@cpu:0,3-5@cpu:0,6-8@cpu:0", "gpipe", false},
      {kFused, "0-1@cpu:0,2-4@cpu:0,5-8@cpu:0", "1f1b", false},  // fused ops cut: their layers run apart
      {kFused, "0-2@cpu:0,3-5@cpu:0,6-8@cpu:0", "gpipe", true},
      {kFused, "0@cpu:0,1-2@cpu:0,3-8@cpu:0", "gpipe", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.spec) + " " + c.stages + " " + c.schedule + (c.recompute ? " --recompute" : ""));
    Job j = make_job(c.spec, DType::Float32, 32);
    PipelineOptions options;
    options.schedule = c.schedule, options.micro_batches = 4, options.recompute = c.recompute;
    const BalancedStages b = balance_pipeline(*j.model, j.x.narrow0(0, 8), j.y.narrow0(0, 8), 3, 1, options);
    const std::vector<Stage> stages = parse_stages(c.stages, 9, {1, 0});
    PipelineThreads threads(3);
    threads.set_recompute(c.recompute);
    threads.accumulate_gradients(*j.model, stages, parse_schedule(c.schedule), 4, j.x, j.y, 1.0, {});
    const std::vector<size_t> held = threads.peak_bytes();
    for (size_t s = 0; s < 3; ++s) {
      const double measured = double(held[s]);
      const double predicted = double(b.memory.stage_bytes(int(s), stages[s].first_layer, stages[s].last_layer));
      EXPECT_LE(std::abs(predicted - measured), 0.1 * measured)
          << "stage " << s << ": predicted " << predicted << ", held " << measured;
    }
  }
}

// A limit the fastest split does not keep moves the split; one no split keeps is refused
// before anything trains, naming it.
TEST(BalancedStages, AStageMemoryLimitChoosesASplitThatKeepsIt) {
  Job j = make_job(kResNet, DType::Float32, 8);
  PipelineOptions options;
  options.schedule = "gpipe", options.micro_batches = 4;
  const BalancedStages fastest = balance_pipeline(*j.model, j.x, j.y, 3, 1, options);
  int64_t needs = 0;
  for (size_t s = 0; s < 3; ++s) needs = std::max(needs, fastest.stage_bytes(s));
  options.stage_memory_mb = double(needs - 1) / (1 << 20);
  try {
    const BalancedStages limited = balance_pipeline(*j.model, j.x, j.y, 3, 1, options);
    EXPECT_NE(limited.stages, fastest.stages);
    for (size_t s = 0; s < 3; ++s) EXPECT_LT(limited.stage_bytes(s), needs);
  } catch (const Error& e) {
    // (The fastest split may already be the one that needs least.)
    EXPECT_NE(std::string(e.what()).find("no split of the 9 layers into 3 stages holds at most that"), std::string::npos)
        << e.what();
  }
  options.stage_memory_mb = 1e-3;
  const std::string error = error_of([&] { balance_pipeline(*j.model, j.x, j.y, 3, 1, options); });
  EXPECT_EQ(error.rfind("--stage-memory-mb 0.001: no split of the 9 layers into 3 stages holds at most that on every "
                        "stage; the least any split needs is ", 0), 0u) << error;
}

TEST(BalancedStages, StagesTheModelCannotHaveAreRefusedNamingThem) {
  Job j = make_job(kCnn, DType::Float32, 6);
  EXPECT_EQ(error_of([&] { balance_pipeline(*j.model, j.x, j.y, 12, 2); }),
            "--pipeline 12: more stages than the model has layers (11; a layer is a top-level child of the model, a "
            "residual block one layer)");
  EXPECT_EQ(error_of([&] { balance_pipeline(*j.model, j.x, j.y, 0, 2); }), "--pipeline 0: needs at least 1 stage");
}

TEST(PipelineThreads, StagesOnThreadsGiveTheReferenceExecutorsBits) {
  for (const StageCase& c : kCases)
    for (Schedule schedule : {Schedule::GPipe, Schedule::OneFOneB}) {
      PipelineStepStats stats;
      const auto threaded = pipelined(c.spec, DType::Float32, 10, c.stages, schedule, 4, 2, &stats, Executor::Threads);
      EXPECT_EQ(threaded, pipelined(c.spec, DType::Float32, 10, c.stages, schedule, 4, 2)) << c.stages;
      const int P = int(stats.peak_live_activations.size());
      for (int s = 0; s < P; ++s)
        EXPECT_EQ(stats.peak_live_activations[s], schedule == Schedule::GPipe ? 4 : std::min(P - s, 4)) << c.stages;
    }
}

// Each stage's thread joins its CPU team before its first work: its kernels run on the
// team's cores with the team's threads, as measured on the stage's own thread, and the
// bits are those of stages without teams.
// What lets a stage's team of fewer threads give one device's bits: a step's every kernel
// sums in an order fixed by the shapes, not by the thread count (the convolution's weight
// gradient and the GEMMs' blocks among them, DeterminismTest). The CNN and the ResNet on
// 8x8 images, float32 and float64, and fashioncnn at batch 64 (GEMMs large enough that
// OpenBLAS's blocks would otherwise follow the threads).
TEST(PipelineThreads, OneDevicesStepIsTheSameBitsOnAnyThreadCount) {
  auto steps = [](Job j, int threads) {
    kernels::cpu::set_num_threads(threads);
    for (int step = 0; step < 2; ++step)
      accumulate_and_step(*j.model, *j.sgd, j.x, j.y, 4, counted_targets(j.y), {uint64_t(step), 0});
    kernels::cpu::set_num_threads(0);
    return state_of(*j.model);
  };
  auto fashioncnn = [] {
    Job j;
    layers::ModelDef def = layers::reference_model("fashioncnn");
    j.model = std::make_unique<Model>(std::move(def.net), def.input_shape, Device::cpu(), DType::Float32, 5);
    j.sgd = std::make_unique<Sgd>(j.model->parameters(), SgdConfig{0.05, 0.9, 0.0, 1e-3, true});
    j.x = Tensor::from_vector(dpcore::testing::random_vector<float>(64 * 784, 11), {64, 1, 28, 28});
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < 64; ++i) labels.push_back((i * 3 + 1) % 10);
    j.y = Tensor::from_vector(labels, {64});
    return j;
  };
  for (int threads : {2, 3}) {
    for (const char* spec : {kCnn, kResNet})
      for (DType dtype : {DType::Float32, DType::Float64})
        EXPECT_EQ(steps(make_job(spec, dtype, 10), threads), steps(make_job(spec, dtype, 10), 1))
            << spec << " " << dtype_name(dtype) << " on " << threads << " threads";
    // 16 samples a micro-batch.
    EXPECT_EQ(steps(fashioncnn(), threads), steps(fashioncnn(), 1)) << "fashioncnn on " << threads << " threads";
  }
}

TEST(PipelineThreads, EachStageRunsOnItsTeamsCores) {
  const std::vector<int> cpus = runtime::allowed_cpus();
  const auto stages = parse_stages("0-4@cpu:0,5-10@cpu:1", 11, {int(cpus.size()), 0});
  // Two teams where the machine has two cores for them, else both stages on the one core.
  const std::vector<int> first = {cpus.front()}, second = {cpus.size() > 1 ? cpus[1] : cpus.front()};
  const std::vector<runtime::CpuTeam> teams = {{first, 1}, {second, 1}};
  auto run = [&](PipelineThreads& threads, PipelineStepStats* stats) {
    Job j = make_job(kCnn, DType::Float32, 8);
    for (int step = 0; step < 2; ++step) {
      j.model->zero_grad();
      threads.accumulate_gradients(*j.model, stages, Schedule::OneFOneB, 4, j.x, j.y, gradient_scale(counted_targets(j.y)),
                                   {uint64_t(step), 0}, stats);
      j.sgd->step();
    }
    return state_of(*j.model);
  };
  PipelineThreads teamed(2, std::chrono::seconds(60), teams), plain(2);
  PipelineStepStats stats;
  EXPECT_EQ(run(teamed, &stats), run(plain, nullptr));
  ASSERT_EQ(stats.stage_cores.size(), 2u);
  EXPECT_EQ(stats.stage_cores[0].cpus, first);
  EXPECT_EQ(stats.stage_cores[1].cpus, second);
  for (const runtime::CpuTeam& seen : stats.stage_cores) EXPECT_EQ(seen.threads, 1);
  EXPECT_EQ(runtime::allowed_cpus(), cpus) << "the calling thread keeps its cores";
}

// The memory each stage's thread holds, measured by its account: under GPipe it grows with
// the micro-batches (all M forwards' activations wait for the backwards), under 1F1B it does
// not (at most min(P - s, M) at once), so 1F1B holds less on every stage. 4 stages, micro-
// batches of 8 samples, M = 4 and M = 8.
TEST(PipelineThreads, EachStagesMemoryGrowsWithTheMicroBatchesUnderGPipeOnly) {
  const auto stages = parse_stages("0-3@cpu:0,4@cpu:1,5-8@cpu:2,9-10@cpu:3", 11, {4, 0});
  auto peaks = [&](Schedule schedule, int micro_batches) {
    Job j = make_job(kCnn, DType::Float32, 8 * micro_batches);
    PipelineThreads threads(4);
    PipelineStepStats stats;
    threads.accumulate_gradients(*j.model, stages, schedule, micro_batches, j.x, j.y, 1.0, {}, &stats);
    EXPECT_EQ(stats.peak_bytes, threads.peak_bytes()) << "one batch: its peak is the pipeline's";
    return stats.peak_bytes;
  };
  const auto gpipe4 = peaks(Schedule::GPipe, 4), gpipe8 = peaks(Schedule::GPipe, 8);
  const auto one4 = peaks(Schedule::OneFOneB, 4), one8 = peaks(Schedule::OneFOneB, 8);
  ASSERT_EQ(gpipe8.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_GT(gpipe8[s], gpipe4[s]) << "stage " << s;
    EXPECT_EQ(one8[s], one4[s]) << "stage " << s;
    EXPECT_LT(one8[s], gpipe8[s]) << "stage " << s;
    EXPECT_GT(one8[s], 0u) << "stage " << s;
  }
}

// Under GPipe with 8 micro-batches, recomputing keeps less on every stage that has
// activations to keep (all but the loss's).
TEST(PipelineThreads, RecomputingHoldsLessMemoryOnEveryStage) {
  const auto stages = parse_stages("0-3@cpu:0,4@cpu:1,5-8@cpu:2,9-10@cpu:3", 11, {4, 0});
  auto peaks = [&](bool recompute) {
    Job j = make_job(kCnn, DType::Float32, 64);
    PipelineThreads threads(4);
    threads.set_recompute(recompute);
    threads.accumulate_gradients(*j.model, stages, Schedule::GPipe, 8, j.x, j.y, 1.0, {});
    return threads.peak_bytes();
  };
  const auto kept = peaks(false), recomputed = peaks(true);
  for (size_t s = 0; s < 3; ++s) EXPECT_LT(recomputed[s], kept[s]) << "stage " << s;
  EXPECT_LE(recomputed[3], kept[3]);
}

TEST(PipelineThreads, DropoutDrawsWhatItDrawsOnOneDevice) {
  // Two encoder layers with dropout on different stages: each stage sets the batch
  // position of its own layers only, and the masks are one device's, also when a stage
  // recomputes its forward in the backward.
  const std::string spec = "encoder(heads=2,ff=16,dropout=0.25) encoder(heads=2,ff=16,dropout=0.25) meanpool linear(10)";
  for (bool recompute : {false, true}) {
  SCOPED_TRACE(recompute ? "recomputing" : "keeping activations");
  auto run = [&](bool piped) {
    Job j;
    j.model = std::make_unique<Model>(layers::parse_layer_spec(spec, {4, 8}), Shape{4, 8}, Device::cpu(), DType::Float64, 5);
    j.sgd = std::make_unique<Sgd>(j.model->parameters(), SgdConfig{0.05, 0.9, 0.0, 0.0, false});
    j.x = Tensor::from_vector(dpcore::testing::random_vector<double>(6 * 32, 3), {6, 4, 8});
    j.y = Tensor::from_vector(std::vector<int64_t>{1, 4, 7, 0, 9, 2}, {6});
    PipelineThreads threads(2);
    threads.set_recompute(recompute);
    const auto stages = parse_stages("0@cpu:0,1-4@cpu:1", 5, {2, 0});
    for (int step = 0; step < 2; ++step) {
      j.model->zero_grad();
      const double scale = gradient_scale(6);
      if (piped) threads.accumulate_gradients(*j.model, stages, Schedule::OneFOneB, 3, j.x, j.y, scale, {uint64_t(step), 0});
      else accumulate_gradients(*j.model, j.x, j.y, 3, scale, {uint64_t(step), 0});
      j.sgd->step();
    }
    return state_of(*j.model);
  };
  const auto one = run(false);
  EXPECT_LE(relative_difference(run(true), one), 1e-12);
  }
}

// --precision bf16 and fp16 under a pipeline (the model's autocast in each stage: a stage
// runs its layers with Model::forward_layers, and the 16-bit activations cross the
// boundaries where forward() has them): the stages on threads train the parameters,
// running statistics and losses of one device accumulating the same micro-batches under
// the same precision, bit for bit, over naive, gpipe and 1f1b, boundaries after a
// convolution, a batch norm, a flatten and before the loss alone, and --recompute. Under
// fp16 the loss scaler sees the same gradients: started at 2^20 (so that the first steps'
// gradients overflow float16) the pipeline skips the same steps and ends at the same scale.
struct PrecisionCase {
  const char* stages;
  Schedule schedule;
  int micro_batches;
  bool recompute = false;
};

const PrecisionCase kPrecisionCases[] = {
    {"0@cpu:0,1-10@cpu:1", Schedule::GPipe, 3},                         // after a convolution
    {"0-3@cpu:0,4-6@cpu:1,7-10@cpu:0", Schedule::OneFOneB, 3},           // after pooling, after a flatten
    {"0-9@cpu:0,10@cpu:1", Schedule::Naive, 1},                          // before the loss alone: float32
    {"0-1@cpu:0,2-8@cpu:1,9-10@cpu:1", Schedule::OneFOneB, 2, true},     // after a batch norm; recompute
};

std::unique_ptr<Model> precision_cnn(DType precision) {
  auto model = std::make_unique<Model>(layers::parse_layer_spec(kCnn, {1, 8, 8}), Shape{1, 8, 8}, Device::cpu(),
                                       DType::Float32, 5);
  model->set_precision(precision);
  return model;
}

// Per step: the loss, whether the step overflowed and the scale after it (fp16); then the
// parameters and buffers.
std::vector<double> precision_run(StepRunner& runner, int steps) {
  std::vector<double> out;
  if (runner.loss_scale()) runner.set_loss_scale({1048576.0f, 0});  // 2^20
  for (int s = 0; s < steps; ++s) {
    dpcore::testing::HostBatch b = dpcore::testing::make_batch(10, uint64_t(200 + s), {1, 8, 8});
    runner.set_step_number(s + 1);
    const StepStats stats = runner.step(b.batch);
    out.push_back(stats.loss_sum.item());
    out.push_back(stats.overflow);
    out.push_back(runner.loss_scale() ? double(runner.loss_scale()->scale) : 0.0);
  }
  const std::vector<double> state = state_of(runner.model());
  out.insert(out.end(), state.begin(), state.end());
  return out;
}

TEST(PipelinePrecision, StagesUnderBf16AndFp16TrainOneDevicesParametersBitForBit) {
  constexpr int kSteps = 3;
  int overflowed = 0, clean = 0;
  for (DType half : {DType::BFloat16, DType::Float16}) {
    for (const PrecisionCase& c : kPrecisionCases) {
      SCOPED_TRACE(std::string(dtype_name(half)) + " " + c.stages + " M " + std::to_string(c.micro_batches) +
                   (c.recompute ? " recompute" : ""));
      SingleDeviceRunner one(precision_cnn(half), dpcore::testing::kSgd, c.micro_batches);
      const std::vector<double> want = precision_run(one, kSteps);
      ParallelOptions o;
      o.pipeline.stages = c.stages, o.pipeline.micro_batches = c.micro_batches, o.pipeline.recompute = c.recompute;
      o.pipeline.schedule = schedule_name(c.schedule);
      auto piped = make_runner(precision_cnn(half), dpcore::testing::kSgd, 1, o);
      ASSERT_NE(dynamic_cast<PipelineRunner*>(piped.get()), nullptr) << piped->describe();
      EXPECT_EQ(precision_run(*piped, kSteps), want);
      for (int s = 0; s < kSteps; ++s) (want[size_t(3 * s + 1)] != 0 ? overflowed : clean)++;
    }
  }
  EXPECT_GT(overflowed, 0) << "no fp16 step overflowed: the skipped step went untested";
  EXPECT_GT(clean, 0);
  // What crosses: 16 bits after the convolution, float32 into a stage of the loss alone.
  for (DType half : {DType::BFloat16, DType::Float16}) {
    Job j = make_job(kCnn, DType::Float32, 6);
    j.model->set_precision(half);
    EXPECT_EQ(StageWork(*j.model, parse_stages("0@cpu:0,1-10@cpu:1", 11, {2, 0}), 2, j.x, j.y, 1.0, {}).input_dtype(1),
              half);
    EXPECT_EQ(StageWork(*j.model, parse_stages("0-9@cpu:0,10@cpu:1", 11, {2, 0}), 2, j.x, j.y, 1.0, {}).input_dtype(1),
              DType::Float32);
  }
  // The forward really ran in 16 bits: float32's parameters differ.
  SingleDeviceRunner fp32(precision_cnn(DType::Float32), dpcore::testing::kSgd, 3);
  SingleDeviceRunner bf16(precision_cnn(DType::BFloat16), dpcore::testing::kSgd, 3);
  EXPECT_NE(precision_run(fp32, 1), precision_run(bf16, 1));
}

// A BERT classifier's stages under bf16: the embeddings' float32 output and the encoder's
// cross the boundaries as forward() has them, dropout draws what it draws on one device,
// and AdamW steps the same gradients: one device's parameters, bit for bit.
TEST(PipelinePrecision, ABertClassifiersStagesUnderBf16TrainOneDevicesParameters) {
  auto bert = [] {
    auto model = dpcore::testing::bert_net(false, DType::Float32);
    model->set_precision(DType::BFloat16);
    return model;
  };
  const int layers = int(bert()->net().size());
  ParallelOptions o;
  o.pipeline.stages = "0@cpu:0,1-" + std::to_string(layers - 1) + "@cpu:1";
  o.pipeline.micro_batches = 2, o.pipeline.schedule = "1f1b";
  auto piped = make_runner(bert(), dpcore::testing::kBertAdamW, 1, o);
  SingleDeviceRunner one(bert(), dpcore::testing::kBertAdamW, 2);
  EXPECT_EQ(dpcore::testing::train_bert_with(*piped, false, 8, 3), dpcore::testing::train_bert_with(one, false, 8, 3));
}

// Pipeline x data parallel in one process under bf16 and fp16 (HybridRunner): ddp's bits
// with --accum M, the loss scaler's decisions on every replica included.
TEST(PipelinePrecision, AReplicatedPipelineUnderBf16AndFp16TrainsDdpsParameters) {
  for (DType half : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(half));
    ParallelOptions hybrid;
    hybrid.replicas = 2, hybrid.timeout_s = 60;
    hybrid.pipeline.stages = "0-3@cpu:0,4-10@cpu:1", hybrid.pipeline.micro_batches = 2, hybrid.pipeline.schedule = "gpipe";
    ParallelOptions ddp;
    ddp.replicas = 2, ddp.timeout_s = 60;
    auto piped = make_runner(precision_cnn(half), dpcore::testing::kSgd, 1, hybrid);
    ASSERT_NE(dynamic_cast<HybridRunner*>(piped.get()), nullptr) << piped->describe();
    auto replicas = make_runner(precision_cnn(half), dpcore::testing::kSgd, 2, ddp);
    EXPECT_EQ(precision_run(*piped, 3), precision_run(*replicas, 3));
  }
}

// Each runner reports and sets its loss scale under fp16 (GradScaler's 65536 to start; a
// checkpoint's state taken by every replica) and has none under bf16, refusing one by name.
TEST(PipelinePrecision, OnlyFp16RunnersHaveALossScaleToReportAndSet) {
  ParallelOptions piped;
  piped.pipeline.stages = "0-3@cpu:0,4-10@cpu:1", piped.pipeline.micro_batches = 2;
  ParallelOptions hybrid = piped;
  hybrid.replicas = 2, hybrid.timeout_s = 60;
  for (const ParallelOptions& o : {ParallelOptions{}, piped, hybrid}) {
    auto fp16 = make_runner(precision_cnn(DType::Float16), dpcore::testing::kSgd, 1, o);
    SCOPED_TRACE(fp16->describe());
    ASSERT_TRUE(fp16->loss_scale().has_value());
    EXPECT_EQ(fp16->loss_scale()->scale, 65536.0f);
    fp16->set_loss_scale({1024.0f, 7});
    EXPECT_EQ(fp16->loss_scale()->scale, 1024.0f);
    EXPECT_EQ(fp16->loss_scale()->growth_tracker, 7);
    auto bf16 = make_runner(precision_cnn(DType::BFloat16), dpcore::testing::kSgd, 1, o);
    EXPECT_FALSE(bf16->loss_scale().has_value());
    EXPECT_NE(error_of([&] { bf16->set_loss_scale({1024.0f, 0}); }).find("this run has no loss scaler"),
              std::string::npos);
  }
}

TEST(PipelineThreads, AFailingStageEndsTheBatchAtOnceNamingItself) {
  Job j = make_job(kCnn, DType::Float32, 6);
  j.y = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 42}, {6});  // class 42 of 10: the loss refuses it
  const auto stages = parse_stages("0-4@cpu:0,5-10@cpu:1", 11, {2, 0});
  PipelineThreads threads(2, std::chrono::seconds(60));
  const auto began = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { threads.accumulate_gradients(*j.model, stages, Schedule::GPipe, 3, j.x, j.y, 1.0, {}); });
  EXPECT_EQ(error.rfind("pipeline stage 1 failed: ", 0), 0u) << error;
  EXPECT_NE(error.find("42"), std::string::npos) << error;
  // Stage 0 waited in recv for a gradient that never came: the abort released it, long
  // before the 60 s timeout.
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(20));
}

}  // namespace
}  // namespace dpcore::train::pipeline
