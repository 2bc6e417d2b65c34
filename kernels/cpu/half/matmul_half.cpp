// linear and batched_matmul with 16-bit tensors (issue 27): the same kernels as
// kernels/cpu/linear.cpp and batched_matmul.cpp, specialised for BFloat16 and Float16 on
// gemm_half (16-bit inputs, float32 accumulation, each output rounded once). Every output
// is 16-bit, as under torch.autocast, where a linear layer's output, its input gradient and
// its weight gradient all have the input's dtype; the master weights' float32 gradient is
// the widened weight gradient (engine/low_precision_parameters.h).
#include <algorithm>
#include <vector>

#include "kernels/cpu/column_sums.h"
#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/kernels.h"

namespace dpcore::kernels::cpu {

namespace {

template <class H>
void linear_forward_half(const LinearShape& s, const H* x, const H* w, const H* bias, H* y) {
  // The bias rows first (exact: they are 16-bit already); the product is added to them in
  // float32 and the sum rounded once (beta 1), as a fused addmm rounds it.
  if (bias)
    for (int64_t n = 0; n < s.N; ++n) std::copy_n(bias, s.out, y + n * s.out);
  gemm_half<H, H>(false, true, s.N, s.out, s.in, 1.f, x, s.in, 0, w, s.in, 0, bias ? 1.f : 0.f, y, s.out, 0, 1);
}

template <class H>
void linear_backward_data_half(const LinearShape& s, const H* dy, const H* w, H* dx) {
  gemm_half<H, H>(false, false, s.N, s.in, s.out, 1.f, dy, s.out, 0, w, s.in, 0, 0.f, dx, s.in, 0, 1);
}

template <class H>
void linear_backward_weight_half(const LinearShape& s, const H* x, const H* dy, H* dw, H* dbias, bool accumulate) {
  gemm_half<H, H>(true, false, s.out, s.in, s.N, 1.f, dy, s.out, 0, x, s.in, 0, accumulate ? 1.f : 0.f, dw, s.in, 0,
                  1);
  if (!dbias) return;
  // Column sums of dy in double, in row order (the bits do not depend on the thread count);
  // the old value is added to the sum before the rounding when accumulating.
  const std::vector<double> total = column_sums(s.N, s.out, dy, [](H v) { return double(to_float(v)); });
  for (int64_t j = 0; j < s.out; ++j)
    dbias[j] = from_float<H>(float((accumulate ? double(to_float(dbias[j])) : 0.0) + total[j]));
}

template <class H>
void batched_matmul_half(const BatchedMatmulShape& s, const H* a, const H* b, H* c) {
  gemm_half<H, H>(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.f, a, s.lda(), s.M * s.K, b, s.ldb(), s.K * s.N, 0.f, c, s.N,
                  s.M * s.N, s.batch);
}

}  // namespace

#define DPCORE_HALF_MATMUL(H)                                                                                   \
  template <>                                                                                                   \
  void linear_forward<H>(const LinearShape& s, const H* x, const H* w, const H* bias, H* y) {                   \
    linear_forward_half(s, x, w, bias, y);                                                                      \
  }                                                                                                             \
  template <>                                                                                                   \
  void linear_backward_data<H>(const LinearShape& s, const H* dy, const H* w, H* dx) {                          \
    linear_backward_data_half(s, dy, w, dx);                                                                    \
  }                                                                                                             \
  template <>                                                                                                   \
  void linear_backward_weight<H>(const LinearShape& s, const H* x, const H* dy, H* dw, H* dbias, bool accumulate) { \
    linear_backward_weight_half(s, x, dy, dw, dbias, accumulate);                                               \
  }                                                                                                             \
  template <>                                                                                                   \
  void batched_matmul<H>(const BatchedMatmulShape& s, const H* a, const H* b, H* c) {                           \
    batched_matmul_half(s, a, b, c);                                                                            \
  }
DPCORE_HALF_MATMUL(BFloat16)
DPCORE_HALF_MATMUL(Float16)
#undef DPCORE_HALF_MATMUL

}  // namespace dpcore::kernels::cpu
