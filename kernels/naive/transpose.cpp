// transpose as five nested loops over the INPUT [outer, A, mid, B, inner], each element
// written to its swapped place: the opposite direction from the kernels, which compute each
// output's source (kernels/transpose_shape.h), so the two cannot share a mistake.
#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

template <class T>
void transpose(const TransposeShape& s, const T* x, T* y) {
  const T* in = x;
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.a; ++i)
      for (int64_t m = 0; m < s.mid; ++m)
        for (int64_t j = 0; j < s.b; ++j)
          for (int64_t q = 0; q < s.inner; ++q) y[(((o * s.b + j) * s.mid + m) * s.a + i) * s.inner + q] = *in++;
}

template void transpose<float>(const TransposeShape&, const float*, float*);
template void transpose<double>(const TransposeShape&, const double*, double*);

}  // namespace dpcore::kernels::naive
