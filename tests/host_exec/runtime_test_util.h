// What the host layer's tests share (host_runtime_test.cpp, host_graph_test.cpp,
// host_exec_test.cpp, host_wmma_test.cpp): small kernels, device buffers and streams made
// the way the project's code makes them, and the message of a launch that must fail.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_runtime/check.h"

namespace host_runtime_test {

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// Runs a launch that must fail and returns its message; the device's sticky error is then
// cleared (cudaDeviceReset), as a program that goes on after a fault must.
template <class Launch>
std::string failure_of(Launch body) {
  std::string message = "(no error)";
  try {
    body();
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  cudaDeviceReset();
  return message;
}

inline __global__ void set_to(float* x, float value) { x[threadIdx.x] = value; }
inline __global__ void add_one(float* x) { x[threadIdx.x] += 1.f; }
inline __global__ void copy_values(const float* x, float* y) { y[threadIdx.x] = x[threadIdx.x]; }

inline std::vector<float> download(const float* device_ptr, size_t n) {
  std::vector<float> out(n);
  CUDA_CHECK(cudaMemcpy(out.data(), device_ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

inline float* device_floats(size_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  return static_cast<float*>(p);
}

// The kind of stream the project's code creates: ordered with nothing but its own work.
inline cudaStream_t non_blocking_stream() {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

inline bool all_bits_set(const void* p, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (b[i] != 0xFF) return false;
  return true;
}

}  // namespace host_runtime_test
