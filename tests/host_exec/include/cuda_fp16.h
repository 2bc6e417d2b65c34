// The host execution layer's <cuda_fp16.h>: __half as CUDA's, a 2-byte type holding the
// IEEE binary16 bits, with the conversions the kernels use. Rounding is
// kernels/half_types.h's (round to nearest even, overflow to infinity, subnormals rounded,
// NaN kept a quiet NaN), which is what __float2half_rn does on a GPU.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/half_types.h"

struct __half {
  // The bits, as CUDA's member of that name. Zero-initialised so that the default
  // constructor is constexpr: a `__shared__` array of __half (a thread_local static here)
  // is then constant-initialised, with no guard variable that a block's fibers would check
  // unsynchronised, which ThreadSanitizer reports as a race.
  unsigned short __x = 0;
  __half() = default;
  __half(float f) : __x(dpcore::kernels::float_to_float16(f).bits) {}  // rounds to nearest even, as CUDA's
  operator float() const { return dpcore::kernels::float16_to_float({__x}); }
};
static_assert(sizeof(__half) == 2 && std::is_trivially_copyable_v<__half>, "__half is two bytes, as in CUDA");

inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __half __ushort_as_half(unsigned short bits) {
  __half h;
  h.__x = bits;
  return h;
}
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
