// Element types. float32 is what models train in; float64 exists for the finite-difference
// gradient checks on the CPU; int64 holds class targets and int32 the pooling argmax.
// bfloat16 and float16 (kernels/half_types.h) are storage types so far: tensors and
// safetensors files hold them and convert them, but no op computes in them (an op given one
// refuses it, naming itself and the dtype; docs/mixed-precision.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/half_types.h"

namespace dpcore {

enum class DType : uint8_t { Float32, Float64, Int32, Int64, BFloat16, Float16 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::BFloat16: return 2;
    case DType::Float16: return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "?";
}

// The floating dtypes the ops compute in.
inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
// The 16-bit floating storage types.
inline bool is_half_precision(DType t) { return t == DType::BFloat16 || t == DType::Float16; }

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<kernels::BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<kernels::Float16> { static constexpr DType value = DType::Float16; };

}  // namespace dpcore
