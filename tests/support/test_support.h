// Helpers shared by the tests: random inputs, NaN-filled outputs, tolerance checks,
// GPU detection, temporary directories.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace dpcore::testing {

// Uniform values in [lo, hi) from a fixed seed, so that a failure reproduces.
template <class T>
std::vector<T> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// Largest |a - b| / max(|b|, floor) over two arrays; the floor keeps near-zero
// references from turning rounding noise into huge relative errors.
double max_relative_error(const float* a, const float* b, size_t n, double floor = 1e-3);
double max_relative_error(const double* a, const double* b, size_t n, double floor = 1e-3);

// max |got - ref| / max |ref| over two arrays (max |got - ref| when ref is all zeros): the
// error relative to the reference tensor's scale, which element-wise ratios are not when
// some reference elements cancel to ~0.
double scaled_difference(const float* got, const float* ref, size_t n);
double scaled_difference(const double* got, const double* ref, size_t n);

// True when a CUDA device can actually be used (false on machines without a GPU or driver).
bool cuda_available();

// The elements of a buffer that a test of stream ordering fills and hands on without
// waiting. On a GPU, 4 Mi floats: a missing wait then shows as a wrong value (the fill still
// running when the reader starts). On the host runtime (DPCORE_HOST_EXEC) a missing order is
// a data race between two streams' worker threads, which ThreadSanitizer reports at any
// size, and a reader that runs first sees the allocation's NaNs: 4096 (the GPU's
// size took 75 s a test under AddressSanitizer).
inline int64_t stream_order_test_elements() {
#ifdef DPCORE_HOST_EXEC
  return 4096;
#else
  return int64_t(1) << 22;
#endif
}

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Root of the source tree (set by CMake for ctest; falls back to "..").
std::string source_dir();

// Debian's Python, the one that sees python3-torch.
constexpr const char* kTorchPython = "/usr/bin/python3";
// Whether kTorchPython can import torch (the tests that need it skip otherwise).
bool python_has_torch();
// Whether kTorchPython can import these modules ("PIL", "torchvision, PIL").
bool python_can_import(const std::string& modules);
struct ScriptResult {
  int status = -1;     // the exit status (-1: killed or not run)
  std::string output;  // stdout and stderr together
};
// Runs the script at source_dir()/<script> ("scripts/make_fixtures.py") with `python`
// (kTorchPython unless given: a venv's, bench/.venv-hf) and `args` (already quoted for the shell).
ScriptResult run_python_script(const std::string& script, const std::string& args,
                               const std::string& python = kTorchPython);

}  // namespace dpcore::testing
