// `dpcore train --device cuda` as a user runs it, against the same run on the CPU: one
// device (CUDA graphs on, the default), four replicas over the local ring and over NCCL,
// batch norm synchronised over NCCL, a run that shrinks past a failed replica, a pipeline
// on two GPUs against one with --accum; a trace's
// stream lanes; a hang on the NCCL path. Runs on a GPU and, in the host build
// (DPCORE_CUDA=HOST), on the 4 emulated devices of the host CUDA runtime; skips elsewhere.
// The engines are the command's defaults, which must exist in every build (the host build
// has no cuDNN or cuBLAS).
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "cli/cli_run.h"
#include "engine/runtime.h"
#include "cli/same_maths.h"
#include "support/trace_checks.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

// Why every test here skips on a machine without one.
constexpr char kNoCudaDevice[] = "no CUDA device (a GPU, or the host build's emulated ones)";

// The epoch line's train loss, test loss and test accuracy (%).
std::vector<double> epoch_results(const std::string& output) {
  static const std::regex line("epoch 1: train loss ([0-9.]+), test loss ([0-9.]+), test accuracy ([0-9.]+)%");
  std::smatch m;
  if (!std::regex_search(output, m, line)) return {};
  return {std::stod(m[1]), std::stod(m[2]), std::stod(m[3])};
}

// `cpu_flags` for the CPU run where they differ (NCCL has no CPU ranks: the local ring
// computes the same sums there).
void expect_cuda_matches_cpu(const std::string& flags, const std::string& cpu_flags = "",
                             const std::string& model = kSpec) {
  if (!cuda_available()) GTEST_SKIP() << kNoCudaDevice;
  const CommandResult cpu =
      run(job(model) + " --epochs 1 --no-shuffle " + (cpu_flags.empty() ? flags : cpu_flags));
  const CommandResult cuda = run(job(model, kData, "cuda") + " --epochs 1 --no-shuffle " + flags);
  ASSERT_EQ(cpu.status, 0) << cpu.output;
  ASSERT_EQ(cuda.status, 0) << cuda.output;
  const std::vector<double> want = epoch_results(cpu.output), got = epoch_results(cuda.output);
  ASSERT_EQ(want.size(), 3u) << cpu.output;
  ASSERT_EQ(got.size(), 3u) << cuda.output;
  // The losses are printed to 4 decimals: FP32 kernels that agree to 1e-5 of their scale
  // over 13 steps stay within one unit of the last place, and a rounding boundary between
  // the two may flip one more. The accuracy is a count of 200 test samples, which the
  // same logits to that precision classify alike.
  EXPECT_NEAR(got[0], want[0], 2e-4) << "train loss";
  EXPECT_NEAR(got[1], want[1], 2e-4) << "test loss";
  EXPECT_EQ(got[2], want[2]) << "test accuracy";
}

// 6 steps of `flags` on the CPU (with `cpu_flags` there, when given) and on CUDA end with the
// same weights and buffers, to the FP32 kernels' 1e-5 of their scale over 6 steps; the
// CUDA run's output.
std::string expect_cuda_weights_match_cpu(const std::string& flags, const std::string& cpu_flags = "",
                                          const std::string& model = kSpec) {
  TempDir dir;
  const std::string steps = " --steps 6 --save ";
  const CommandResult cpu = run(job(model) + " " + (cpu_flags.empty() ? flags : cpu_flags) + steps + dir.file("cpu.st"));
  const CommandResult cuda = run(job(model, kData, "cuda") + " " + flags + steps + dir.file("cuda.st"));
  EXPECT_EQ(cpu.status, 0) << cpu.output;
  EXPECT_EQ(cuda.status, 0) << cuda.output;
  if (cpu.status == 0 && cuda.status == 0) expect_same_maths(dir.file("cpu.st"), dir.file("cuda.st"), 1e-4);
  return cuda.output;
}

TEST(CudaTrain, OneDeviceWithCudaGraphsMatchesTheCpu) { expect_cuda_matches_cpu(""); }

// --precision bf16 (a CUDA graph recording the casts and the refresh of the 16-bit copy
// with the step) and fp16 (the loss scaler, eagerly) on CUDA's 16-bit kernels against the
// same runs on the CPU's. The two sum in other orders, and a sum on the other side of a
// 16-bit rounding boundary moves one value by a 16-bit ulp (2^-8 of it in bfloat16), so
// the weights after 6 steps agree to 2^-8 of their scale, not to float32's 1e-5.
TEST(CudaTrain, SixteenBitPrecisionsMatchTheCpusOnOneDevice) {
  if (!cuda_available()) GTEST_SKIP() << kNoCudaDevice;
  for (const std::string precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    TempDir dir;
    const std::string steps = " --precision " + precision + " --steps 6 --save ";
    const CommandResult cpu = run(job() + steps + dir.file("cpu.st"));
    const CommandResult cuda = run(job(kSpec, kData, "cuda") + steps + dir.file("cuda.st"));
    ASSERT_EQ(cpu.status, 0) << cpu.output;
    ASSERT_EQ(cuda.status, 0) << cuda.output;
    EXPECT_NE(cuda.output.find("precision " + precision), std::string::npos) << cuda.output;
    expect_same_maths(dir.file("cpu.st"), dir.file("cuda.st"), 1.0 / 256);
  }
}

