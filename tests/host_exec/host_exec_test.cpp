// The host execution layer itself (host_exec.h): kernels written here in CUDA C++, run on
// CPU threads. Barriers and shuffles must behave as on a GPU, and every way a block can
// leave threads waiting must end the launch with an error naming the kernel, the block and
// the thread, never a hang.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_runtime/check.h"
#include "host_exec/runtime_test_util.h"

namespace {

using host_runtime_test::failure_of;

using dpcore::kernels::cuda::launch;

// Launches on the legacy stream and waits for the kernel: a launch is asynchronous, and a
// kernel that fails leaves its error on the device, which the wait reports.
template <class... Params, class... Args>
void run(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
  launch(name, kernel, grid, block, nullptr, std::forward<Args>(args)...);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// Every thread writes its linear index into shared memory, waits at the barrier, then reads
// its neighbour's: wrong unless the barrier really holds every thread until all have written.
__global__ void rotate_through_shared(int* out) {
  __shared__ int slots[256];
  const int t = int(threadIdx.x);
  slots[t] = t + int(blockIdx.x) * 1000;
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = slots[(t + 1) % blockDim.x];
}

TEST(HostExec, BarrierOrdersSharedMemoryWithinEachBlock) {
  const int blocks = 3, threads = 256;
  std::vector<int> out(blocks * threads, -1);
  run("rotate_through_shared", rotate_through_shared, blocks, threads, out.data());
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) ASSERT_EQ(out[b * threads + t], (t + 1) % threads + b * 1000) << b << "," << t;
}

// A butterfly sum over each warp: every lane must end with the warp's total.
__global__ void warp_totals(const float* x, float* out) {
  float v = x[threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

TEST(HostExec, XorShuffleExchangesAmongTheLanesOfEachWarp) {
  std::vector<float> x(64), out(64, -1.f);
  for (int i = 0; i < 64; ++i) x[i] = float(i);
  run("warp_totals", warp_totals, 1, 64, x.data(), out.data());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], i < 32 ? 496.f : 1520.f) << i;  // 0+..+31, 32+..+63
}

__global__ void shuffle_variants(int* out) {
  const int lane = int(threadIdx.x);
  out[lane] = __shfl_down_sync(0xffffffffu, lane, 3);
  out[32 + lane] = __shfl_up_sync(0xffffffffu, lane, 5);
  out[64 + lane] = __shfl_sync(0xffffffffu, lane * 10, 7);
  out[96 + lane] = __shfl_xor_sync(0xffffffffu, lane, 1, 8);  // segments of 8 lanes
}

TEST(HostExec, ShuffleVariantsFollowCudaSemantics) {
  std::vector<int> out(128, -1);
  run("shuffle_variants", shuffle_variants, 1, 32, out.data());
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(out[lane], lane + 3 < 32 ? lane + 3 : lane) << "down, lane " << lane;
    EXPECT_EQ(out[32 + lane], lane >= 5 ? lane - 5 : lane) << "up, lane " << lane;
    EXPECT_EQ(out[64 + lane], 70) << "idx, lane " << lane;
    EXPECT_EQ(out[96 + lane], lane ^ 1) << "xor in segments, lane " << lane;
  }
}

