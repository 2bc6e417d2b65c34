// The host execution layer's <cuda_bf16.h>: __nv_bfloat16 as CUDA's, a 2-byte type holding
// the bits, with the conversions the kernels use. Rounding is kernels/half_types.h's
// (round to nearest even, NaN kept a quiet NaN), which is what __float2bfloat16_rn does on
// a GPU, so a kernel rounds the same bits here as there.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/half_types.h"

struct __nv_bfloat16 {
  // The bits, as CUDA's member of that name. Zero-initialised so that the default
  // constructor is constexpr: a `__shared__` array of __nv_bfloat16 (a thread_local static here)
  // is then constant-initialised, with no guard variable that a block's fibers would check
  // unsynchronised, which ThreadSanitizer reports as a race.
  unsigned short __x = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(dpcore::kernels::float_to_bfloat16(f).bits) {}  // rounds to nearest even, as CUDA's
  operator float() const { return dpcore::kernels::bfloat16_to_float({__x}); }
};
static_assert(sizeof(__nv_bfloat16) == 2 && std::is_trivially_copyable_v<__nv_bfloat16>, "__nv_bfloat16 is two bytes, as in CUDA");

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) {
  __nv_bfloat16 h;
  h.__x = bits;
  return h;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
