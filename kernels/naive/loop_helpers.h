// What the loop nests share: index arithmetic along one dimension and the accumulate rule.
// Internal to kernels/naive.
#pragma once

#include <cstdint>

namespace dpcore::kernels::naive {

// The input index along one dimension under output o and kernel tap k, or -1 in the padding.
inline int64_t input_at(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t size) {
  int64_t i = o * stride - pad + k;
  return i >= 0 && i < size ? i : -1;
}

// The output index along one dimension whose tap k reads input i, or -1 if none does.
inline int64_t output_at(int64_t i, int64_t k, int64_t stride, int64_t pad, int64_t size) {
  int64_t shifted = i + pad - k;
  if (shifted < 0 || shifted % stride != 0) return -1;
  int64_t o = shifted / stride;
  return o < size ? o : -1;
}

template <class T>
inline T accumulated(bool accumulate, T old, double fresh) {
  return accumulate ? old + T(fresh) : T(fresh);
}

}  // namespace dpcore::kernels::naive
