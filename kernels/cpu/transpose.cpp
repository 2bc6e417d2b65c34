// transpose: one contiguous run of `inner` elements per (o, j, m, i), copied whole. Pure
// data movement, so every thread count gives the same bits, and one template serves every
// floating type (autocast's attention heads are split and merged in bfloat16 or float16).
#include <algorithm>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

template <class T>
void transpose(const TransposeShape& s, const T* x, T* y) {
  const int64_t runs = s.outer * s.b * s.mid * s.a;
#pragma omp parallel for num_threads(kernel_threads()) if (s.numel() >= kMinParallelElements) schedule(static)
  for (int64_t r = 0; r < runs; ++r) {
    const T* from = x + transpose_source(s, r * s.inner);
    std::copy(from, from + s.inner, y + r * s.inner);
  }
}

template void transpose<float>(const TransposeShape&, const float*, float*);
template void transpose<double>(const TransposeShape&, const double*, double*);
template void transpose<BFloat16>(const TransposeShape&, const BFloat16*, BFloat16*);
template void transpose<Float16>(const TransposeShape&, const Float16*, Float16*);

}  // namespace dpcore::kernels::cpu
