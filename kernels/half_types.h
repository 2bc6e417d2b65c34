// bfloat16 and float16, the two 16-bit floating-point storage types, and their conversions
// to and from float32 as plain bit manipulation (usable from CPU and CUDA code alike).
//   bfloat16: 1 sign, 8 exponent (float32's), 7 mantissa bits: float32's upper half.
//   float16:  IEEE 754 binary16, 1 sign, 5 exponent (bias 15), 10 mantissa bits; largest
//             finite 65504, smallest normal 2^-14, subnormals down to 2^-24.
// To float32 is exact for every bit pattern (NaN payloads kept as they are). From float32
// rounds to nearest, ties to even, as PyTorch's .to(torch.bfloat16 / torch.float16) does:
// subnormal results rounded like normal ones, float16 overflow (from 65520 up) to an
// infinity, infinities kept, and a NaN stays a NaN with its sign and upper payload bits and
// the quiet bit set (as F16C's vcvtps2ph and AVX512-BF16's vcvtneps2bf16 do; PyTorch
// itself writes one canonical NaN, which differs only in those bits).
// tests/kernels/half_types_test.cpp checks every 16-bit pattern and the rounding against a
// float64 reference and against PyTorch.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define DPCORE_HALF_FN __host__ __device__ inline
#else
#define DPCORE_HALF_FN inline
#endif

namespace dpcore::kernels {

// The storage types: the bits only, so that a tensor's data<BFloat16>() is typed.
struct BFloat16 {
  uint16_t bits;
};
struct Float16 {
  uint16_t bits;
};

DPCORE_HALF_FN uint32_t float32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
DPCORE_HALF_FN float float32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

DPCORE_HALF_FN float bfloat16_to_float(BFloat16 h) { return float32_from_bits(uint32_t(h.bits) << 16); }

DPCORE_HALF_FN BFloat16 float_to_bfloat16(float f) {
  const uint32_t u = float32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{uint16_t((u >> 16) | 0x0040u)};  // NaN: quiet
  // Adding 0x7fff plus the kept part's lowest bit carries into it exactly when the dropped
  // half is above one half, or exactly one half with an odd kept part; a carry out of the
  // mantissa raises the exponent, and out of the largest finite value gives the infinity.
  return BFloat16{uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

DPCORE_HALF_FN float float16_to_float(Float16 h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return float32_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return float32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return float32_from_bits(sign);
  // A subnormal, mantissa * 2^-24: shift its leading one into the implicit bit's place.
  uint32_t m = mantissa, e = 113;
  while (!(m & 0x400u)) {
    m <<= 1;
    --e;
  }
  return float32_from_bits(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

DPCORE_HALF_FN Float16 float_to_float16(float f) {
  const uint32_t u = float32_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return Float16{uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu))};  // NaN: quiet
  if (a >= 0x477ff000u) return Float16{uint16_t(sign | 0x7c00u)};  // from 65520, halfway past 65504: inf
  if (a >= 0x38800000u) {  // a normal float16 (>= 2^-14): rebias the exponent, round as bfloat16 does
    const uint32_t r = a - (112u << 23);
    return Float16{uint16_t(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13))};
  }
  // A subnormal result m * 2^-24 with m = a's significand * 2^(e - 126), rounded to even;
  // below 2^-25 (shift 25 or more) that is under one half: zero. m may round up to 0x400,
  // which is the smallest normal's encoding.
  const uint32_t e = a >> 23;
  if (e < 102) return Float16{sign};
  const uint32_t significand = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;  // 14..24
  uint32_t m = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1u))) ++m;
  return Float16{uint16_t(sign | m)};
}

// The two types behind one name, for code written once for both (H = BFloat16 or Float16):
// to_float widens exactly, from_float<H> rounds to nearest even as above. float itself
// passes through both unchanged, for code written once for float32 and 16 bits.
DPCORE_HALF_FN float to_float(float f) { return f; }
DPCORE_HALF_FN float to_float(BFloat16 h) { return bfloat16_to_float(h); }
DPCORE_HALF_FN float to_float(Float16 h) { return float16_to_float(h); }
template <class H>
DPCORE_HALF_FN H from_float(float f);
template <>
DPCORE_HALF_FN float from_float<float>(float f) { return f; }

// The type a kernel keeps per-row statistics in (attention's log-sum-exp) for elements of
// type T: float32 for the 16-bit types, as autocast keeps statistics, T itself otherwise.
template <class T>
struct statistic_of {
  using type = T;
};
template <>
struct statistic_of<BFloat16> {
  using type = float;
};
template <>
struct statistic_of<Float16> {
  using type = float;
};
template <class T>
using statistic_t = typename statistic_of<T>::type;
template <>
DPCORE_HALF_FN BFloat16 from_float<BFloat16>(float f) { return float_to_bfloat16(f); }
template <>
DPCORE_HALF_FN Float16 from_float<Float16>(float f) { return float_to_float16(f); }

}  // namespace dpcore::kernels
