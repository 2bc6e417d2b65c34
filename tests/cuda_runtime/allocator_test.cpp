// The caching device allocator (no cudaMalloc in steady state, statistics, per-stream
// reuse), a whole training step through the engine making no cudaMalloc the second time,
// and the pinned host allocator.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "support/cuda_test_util.h"
#include "engine/ops.h"
#include "engine/runtime.h"
#include "engine/tensor.h"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/pinned.h"
#include "kernels/cuda_runtime/stream.h"

namespace dpcore::testing {
namespace {

using kernels::cuda_runtime::CachingAllocator;

// The sizes one "step" asks for, small and large, freed in a different order.
void allocation_step(CachingAllocator& allocator) {
  const size_t sizes[] = {100, 4096, 3 << 20, 1 << 20, 777, 64 << 20, 100};
  std::vector<void*> blocks;
  for (size_t size : sizes) blocks.push_back(allocator.allocate(size));
  for (size_t i = 0; i < blocks.size(); i += 2) allocator.deallocate(blocks[i], sizes[i]);
  for (size_t i = 1; i < blocks.size(); i += 2) allocator.deallocate(blocks[i], sizes[i]);
}

TEST(CachingAllocator, SecondIdenticalStepMakesNoCudaMalloc) {
  SKIP_WITHOUT_CUDA();
  CachingAllocator& allocator = kernels::cuda_runtime::device_allocator(0);
  allocation_step(allocator);
  const int64_t mallocs = allocator.cuda_malloc_calls();
  allocation_step(allocator);
  EXPECT_EQ(allocator.cuda_malloc_calls(), mallocs);
}

TEST(CachingAllocator, TracksBytesInUseAndPeakInRoundedBlocks) {
  SKIP_WITHOUT_CUDA();
  CachingAllocator& allocator = kernels::cuda_runtime::device_allocator(0);
  const size_t base = allocator.bytes_in_use();
  allocator.reset_peak();
  void* small = allocator.allocate(1000);      // rounds to 1024
  void* large = allocator.allocate(5 << 20);   // rounds to 6 MiB
  EXPECT_EQ(allocator.bytes_in_use(), base + 1024 + (6 << 20));
  allocator.deallocate(large, 5 << 20);
  EXPECT_EQ(allocator.bytes_in_use(), base + 1024);
  EXPECT_EQ(allocator.peak_bytes(), base + 1024 + (6 << 20));
  allocator.deallocate(small, 1000);
  EXPECT_EQ(allocator.bytes_in_use(), base);
}

TEST(CachingAllocator, FreedBlockIsReusedOnItsOwnStreamOnly) {
  SKIP_WITHOUT_CUDA();
  CachingAllocator& allocator = kernels::cuda_runtime::device_allocator(0);
  cudaStream_t side = kernels::cuda_runtime::side_stream(0, 0);
  const size_t size = (7 << 20) + 3;  // a size no other test uses
  void* on_legacy = allocator.allocate(size, nullptr);
  allocator.deallocate(on_legacy, size);
  void* on_side = allocator.allocate(size, side);
  EXPECT_NE(on_side, on_legacy) << "a block freed on one stream went to another stream";
  void* again = allocator.allocate(size, nullptr);
  EXPECT_EQ(again, on_legacy);
  allocator.deallocate(on_side, size);
  allocator.deallocate(again, size);
}

TEST(CachingAllocator, ReleaseCachedReturnsMemoryToTheDriver) {
  SKIP_WITHOUT_CUDA();
  CachingAllocator& allocator = kernels::cuda_runtime::device_allocator(0);
  void* block = allocator.allocate(4 << 20);
  allocator.deallocate(block, 4 << 20);
  EXPECT_GT(allocator.bytes_cached(), 0u);
  allocator.release_cached();
  EXPECT_EQ(allocator.bytes_cached(), 0u);
}

TEST(CachingAllocator, FreeingAForeignPointerFailsClearly) {
  SKIP_WITHOUT_CUDA();
  int not_device_memory = 0;
  EXPECT_THROW(kernels::cuda_runtime::device_allocator(0).deallocate(&not_device_memory, 4), Error);
}

// One small training step through the engine's ops: conv, relu, pool, linear, the fused
// loss, backward. Once a step has run with the gradients already there (the first one
// makes them, later ones accumulate into them, so the first two differ in what they
// allocate and in which cached block best fits), the next identical step must be served
// entirely from the cache.
TEST(CachingAllocator, SecondTrainingStepMakesNoCudaMalloc) {
  SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor x = Tensor::from_vector(random_floats(8 * 3 * 16 * 16, 1), {8, 3, 16, 16}, gpu);
  Tensor w = Tensor::from_vector(random_floats(16 * 3 * 3 * 3, 2), {16, 3, 3, 3}, gpu).set_requires_grad(true);
  Tensor b = Tensor::from_vector(random_floats(16, 3), {16}, gpu).set_requires_grad(true);
  Tensor fw = Tensor::from_vector(random_floats(10 * 16 * 8 * 8, 4), {10, 16 * 8 * 8}, gpu).set_requires_grad(true);
  Tensor target = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}, {8}, gpu);
  auto step = [&] {
    Tensor h = ops::max_pool2d(ops::relu(ops::conv2d(x, w, b, ops::Conv2dOptions{1, 1, 1, 1})), ops::Pool2dOptions{});
    Tensor loss = ops::cross_entropy(ops::linear(ops::flatten(h), fw, Tensor()), target);
    loss.backward();
    runtime::synchronize(gpu);
  };
  CachingAllocator& allocator = kernels::cuda_runtime::device_allocator(0);
  step();
  step();
  const int64_t mallocs = allocator.cuda_malloc_calls();
  step();
  EXPECT_EQ(allocator.cuda_malloc_calls(), mallocs);
}

TEST(PinnedAllocator, ReusesFreedBuffersAndKnowsItsMemory) {
  SKIP_WITHOUT_CUDA();
  char* buffer = static_cast<char*>(kernels::cuda_runtime::pinned_alloc(100000));
  EXPECT_TRUE(kernels::cuda_runtime::is_pinned(buffer));
  EXPECT_TRUE(kernels::cuda_runtime::is_pinned(buffer + 99999));
  int on_stack = 0;
  EXPECT_FALSE(kernels::cuda_runtime::is_pinned(&on_stack));
  kernels::cuda_runtime::pinned_free(buffer);
  EXPECT_FALSE(kernels::cuda_runtime::is_pinned(buffer));
  void* again = kernels::cuda_runtime::pinned_alloc(100000);
  EXPECT_EQ(again, buffer);
  kernels::cuda_runtime::pinned_free(again);
}

TEST(PinnedAllocator, FreeingAForeignPointerFailsClearly) {
  SKIP_WITHOUT_CUDA();
  int on_stack = 0;
  EXPECT_THROW(kernels::cuda_runtime::pinned_free(&on_stack), Error);
}

}  // namespace
}  // namespace dpcore::testing
