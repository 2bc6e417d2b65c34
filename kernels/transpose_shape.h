// How transpose(x, dim0, dim1) sees its tensor, shared by the kernels, their reference and
// the engine op: with a < b the two dimensions, x is viewed as [outer, A, mid, B, inner]
// (outer: the product of the dimensions before a, mid: between a and b, inner: after b)
// and the output as [outer, B, mid, A, inner]. Every transpose of two dimensions is this
// one 5-d swap; splitting attention heads, [N, T, H, d] -> [N, H, T, d], is outer = N,
// A = T, mid = 1, B = H, inner = d.
#pragma once

#include <cstdint>

namespace dpcore::kernels {

struct TransposeShape {
  int64_t outer = 1, a = 1, mid = 1, b = 1, inner = 1;
  int64_t numel() const { return outer * a * mid * b * inner; }
};

// The offset in x of output element `out` (row-major over [outer, B, mid, A, inner]).
#ifdef __CUDACC__
__host__ __device__
#endif
inline int64_t transpose_source(const TransposeShape& s, int64_t out) {
  const int64_t q = out % s.inner;
  int64_t rest = out / s.inner;
  const int64_t i = rest % s.a;  // index along A (now the 4th dimension)
  rest /= s.a;
  const int64_t m = rest % s.mid;
  rest /= s.mid;
  const int64_t j = rest % s.b;  // index along B (now the 2nd dimension)
  const int64_t o = rest / s.b;
  return (((o * s.a + i) * s.mid + m) * s.b + j) * s.inner + q;
}

}  // namespace dpcore::kernels
