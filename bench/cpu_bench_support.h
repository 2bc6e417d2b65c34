// What the CPU kernel benchmarks (cpu_kernels_bench.cpp, cpu_transformer_bench.cpp) share:
// inputs, the thread count and the GFLOP/s counter.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/kernels.h"

namespace dpcore::bench {

// n floats uniform in [-1, 1), the same for every run.
inline std::vector<float> random_floats(int64_t n) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Sets the kernels' thread count and labels the run.
inline void prepare(benchmark::State& state, int threads, const char* name) {
  kernels::cpu::set_num_threads(threads);
  state.SetLabel(name);
}

inline void report_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace dpcore::bench
