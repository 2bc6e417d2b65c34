// The 16-bit sum (gemm_half.h): the reduction step of a 16-bit allreduce. Each element is
// widened to float32 (exact), added there (exact too unless the two exponents are far
// apart) and rounded once to nearest even: what NCCL's kernels and the CUDA kernel do.
#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_variants.h"

namespace dpcore::kernels::cpu {

namespace {

// One thread's share. The bfloat16 loop (shifts, one float add, the rounding's integer
// adds and selects) vectorises; built for AVX-512, AVX2 and the baseline
// (vector_variants.h), it runs about 1.4 times the baseline's speed here, the same bits on
// every CPU (IEEE single-precision adds, no contraction possible).
DPCORE_VECTOR_LOOP void add_range_loop(int64_t n, const BFloat16* a, const BFloat16* b, BFloat16* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_bfloat16(bfloat16_to_float(a[i]) + bfloat16_to_float(b[i]));
}
DPCORE_VECTOR_VARIANTS(add_range, (int64_t n, const BFloat16* a, const BFloat16* b, BFloat16* y), (n, a, b, y))
void add_range(int64_t n, const Float16* a, const Float16* b, Float16* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_float16(float16_to_float(a[i]) + float16_to_float(b[i]));
}

}  // namespace

template <class H>
void add_half(int64_t n, const H* a, const H* b, H* y) {
  for_element_chunks(n, [&](int64_t begin, int64_t end) { add_range(end - begin, a + begin, b + begin, y + begin); });
}

template void add_half<BFloat16>(int64_t, const BFloat16*, const BFloat16*, BFloat16*);
template void add_half<Float16>(int64_t, const Float16*, const Float16*, Float16*);

}  // namespace dpcore::kernels::cpu