// --grad-dtype bf16 on CUDA replicas: the local ring sums the bfloat16 buckets with the
// CUDA 16-bit add, and with 2 replicas each element is one 16-bit sum whatever the
// buckets, so dp and ddp give the same bits; against the CPU's run, to a bfloat16 ulp.
TEST(CudaTrain, Bf16GradientAllreduceOnTwoReplicas) {
  if (!cuda_available()) GTEST_SKIP() << kNoCudaDevice;
  TempDir dir;
  const std::string two = " --replicas 2 --grad-dtype bf16 --steps 6 --save ";
  const CommandResult cpu = run(job() + two + dir.file("cpu.st"));
  ASSERT_EQ(cpu.status, 0) << cpu.output;
  for (const std::string mode : {"dp", "ddp"}) {
    const CommandResult cuda = run(job(kSpec, kData, "cuda") + " --mode " + mode + two + dir.file(mode + ".st"));
    ASSERT_EQ(cuda.status, 0) << cuda.output;
  }
  EXPECT_EQ(slurp(dir.file("dp.st")), slurp(dir.file("ddp.st")));
  expect_same_maths(dir.file("cpu.st"), dir.file("ddp.st"), 1.0 / 256);
}

// Four replicas compared by their weights after 6 steps rather than by a whole epoch's
// losses: the same sums, in a third of the time on the emulated devices under ThreadSanitizer
// (about 17 s each instead of 55). The one-device run above is the one that also checks the
// evaluation and the epoch line.
TEST(CudaTrain, FourReplicasOverTheLocalRingMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << kNoCudaDevice;
  expect_cuda_weights_match_cpu("--replicas 4 --backend local");
}

TEST(CudaTrain, FourReplicasOverNcclMatchTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << kNoCudaDevice;
  expect_cuda_weights_match_cpu("--replicas 4 --backend nccl", "--replicas 4 --backend local");
}

// --stages on two GPUs as a user runs it: the epoch line (the loss added up on the model's
// GPU, where it failed when it came back from the last stage's) and the saved weights,
// those of one GPU with --accum 2 byte for byte (docs/pipelines.md, "Stages on GPUs").
TEST(CudaTrain, APipelineOnTwoGpusSavesOneGpusWeightsWithAccum) {
  if (runtime::cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices (GPUs, or the host build's emulated ones)";
  TempDir dir;
  const std::string steps = " --steps 6 --save ";
  const std::string stages = " --stages 0-2@cuda:0,3-5@cuda:1 --schedule 1f1b --micro-batches 2";
  const CommandResult piped = run(job(kSpec, kData, "cuda") + stages + steps + dir.file("piped.st"));
  const CommandResult one = run(job(kSpec, kData, "cuda") + " --accum 2" + steps + dir.file("one.st"));
  ASSERT_EQ(piped.status, 0) << piped.output;
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_NE(piped.output.find("pipeline (1f1b) of 2 stages [0-2@cuda:0,3-5@cuda:1]"), std::string::npos) << piped.output;
  EXPECT_NE(piped.output.find("epoch 1: train loss"), std::string::npos) << piped.output;
  EXPECT_EQ(slurp(dir.file("piped.st")), slurp(dir.file("one.st")));
}

// Batch norm over the whole batch of four replicas: the statistics are allreduced over NCCL
// in the forward and backward passes of every step (the running statistics are compared too).
TEST(CudaTrain, SyncBatchNormOverNcclMatchesTheCpu) {
  if (!cuda_available()) GTEST_SKIP() << kNoCudaDevice;
  expect_cuda_weights_match_cpu("--replicas 4 --backend nccl --batchnorm sync",
                                "--replicas 4 --backend local --batchnorm sync",
                                "\"conv(4,3,p1,nobias) bn relu pool(2) flatten linear(4)\"");
}

// --trace of a 2-replica NCCL run: each replica's forward spans appear a second time on a
// lane of its GPU's stream ("cuda:1 stream 1 (replica 1)"), one per host span, at times the
// device ran them, which are never before the host queued them.
TEST(CudaTrain, ATraceHasALaneForEachReplicasStream) {
  if (!cuda_available()) GTEST_SKIP() << kNoCudaDevice;
  TempDir dir;
  const std::string path = dir.file("t.json");
  const CommandResult r =
      run(job(kSpec, kData, "cuda") + " --steps 4 --replicas 2 --backend nccl --trace " + path + " --trace-steps 2");
  ASSERT_EQ(r.status, 0) << r.output;
  const TraceFile t = read_trace(path);
  for (int r = 0; r < 2; ++r) {
    expect_device_lane_mirrors(t, "replica " + std::to_string(r), "cuda:" + std::to_string(r) + " stream ", "forward");
  }
}

// --on-replica-failure shrink on the GPUs: replica 2 of 4 throws at step 3 of 6, the run goes
// on over the local ring on the other three devices and ends with the weights the CPU's
// run of the same failure ends with.
TEST(CudaTrain, AShrunkRunEndsWithTheCpusWeights) {
  if (!cuda_available()) GTEST_SKIP() << kNoCudaDevice;
  const std::string output = expect_cuda_weights_match_cpu(
      "--replicas 4 --backend local --inject throw:replica=2,step=3 --on-replica-failure shrink");
  EXPECT_NE(output.find("replica 2 failed at step 3"), std::string::npos) << output;
  EXPECT_NE(output.find("on 3 replicas"), std::string::npos) << output;
}

// A replica that hangs on the NCCL path: its peer's collective waits on the device, and the
// communicator's timeout must end the job with an error naming the timeout, not leave it
// waiting (the faults path once waited for the whole device, the collective included).
TEST(CudaTrain, AReplicaThatHangsOverNcclEndsTheJobAfterTheReplicaTimeout) {
  if (!cuda_available()) GTEST_SKIP() << kNoCudaDevice;
  const CommandResult r =
      run_command(job(kSpec, kData, "cuda") + " --steps 6 --replicas 2 --backend nccl --inject hang:replica=1,step=3 "
                  "--replica-timeout 2", within_seconds(120, ""));
  EXPECT_NE(r.status, kTimedOut) << "the job hung:\n" << r.output;
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--replica-timeout"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dpcore::testing
