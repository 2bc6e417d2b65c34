// The reference loop nests of embedding, from the definition: the forward copies row
// ids[p] of the table; the gradient of table row v is, for each column on its own, a
// double sum over every position p whose id is v (a scan of all positions per row, not the
// sort the fast kernels use, so the two formulations check each other).
#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

template <class T>
void embedding_forward(int64_t n, int64_t dim, const int64_t* ids, const T* weight, T* y) {
  for (int64_t p = 0; p < n; ++p)
    for (int64_t d = 0; d < dim; ++d) y[p * dim + d] = weight[ids[p] * dim + d];
}

template <class T>
void embedding_backward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const T* dy, int64_t padding_idx,
                        T* dweight, bool accumulate) {
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t d = 0; d < dim; ++d) {
      double acc = 0.0;
      for (int64_t p = 0; p < n; ++p)
        if (ids[p] == v && v != padding_idx) acc += double(dy[p * dim + d]);
      T& out = dweight[v * dim + d];
      out = accumulate ? T(double(out) + acc) : T(acc);
    }
}

#define DPCORE_INSTANTIATE(T)                                                                    \
  template void embedding_forward<T>(int64_t, int64_t, const int64_t*, const T*, T*);          \
  template void embedding_backward<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, int64_t, T*, bool);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::naive
