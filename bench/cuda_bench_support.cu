#include "bench/cuda_bench_support.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda_libraries/engine_config.h"
#include "kernels/cuda_runtime/check.h"

namespace dpcore::bench {

namespace cuda_libraries = kernels::cuda_libraries;

namespace {

// Values in [-1, 1) from a hash of the index: filling on the device keeps the setup of
// the 64M-element buffers fast.
__global__ void fill_pseudo_random(float* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u;
    h ^= h >> 16;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = float(h >> 8) / float(1 << 23) - 1.f;
  }
}

// Milliseconds between two events recorded around `work` on the default stream.
float time_once(cudaEvent_t start, cudaEvent_t stop, const std::function<void()>& work) {
  CUDA_CHECK(cudaEventRecord(start, nullptr));
  work();
  CUDA_CHECK(cudaEventRecord(stop, nullptr));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms;
}

}  // namespace

Buffer::Buffer(size_t floats) {
  CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(floats, 1) * sizeof(float)));
  fill_pseudo_random<<<1024, 256>>>(f(), floats);
  CUDA_LAUNCH_CHECK();
}

Buffer::~Buffer() { cudaFree(ptr_); }

void flush_l2() {
  static void* junk = nullptr;
  static size_t bytes = 0;
  if (!junk) {
    int l2 = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    bytes = size_t(2) * size_t(l2);
    CUDA_CHECK(cudaMalloc(&junk, bytes));
  }
  CUDA_CHECK(cudaMemsetAsync(junk, 0, bytes, nullptr));
}

void run_timed(benchmark::State& state, const Work& work, const std::function<void()>& launch, bool tf32,
               bool measure_copy) {
  cuda_libraries::EngineConfig config;
  config.tf32 = tf32;
  cuda_libraries::set_engine_config(config);
  const size_t copy_bytes = measure_copy ? size_t(work.bytes / 2) : 0;
  void *copy_src = nullptr, *copy_dst = nullptr;
  if (measure_copy) {
    CUDA_CHECK(cudaMalloc(&copy_src, std::max<size_t>(copy_bytes, 1)));
    CUDA_CHECK(cudaMalloc(&copy_dst, std::max<size_t>(copy_bytes, 1)));
  }
  const auto copy = [&] {
    CUDA_CHECK(cudaMemcpyAsync(copy_dst, copy_src, copy_bytes, cudaMemcpyDeviceToDevice, nullptr));
  };
  launch();
  if (measure_copy) copy();
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  double seconds = 0.0, copy_seconds = 0.0;
  for (auto _ : state) {
    flush_l2();
    const float ms = time_once(start, stop, launch);
    state.SetIterationTime(ms * 1e-3);
    seconds += ms * 1e-3;
    if (measure_copy) {
      flush_l2();
      copy_seconds += time_once(start, stop, copy) * 1e-3;
    }
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  cudaFree(copy_src);
  cudaFree(copy_dst);
  cuda_libraries::set_engine_config(cuda_libraries::EngineConfig{});
  const double runs = std::max(double(state.iterations()), 1.0);
  const double mean = seconds / runs;
  if (work.flops > 0) {
    state.counters["TFLOP/s"] = work.flops / mean / 1e12;
    state.counters["frac_fp32_ceiling"] = work.flops / mean / kFp32CeilingFlopsPerSecond;
  }
  state.counters["GB/s"] = work.bytes / mean / 1e9;
  if (measure_copy) {
    state.counters["copy_GB/s"] = 2.0 * copy_bytes * runs / copy_seconds / 1e9;
    state.counters["frac_copy_bw"] = copy_seconds / seconds;
  } else {
    state.counters["frac_copy_bw"] = work.bytes / mean / kCopyCeilingBytesPerSecond;
  }
}

void add(const std::string& name, std::function<void(benchmark::State&)> body) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(body))
      ->UseManualTime()
      ->Iterations(kRepeats)
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace dpcore::bench
