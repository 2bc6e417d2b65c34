// What the CUDA kernel benchmarks (cuda_kernels_bench.cu, cuda_transformer_bench.cu)
// share: device buffers, the L2 flush, and the timing of one launch with its counters.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <functional>
#include <string>

namespace dpcore::bench {

// The H200 ceilings measured with PyTorch: device copy 4.25 TB/s, cuBLAS FP32 SGEMM 51 TFLOP/s.
constexpr double kCopyCeilingBytesPerSecond = 4.25e12;
constexpr double kFp32CeilingFlopsPerSecond = 51e12;

// Each benchmark runs this many timed launches (their mean is reported): enough for a
// stable mean, few enough that the whole suite fits in a short session on the GPU.
constexpr int kRepeats = 20;

// Device memory for a benchmark, pseudo-random in [-1, 1) (from a hash of the index,
// filled on the device), freed at the end of its scope.
class Buffer {
 public:
  explicit Buffer(size_t floats);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* f() const { return static_cast<float*>(ptr_); }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// Overwrites twice the L2, which evicts every input of the previous run.
void flush_l2();

struct Work {
  double flops;  // 2 per multiply-add; 0 for data movement kernels
  double bytes;  // minimal traffic
};

// Times `launch` once per benchmark iteration (manual time), after one untimed launch,
// with the L2 flushed before each, and sets the counters: TFLOP/s and frac_fp32_ceiling
// (when there are flops), GB/s and frac_copy_bw. frac_copy_bw is against the copy ceiling
// above, or, with measure_copy, against a device-to-device cudaMemcpyAsync of work.bytes
// (half read, half written) timed the same way in the same iterations (copy_GB/s).
void run_timed(benchmark::State& state, const Work& work, const std::function<void()>& launch, bool tf32 = false,
               bool measure_copy = false);

// Registers `body` as a manual-time benchmark of kRepeats iterations, in microseconds.
void add(const std::string& name, std::function<void(benchmark::State&)> body);

// Issue 24's kernels on BERT's shapes (cuda_transformer_bench.cu).
void register_transformer_kernels();

}  // namespace dpcore::bench
