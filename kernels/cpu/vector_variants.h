// Loops compiled three times, for AVX-512, AVX2 and the baseline x86-64, the widest this CPU
// runs chosen at the first call. GCC's target_clones does the same through ifunc resolvers,
// but those run while the dynamic loader relocates libdpcore, before a sanitizer's runtime
// is up, and an instrumented resolver crashes the ThreadSanitizer build there. Meant for
// loops GCC vectorises on its own (the 16-bit casts and sums of kernels/cpu/half/): integer
// and IEEE single-precision operations, whose bits do not depend on the vector width.
// Internal to kernels/cpu.
//
//   DPCORE_VECTOR_LOOP void widen_loop(int64_t n, const BFloat16* x, float* y) { ... }
//   DPCORE_VECTOR_VARIANTS(widen, (int64_t n, const BFloat16* x, float* y), (n, x, y))
//
// defines widen(n, x, y), which runs widen_loop built for the widest of the three.
#pragma once

namespace dpcore::kernels::cpu {

enum class VectorWidth { Avx512, Avx2, Baseline };

inline VectorWidth vector_width() {
  static const VectorWidth width = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return VectorWidth::Avx512;
    return __builtin_cpu_supports("avx2") ? VectorWidth::Avx2 : VectorWidth::Baseline;
  }();
  return width;
}

}  // namespace dpcore::kernels::cpu

// The loop body: inlined into each variant, so each is vectorised for its own width.
#define DPCORE_VECTOR_LOOP __attribute__((always_inline)) inline

#define DPCORE_VECTOR_VARIANTS(name, params, args)                                   \
  __attribute__((target("avx512f"))) void name##_avx512 params { name##_loop args; } \
  __attribute__((target("avx2"))) void name##_avx2 params { name##_loop args; }      \
  void name params {                                                                 \
    switch (vector_width()) {                                                        \
      case VectorWidth::Avx512: return name##_avx512 args;                           \
      case VectorWidth::Avx2: return name##_avx2 args;                               \
      case VectorWidth::Baseline: break;                                             \
    }                                                                                \
    name##_loop args;                                                                \
  }
