// CUDA graph capture: a captured sequence replays to the eager result (also after its
// input changes in place), the warm-up runs eagerly on the stream the capture then uses,
// allocations made while capturing come from the graph's private pool, and a body that
// synchronizes fails with a clear error.
#include <gtest/gtest.h>

#include <set>

#include "support/cuda_test_util.h"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/graph.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda_runtime/stream.h"

namespace dpcore::testing {
namespace {

constexpr int64_t kN = 100003;

// out = sum(2 * relu(x) + x), through a temporary taken from the allocator.
void small_sequence(const float* x, float* out) {
  cudaStream_t stream = kernels::cuda_runtime::current_stream(0);
  kernels::cuda_runtime::Workspace t(kN * sizeof(float), stream);
  kernels::cuda::relu_forward(kN, x, t.floats(), stream);
  kernels::cuda::scale(kN, 2.f, t.floats(), t.floats(), stream);
  kernels::cuda::axpy(kN, 1.f, x, t.floats(), stream);
  kernels::cuda::sum(kN, t.floats(), out, stream);
}

TEST(CudaGraph, ReplayGivesTheEagerResult) {
  SKIP_WITHOUT_CUDA();
  DeviceArray<float> x(random_floats(kN, 1)), out(1);
  small_sequence(x.get(), out.get());
  const std::vector<float> eager = out.download();

  kernels::cuda_runtime::CudaGraph graph(0);
  graph.capture([&] { small_sequence(x.get(), out.get()); });
  ASSERT_TRUE(graph.captured());
  out.poison();
  graph.replay();
  EXPECT_EQ(out.download(), eager);

  // New data copied into the same input: the replay reads it.
  x.upload(random_floats(kN, 2));
  small_sequence(x.get(), out.get());
  const std::vector<float> eager_new = out.download();
  ASSERT_NE(eager_new, eager);
  out.poison();
  graph.replay();
  EXPECT_EQ(out.download(), eager_new);
}

TEST(CudaGraph, WarmUpRunsEagerlyOnTheStreamTheCaptureUses) {
  SKIP_WITHOUT_CUDA();
  DeviceArray<float> x(random_floats(kN, 3)), out(1);
  small_sequence(x.get(), out.get());
  const std::vector<float> eager = out.download();

  kernels::cuda_runtime::CudaGraph graph(0);
  cudaStream_t warmed = nullptr, captured = nullptr;
  out.poison();
  graph.warm_up([&] {
    warmed = kernels::cuda_runtime::current_stream(0);
    small_sequence(x.get(), out.get());
  });
  EXPECT_NE(warmed, nullptr) << "the warm-up ran on the legacy default stream";
  EXPECT_EQ(kernels::cuda_runtime::current_stream(0), nullptr) << "the caller's stream was not restored";
  EXPECT_EQ(out.download(), eager) << "the warm-up did not run (or was not waited for)";

  graph.capture([&] {
    captured = kernels::cuda_runtime::current_stream(0);
    small_sequence(x.get(), out.get());
  });
  EXPECT_EQ(captured, warmed);
  out.poison();
  graph.replay();
  EXPECT_EQ(out.download(), eager);
  EXPECT_THROW(graph.warm_up([] {}), Error);
}

TEST(CudaGraph, CaptureAllocatesFromAPrivatePool) {
  SKIP_WITHOUT_CUDA();
  kernels::cuda_runtime::CachingAllocator& allocator = kernels::cuda_runtime::device_allocator(0);
  const size_t size = (11 << 20) + 5;  // a size no other test uses
  void* inside = nullptr;
  void* outside = nullptr;
  {
    kernels::cuda_runtime::CudaGraph graph(0);
    graph.capture([&] {
      kernels::cuda_runtime::Workspace w(size, kernels::cuda_runtime::current_stream(0));
      inside = w.data();
      kernels::cuda::fill<float>(int64_t(size / sizeof(float)), 1.f, w.floats(), kernels::cuda_runtime::current_stream(0));
    });
    // The pool's block is free again, but it belongs to the graph: nobody else gets it.
    outside = allocator.allocate(size, nullptr);
    EXPECT_NE(outside, inside);
    allocator.deallocate(outside, size);
  }
  // The graph is gone: its block joined the shared cache of the legacy stream.
  void* first = allocator.allocate(size, nullptr);
  void* second = allocator.allocate(size, nullptr);
  EXPECT_EQ((std::set<void*>{first, second}), (std::set<void*>{inside, outside}));
  allocator.deallocate(first, size);
  allocator.deallocate(second, size);
}

TEST(CudaGraph, SynchronizingInsideTheBodyFailsClearly) {
  SKIP_WITHOUT_CUDA();
  kernels::cuda_runtime::CudaGraph graph(0);
  try {
    graph.capture([] { CUDA_CHECK(cudaStreamSynchronize(kernels::cuda_runtime::current_stream(0))); });
    FAIL() << "expected the capture to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CudaGraph capture on cuda:0 failed"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(graph.captured());
  // The device is still usable afterwards.
  DeviceArray<float> y(4);
  kernels::cuda::fill<float>(4, 3.f, y.get(), nullptr);
  EXPECT_EQ(y.download(), std::vector<float>(4, 3.f));
}

TEST(CudaGraph, ReplayBeforeCaptureFails) {
  SKIP_WITHOUT_CUDA();
  kernels::cuda_runtime::CudaGraph graph(0);
  EXPECT_THROW(graph.replay(), Error);
}

}  // namespace
}  // namespace dpcore::testing
