// The 16-bit sum (gemm_half.h): the reduction step of a 16-bit allreduce. Each element is
// widened to float32 (exact), added there (exact too unless the two exponents are far
// apart) and rounded once to nearest even: what NCCL's kernels and the CUDA kernel do.
#include <type_traits>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

namespace {
float widen(BFloat16 h) { return bfloat16_to_float(h); }
float widen(Float16 h) { return float16_to_float(h); }
}  // namespace

template <class H>
void add_half(int64_t n, const H* a, const H* b, H* y) {
#pragma omp parallel for num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float sum = widen(a[i]) + widen(b[i]);
    if constexpr (std::is_same_v<H, BFloat16>) y[i] = float_to_bfloat16(sum);
    else y[i] = float_to_float16(sum);
  }
}

template void add_half<BFloat16>(int64_t, const BFloat16*, const BFloat16*, BFloat16*);
template void add_half<Float16>(int64_t, const Float16*, const Float16*, Float16*);

}  // namespace dpcore::kernels::cpu
