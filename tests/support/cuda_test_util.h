// Helpers for the CUDA tests: device arrays that start as NaN (so an element a kernel
// forgot to write fails the comparison), uploads/downloads, and the error measure.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"
#include "support/kernel_checks.h"
#include "support/test_support.h"

namespace dpcore::testing {

#define SKIP_WITHOUT_CUDA()                                                                               \
  do {                                                                                                    \
    if (!::dpcore::testing::cuda_available())                                                             \
      GTEST_SKIP() << "no CUDA device: the CUDA kernels run only on a GPU (this machine has none or no driver)"; \
  } while (0)

// Device memory for n elements of T, freed by the destructor. Plain cudaMalloc, so the
// tests of the caching allocator are not disturbed by the arrays of other tests.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(n, 1) * sizeof(T)));
    poison();
  }
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) { upload(values); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  // All bits set: NaN for floats, -1 for integers.
  void poison() { CUDA_CHECK(cudaMemset(ptr_, 0xFF, n_ * sizeof(T))); }
  void upload(const std::vector<T>& values) {
    CUDA_CHECK(cudaMemcpy(ptr_, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Waits for all work on the device first (kernels run on streams the legacy copy may not order with).
  std::vector<T> download() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> out(n_);
    CUDA_CHECK(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

// scaled_error (support/kernel_checks.h) measures the difference of two downloads.

// FP32 kernels against the CPU reference: 1e-5. TF32 (10-bit mantissa inputs): 1e-2.
constexpr double kFp32Tolerance = 1e-5;
constexpr double kTf32Tolerance = 1e-2;

inline std::vector<float> random_floats(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return random_vector<float>(n, seed, lo, hi);
}

}  // namespace dpcore::testing