// Thread 5 of block 1 leaves before the barrier the others wait at.
__global__ void early_exit_before_barrier(int* out) {
  if (blockIdx.x == 1 && threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(HostExec, ThreadThatExitsWhileOthersWaitAtABarrierIsAnError) {
  std::vector<int> out(64);
  const std::string error = failure_of(
      [&] { run("early_exit_before_barrier", early_exit_before_barrier, 2, 64, out.data()); });
  EXPECT_CONTAINS(error, "host kernel early_exit_before_barrier: block (1,0,0) thread (5,0,0)");
  EXPECT_CONTAINS(error, "exited while 63 threads of the block wait at __syncthreads()");
}

// Lane 31 of the first warp exits; the others then shuffle with a mask that names it.
__global__ void shuffle_with_exited_lane(float* out) {
  if (threadIdx.x == 31) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}

TEST(HostExec, ShuffleNamingAnExitedLaneIsAnError) {
  std::vector<float> out(32);
  const std::string error =
      failure_of([&] { run("shuffle_with_exited_lane", shuffle_with_exited_lane, 1, 32, out.data()); });
  EXPECT_CONTAINS(error, "host kernel shuffle_with_exited_lane: block (0,0,0)");
  EXPECT_CONTAINS(error, "__shfl_xor_sync");
  // Depending on who gets there first: lane 31 exits while the others wait for it, or the
  // others arrive after it has exited.
  EXPECT_TRUE(error.find("thread (31,0,0): exited while lanes") != std::string::npos ||
              error.find("names lane 31, which has exited") != std::string::npos)
      << error;
}

// Warp 0 goes straight to the barrier; warp 1 shuffles first, then joins it.
__global__ void barrier_against_shuffle(float* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
    __syncthreads();
  }
}

TEST(HostExec, BarrierReachedFromDifferentBranchesOpensForAll) {
  // Warp 1 shuffles and then meets warp 0 at the barrier: every thread arrives, so it opens
  // (as on Volta and later, where the barrier counts threads, not code locations).
  std::vector<float> out(64);
  run("barrier_against_shuffle", barrier_against_shuffle, 1, 64, out.data());
  EXPECT_EQ(out[40], 1.f);
}

__global__ void mismatched_barriers() {
  __syncthreads();
  if (threadIdx.x % 32 == 0) __syncthreads();  // only some threads reach the second barrier
}

TEST(HostExec, DivergentBarrierIsReportedNotAHang) {
  const std::string error = failure_of([&] { run("mismatched_barriers", mismatched_barriers, 1, 64); });
  EXPECT_CONTAINS(error, "host kernel mismatched_barriers: block (0,0,0)");
  EXPECT_CONTAINS(error, "wait at __syncthreads()");
}

__global__ void shuffle_waits_for_a_barrier(float* out) {
  if (threadIdx.x == 0) __syncthreads();
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}

TEST(HostExec, ShuffleAgainstBarrierIsADeadlock) {
  std::vector<float> out(32);
  const std::string error = failure_of(
      [&] { run("shuffle_waits_for_a_barrier", shuffle_waits_for_a_barrier, 1, 32, out.data()); });
  EXPECT_CONTAINS(error, "host kernel shuffle_waits_for_a_barrier");
  EXPECT_CONTAINS(error, "deadlock: 1 threads wait at __syncthreads(), 31 in a warp shuffle");
}

__global__ void empty_kernel() {}

TEST(HostExec, InvalidConfigurationIsAnErrorNamingTheKernel) {
  EXPECT_CONTAINS(failure_of([] { run("empty_kernel", empty_kernel, 1, 1025); }),
                  "host kernel empty_kernel: invalid configuration argument: block (1025,1,1)");
  EXPECT_CONTAINS(failure_of([] { run("empty_kernel", empty_kernel, dim3(1, 70000), 32); }),
                  "host kernel empty_kernel: invalid configuration argument: grid (1,70000,1)");
}

// Grid and block indices in all three dimensions, and each thread's own argument copy.
__global__ void record_indices(int base, int* out) {
  const int block = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  const int thread = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  base += thread;  // a per-thread copy: other threads must not see this
  out[block * 24 + thread] = base;
}

TEST(HostExec, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  const dim3 grid(2, 3, 2), block(4, 3, 2);
  std::vector<int> out(12 * 24, -1);
  run("record_indices", record_indices, grid, block, 100, out.data());
  for (int b = 0; b < 12; ++b)
    for (int t = 0; t < 24; ++t) ASSERT_EQ(out[b * 24 + t], 100 + t) << b << "," << t;
}

// ---- What only the sanitizer builds see (scripts/test.sh builds both). Each is a death
// test: the sanitizer ends the process with its report, which must name the kernel. The
// child process is started afresh ("threadsafe" style) rather than forked: a fork would
// inherit the fibers' sanitizer state half-copied. ----
struct HostExecSanitizers : ::testing::Test {
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// The last thread reads one element past the end of x.
__global__ void read_one_past_the_end(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x + 1]; }

TEST_F(HostExecSanitizers, AddressSanitizerReportsAnOutOfBoundsReadInAKernel) {
#ifndef DPCORE_SANITIZE_ADDRESS
  GTEST_SKIP() << "needs the AddressSanitizer build (scripts/test.sh: build-asan)";
#else
  std::vector<float> x(64, 1.f), y(64);
  EXPECT_DEATH(run("read_one_past_the_end", read_one_past_the_end, 1, 64, x.data(), y.data()),
               "heap-buffer-overflow(.|\n)*read_one_past_the_end(.|\n)*"
               "host kernel read_one_past_the_end: block \\(0,0,0\\) thread \\(63,0,0\\) was running");
#endif
}

// A float4 load from an address 4 bytes past a 16-byte boundary: a misaligned-address
// fault on the GPU.
__global__ void misaligned_vector_load(const float* x, float* y) {
  const float4 v = *reinterpret_cast<const float4*>(x + 1);
  y[threadIdx.x] = v.x;
}

TEST_F(HostExecSanitizers, UndefinedBehaviorSanitizerReportsAMisalignedVectorLoad) {
#ifndef DPCORE_SANITIZE_UNDEFINED
  GTEST_SKIP() << "needs the UndefinedBehaviorSanitizer build (scripts/test.sh: build-asan)";
#else
  alignas(16) float x[8] = {};
  std::vector<float> y(32);
  setenv("UBSAN_OPTIONS", "print_stacktrace=1", 1);  // the child's report then names the kernel
  EXPECT_DEATH(run("misaligned_vector_load", misaligned_vector_load, 1, 32, x, y.data()),
               "misaligned address(.|\n)*float4(.|\n)*#0 .*misaligned_vector_load");
#endif
}

// Thread 0 writes a shared word that the others read with no barrier in between: the race
// compute-sanitizer's racecheck reports on a GPU.
__global__ void shared_read_before_barrier(float* out) {
  __shared__ float value;
  if (threadIdx.x == 0) value = 2.f;
  out[threadIdx.x] = value;  // a __syncthreads() is missing before this read
}

TEST_F(HostExecSanitizers, ThreadSanitizerReportsASharedMemoryRaceBetweenBarriers) {
#ifndef DPCORE_SANITIZE_THREAD
  GTEST_SKIP() << "needs the ThreadSanitizer build (scripts/test.sh: build-tsan)";
#else
  std::vector<float> out(64);
  setenv("TSAN_OPTIONS", "halt_on_error=1", 1);  // the child stops at the first report
  EXPECT_DEATH(run("shared_read_before_barrier", shared_read_before_barrier, 1, 64, out.data()),
               "data race(.|\n)*shared_read_before_barrier(.|\n)*"
               "host kernel shared_read_before_barrier: block \\(0,0,0\\) thread \\(1,0,0\\) was running");
#endif
}

}  // namespace
