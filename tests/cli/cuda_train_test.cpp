// `dpcore train --device cuda` as a user runs it, against the same run on the CPU: one
// device (CUDA graphs on, the default), four replicas over the local ring and over NCCL. Runs on a
// GPU and, in the host build (DPCORE_CUDA=HOST), on the 4 emulated devices of the host
// CUDA runtime; skips elsewhere. The engines are the command's defaults, which must exist
// in every build (the host build has no cuDNN or cuBLAS).
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "cli/cli_run.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

// The epoch line's train loss, test loss and test accuracy (%).
std::vector<double> epoch_results(const std::string& output) {
  static const std::regex line("epoch 1: train loss ([0-9.]+), test loss ([0-9.]+), test accuracy ([0-9.]+)%");
  std::smatch m;
  if (!std::regex_search(output, m, line)) return {};
  return {std::stod(m[1]), std::stod(m[2]), std::stod(m[3])};
}

// `cpu_flags` for the CPU run where they differ (NCCL has no CPU ranks: the local ring
// computes the same sums there).
void expect_cuda_matches_cpu(const std::string& flags, const std::string& cpu_flags = "") {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (a GPU, or the host build's emulated ones)";
  const CommandResult cpu = run(job() + " --epochs 1 --no-shuffle " + (cpu_flags.empty() ? flags : cpu_flags));
  const CommandResult cuda = run(job(kSpec, kData, "cuda") + " --epochs 1 --no-shuffle " + flags);
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

TEST(CudaTrain, OneDeviceWithCudaGraphsMatchesTheCpu) { expect_cuda_matches_cpu(""); }

TEST(CudaTrain, FourReplicasOverTheLocalRingMatchTheCpu) { expect_cuda_matches_cpu("--replicas 4 --backend local"); }

TEST(CudaTrain, FourReplicasOverNcclMatchTheCpu) {
  expect_cuda_matches_cpu("--replicas 4 --backend nccl", "--replicas 4 --backend local");
}

// A replica that hangs on the NCCL path: its peer's collective waits on the device, and the
// communicator's timeout must end the job with an error naming the timeout, not leave it
// waiting (the faults path once waited for the whole device, the collective included).
TEST(CudaTrain, AReplicaThatHangsOverNcclEndsTheJobAfterTheReplicaTimeout) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (a GPU, or the host build's emulated ones)";
  const CommandResult r =
      run_command(job(kSpec, kData, "cuda") + " --steps 6 --replicas 2 --backend nccl --inject hang:replica=1,step=3 "
                  "--replica-timeout 2", within_seconds(120, ""));
  EXPECT_NE(r.status, kTimedOut) << "the job hung:\n" << r.output;
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--replica-timeout"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dpcore::testing
