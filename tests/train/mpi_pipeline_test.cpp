// Pipeline stages as processes (train/pipeline/stage_process_runner.h), run under mpiexec with
// 2 and 4 processes: P stages x D replicas, a process each, train the parameters (and batch
// norm's running statistics, with --batchnorm local and sync) of the same pipeline in one
// process, bit for bit (a sum over at most two replicas has one order), on every rank after
// settle(); and one device's with --accum M within float32's 1e-6.
#include <gtest/gtest.h>

#include "comm/communicator.h"
#include "equivalence.h"
#include "train/pipeline/stage_process_runner.h"

namespace dpcore::train::pipeline {
namespace {

int world_size() { return comm::mpirun_launch() ? comm::mpirun_launch()->size : 1; }

// 8 layers: conv relu pool flatten linear relu linear logsoftmax.
std::unique_ptr<Model> plain_net() {
  auto net = layers::parse_layer_spec("conv(6,3,s2,p1) relu pool(2) flatten linear(16) relu linear(10)", {3, 32, 32});
  return std::make_unique<Model>(std::move(net), Shape{3, 32, 32}, Device::cpu(), DType::Float32, 5);
}

ParallelOptions stage_options(const std::string& backend, const std::string& stages, const std::string& schedule,
                              int micro_batches, int replicas, const std::string& split = "even",
                              const std::string& batchnorm = "local") {
  ParallelOptions o;
  o.backend = backend, o.replicas = replicas, o.timeout_s = 120, o.split = split, o.batchnorm = batchnorm;
  o.pipeline.stages = stages, o.pipeline.schedule = schedule, o.pipeline.micro_batches = micro_batches;
  return o;
}

std::vector<float> state_after(StepRunner& runner, int64_t n, int steps) {
  std::vector<float> out = testing::train_with(runner, n, steps);  // (settles)
  const std::vector<float> buffers = runner.model().buffers().values().to_vector<float>();
  out.insert(out.end(), buffers.begin(), buffers.end());
  return out;
}

struct Case {
  int stages;  // P; the replicas are the processes / P
  const char* text;
  const char* schedule;
  int micro_batches;
};

// The cases this many processes can run: P must divide the world.
std::vector<Case> cases_for(int world) {
  const std::vector<Case> all = {
      {2, "0-2@cpu:0,3-7@cpu:1", "1f1b", 3},
      {2, "0-4@cpu:0,5-7@cpu:1", "gpipe", 2},
      {4, "0-1@cpu:0,2-3@cpu:1,4@cpu:0,5-7@cpu:1", "1f1b", 4},
  };
  std::vector<Case> out;
  for (const Case& c : all)
    if (world % c.stages == 0) out.push_back(c);
  return out;
}

TEST(MpiPipeline, StageProcessesTrainTheInProcessPipelinesParameters) {
  const int world = world_size();
  // "": plain_net; otherwise batch_norm_net under that --batchnorm (with sync, a stage's
  // batch norms combine their statistics over its replicas' processes).
  for (const std::string batch_norm : {"", "local", "sync"}) {
    for (const Case& c : cases_for(world)) {
      const int replicas = world / c.stages;
      SCOPED_TRACE(std::string(c.text) + " " + c.schedule + " x " + std::to_string(replicas) + " replicas" +
                   (batch_norm.empty() ? "" : ", --batchnorm " + batch_norm));
      const std::string bn = batch_norm.empty() ? "local" : batch_norm;
      auto make = [&] { return batch_norm.empty() ? plain_net() : testing::batch_norm_net(); };
      // batch_norm_net has 8 layers too: conv bn relu res gap flatten linear logsoftmax.
      auto runner =
          make_runner(make(), testing::kSgd, 1, stage_options("mpi", c.text, c.schedule, c.micro_batches, 1, "even", bn));
      ASSERT_NE(dynamic_cast<StageProcessRunner*>(runner.get()), nullptr) << runner->describe();
      const std::vector<float> got = state_after(*runner, 14, 3);
      // The same pipeline in this process (threads, all on team cpu:0: mpiexec may have bound
      // the process to one core, and the bits do not depend on the cores), and one device.
      std::string one_team = c.text;
      for (size_t at = one_team.find("@cpu:"); at != std::string::npos; at = one_team.find("@cpu:", at + 1))
        one_team[at + 5] = '0';
      auto here = make_runner(make(), testing::kSgd, 1,
                              stage_options("local", one_team, c.schedule, c.micro_batches, replicas, "even", bn));
      EXPECT_EQ(got, state_after(*here, 14, 3)) << here->describe();
      if (batch_norm.empty()) {
        SingleDeviceRunner one(make(), testing::kSgd, c.micro_batches);
        EXPECT_LE(testing::relative_difference(got, state_after(one, 14, 3)), 1e-6);
      }
    }
  }
}

// --precision bf16 and fp16 (16-bit activations and gradients between the processes): the
// in-process pipeline's parameters, bit for bit. Under fp16, started at a loss scale of 2^20
// so that the first steps overflow float16, each process unscales its own stage's part and
// an Inf or NaN any of them found skips the step on all: the same skipped steps and scale
// as in one process.
TEST(MpiPipeline, StageProcessesUnderBf16AndFp16TrainTheInProcessPipelinesParameters) {
  const int world = world_size();
  if (world % 2 != 0) GTEST_SKIP() << "needs an even number of processes (2 stages); this run has " << world;
  // Stage 1 of the first split gets 16-bit activations. The second's stage 1 (the loss
  // alone) has no parameters: it finds no Inf of its own when the float32 gradient it sends
  // back overflows as stage 0 rounds it to float16, and skips because stage 0 found one.
  for (const char* split : {"0-2@cpu:$,3-7@cpu:$", "0-6@cpu:$,7@cpu:$"}) {
    for (DType half : {DType::BFloat16, DType::Float16}) {
      SCOPED_TRACE(std::string(split) + " " + dtype_name(half));
      auto run = [&](const std::string& backend, int second_team, int replicas) {
        std::string stages = split;
        stages[stages.find('$')] = '0';
        stages[stages.find('$')] = char('0' + second_team);
        auto model = plain_net();
        model->set_precision(half);
        auto runner = make_runner(std::move(model), testing::kSgd, 1, stage_options(backend, stages, "1f1b", 3, replicas));
        std::vector<float> out;
        if (runner->loss_scale()) runner->set_loss_scale({1048576.0f, 0});
        for (int s = 0; s < 4; ++s) {
          testing::HostBatch b = testing::make_batch(14, uint64_t(100 + s));
          runner->set_step_number(s + 1);
          const StepStats stats = runner->step(b.batch);
          out.push_back(float(stats.loss_sum.item()));
          out.push_back(stats.overflow);
          out.push_back(runner->loss_scale() ? runner->loss_scale()->scale : 0.0f);
        }
        runner->settle();
        const std::vector<float> params = runner->model().parameters().values().to_vector<float>();
        out.insert(out.end(), params.begin(), params.end());
        return out;
      };
      const std::vector<float> processes = run("mpi", 1, 1);
      EXPECT_EQ(processes, run("local", 0, world / 2));
      if (half == DType::Float16) EXPECT_EQ(processes[1], 1.0f) << "the first step did not overflow";
    }
  }
}

// Uneven shares over the stages' replicas (--split weights:3,1 with 2 replicas of 2 stages
// in 4 processes): the in-process hybrid's bits.
TEST(MpiPipeline, WeightedSharesOverTheReplicasTrainTheInProcessHybridsParameters) {
  const int world = world_size();
  if (world % 2 != 0 || world / 2 != 2) GTEST_SKIP() << "needs 4 processes (2 stages x 2 replicas); this run has " << world;
  auto runner = make_runner(plain_net(), testing::kSgd, 1, stage_options("mpi", "0-2@cpu:0,3-7@cpu:1", "1f1b", 2, 1, "weights:3,1"));
  auto here = make_runner(plain_net(), testing::kSgd, 1, stage_options("local", "0-2@cpu:0,3-7@cpu:0", "1f1b", 2, 2, "weights:3,1"));
  EXPECT_EQ(state_after(*runner, 14, 3), state_after(*here, 14, 3));
}

TEST(MpiPipeline, AWorldThatIsNotAMultipleOfTheStagesIsRefusedNamingIt) {
  const int world = world_size();
  const int P = world + 1;  // never divides the world (P <= 8 layers for the test's worlds)
  std::string stages;
  for (int s = 0; s < P; ++s) stages += (s ? "," : "") + std::to_string(s) + (s + 1 == P ? "-7" : "") + "@cpu:0";
  try {
    make_runner(plain_net(), testing::kSgd, 1, stage_options("mpi", stages, "gpipe", P, 1));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("over " + std::to_string(world) + " processes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("multiple of the " + std::to_string(P) + " stages"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dpcore::train::pipeline
