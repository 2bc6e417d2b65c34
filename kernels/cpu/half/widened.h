// Elementwise kernels on 16-bit arrays through their float32 code (gelu, tanh, scale): each
// thread's share is widened a piece at a time into float32 buffers on its stack (exact:
// every bfloat16 and float16 value is a float32), the float32 code runs on the piece, and
// each result is rounded once back, to nearest even. The bits are the float32 kernel's on
// the widened array, rounded (what a float32 copy of the inputs and a rounding copy of the
// outputs gave), in one read of each 16-bit input and one write of each output. The float32 code must compute each
// element from that element alone (the pieces start wherever the threads' shares do).
// Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

// Floats per buffer: 2 KiB each, in the L1 cache beside the 16-bit arrays.
constexpr int64_t kWidenedPiece = 512;

// out[i] for i < n from a[i] (and b[i] when b is not null) by
// float_range(count, a_piece, b_piece, out_piece) over widened pieces; b_piece is a_piece
// when b is null. out may alias a or b.
template <class H, class FloatRange>
void map_widened(int64_t n, const H* a, const H* b, H* out, const FloatRange& float_range) {
  for_element_chunks(n, [&](int64_t begin, int64_t end) {
    alignas(64) float wide_a[kWidenedPiece], wide_b[kWidenedPiece];
    for (int64_t at = begin; at < end; at += kWidenedPiece) {
      const int64_t count = std::min(kWidenedPiece, end - at);
      cast_on_this_thread(count, a + at, wide_a);
      if (b) cast_on_this_thread(count, b + at, wide_b);
      float_range(count, static_cast<const float*>(wide_a), static_cast<const float*>(b ? wide_b : wide_a), wide_a);
      cast_on_this_thread(count, static_cast<const float*>(wide_a), out + at);
    }
  });
}

}  // namespace dpcore::kernels::cpu
