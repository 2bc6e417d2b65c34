// relu on bfloat16 and float16 without the conversion path (gemm_half.h): widen, the
// float32 rule of relu.h, round back. The rounding is exact (the value is the input or
// zero), so the bits are the float32 kernel's on the widened values rounded once, which is
// what the conversion path gave (tests/engine/half_activations_test.cpp holds both to it);
// only the passes over memory go: one read and one write per element instead of a widening
// copy, the float32 kernel and a rounding copy.
#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/relu.h"
#include "kernels/cpu/vector_variants.h"

namespace dpcore::kernels::cpu {

namespace {

// One thread's share, built for AVX-512, AVX2 and the baseline (vector_variants.h): the
// conversions are shifts, compares and selects, which GCC vectorises only when it may use
// the wide registers (a plain `omp simd` loop ran 3 times slower than the conversion path).
template <class H>
DPCORE_VECTOR_LOOP void forward_loop(int64_t n, const H* x, H* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = from_float<H>(relu_value(to_float(x[i])));
}
template <class H>
DPCORE_VECTOR_LOOP void backward_loop(int64_t n, const H* dy, const H* y, H* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = from_float<H>(relu_grad(to_float(dy[i]), to_float(y[i])));
}
DPCORE_VECTOR_LOOP void forward_bf16_loop(int64_t n, const BFloat16* x, BFloat16* y) { forward_loop(n, x, y); }
DPCORE_VECTOR_VARIANTS(forward_bf16, (int64_t n, const BFloat16* x, BFloat16* y), (n, x, y))
DPCORE_VECTOR_LOOP void forward_fp16_loop(int64_t n, const Float16* x, Float16* y) { forward_loop(n, x, y); }
DPCORE_VECTOR_VARIANTS(forward_fp16, (int64_t n, const Float16* x, Float16* y), (n, x, y))
DPCORE_VECTOR_LOOP void backward_bf16_loop(int64_t n, const BFloat16* dy, const BFloat16* y, BFloat16* dx) {
  backward_loop(n, dy, y, dx);
}
DPCORE_VECTOR_VARIANTS(backward_bf16, (int64_t n, const BFloat16* dy, const BFloat16* y, BFloat16* dx), (n, dy, y, dx))
DPCORE_VECTOR_LOOP void backward_fp16_loop(int64_t n, const Float16* dy, const Float16* y, Float16* dx) {
  backward_loop(n, dy, y, dx);
}
DPCORE_VECTOR_VARIANTS(backward_fp16, (int64_t n, const Float16* dy, const Float16* y, Float16* dx), (n, dy, y, dx))

void forward_range(int64_t n, const BFloat16* x, BFloat16* y) { forward_bf16(n, x, y); }
void forward_range(int64_t n, const Float16* x, Float16* y) { forward_fp16(n, x, y); }
void backward_range(int64_t n, const BFloat16* dy, const BFloat16* y, BFloat16* dx) { backward_bf16(n, dy, y, dx); }
void backward_range(int64_t n, const Float16* dy, const Float16* y, Float16* dx) { backward_fp16(n, dy, y, dx); }

}  // namespace

template <class H>
void relu_forward_half(int64_t n, const H* x, H* y) {
  for_element_chunks(n, [&](int64_t begin, int64_t end) { forward_range(end - begin, x + begin, y + begin); });
}

template <class H>
void relu_backward_half(int64_t n, const H* dy, const H* y, H* dx) {
  for_element_chunks(n, [&](int64_t begin, int64_t end) {
    backward_range(end - begin, dy + begin, y + begin, dx + begin);
  });
}

template void relu_forward_half<BFloat16>(int64_t, const BFloat16*, BFloat16*);
template void relu_forward_half<Float16>(int64_t, const Float16*, Float16*);
template void relu_backward_half<BFloat16>(int64_t, const BFloat16*, const BFloat16*, BFloat16*);
template void relu_backward_half<Float16>(int64_t, const Float16*, const Float16*, Float16*);

}  // namespace dpcore::kernels::cpu
