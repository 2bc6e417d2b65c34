// embedding on the CPU. The forward is a gather of table rows, one output row per
// iteration. The backward must not depend on the thread count, so it never lets two
// threads add into one table row: a serial counting sort lists the positions of each id in
// increasing order (count, exclusive scan, scatter: O(n + vocab)), then the threads split
// the table rows and each row sums its own positions, in that order, in double.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

template <class T>
void embedding_forward(int64_t n, int64_t dim, const int64_t* ids, const T* weight, T* y) {
#pragma omp parallel for num_threads(kernel_threads()) if (n * dim >= kMinParallelElements) schedule(static)
  for (int64_t p = 0; p < n; ++p) std::memcpy(y + p * dim, weight + ids[p] * dim, size_t(dim) * sizeof(T));
}

template <class T>
void embedding_backward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const T* dy, int64_t padding_idx,
                        T* dweight, bool accumulate) {
  // starts[v] .. starts[v + 1]: where id v's positions lie in `sorted`, in increasing order.
  std::vector<int64_t> starts(vocab + 1, 0), sorted(n);
  for (int64_t p = 0; p < n; ++p) ++starts[ids[p] + 1];
  for (int64_t v = 0; v < vocab; ++v) starts[v + 1] += starts[v];
  std::vector<int64_t> cursor(starts.begin(), starts.end() - 1);
  for (int64_t p = 0; p < n; ++p) sorted[cursor[ids[p]]++] = p;

#pragma omp parallel num_threads(kernel_threads()) if (n * dim + vocab * dim >= kMinParallelElements)
  {
    std::vector<double> acc(dim);
#pragma omp for schedule(static)
    for (int64_t v = 0; v < vocab; ++v) {
      std::fill(acc.begin(), acc.end(), 0.0);
      if (v != padding_idx)
        for (int64_t k = starts[v]; k < starts[v + 1]; ++k) {
          const T* row = dy + sorted[k] * dim;
          for (int64_t d = 0; d < dim; ++d) acc[d] += double(row[d]);
        }
      T* out = dweight + v * dim;
      for (int64_t d = 0; d < dim; ++d) out[d] = accumulate ? T(double(out[d]) + acc[d]) : T(acc[d]);
    }
  }
}

#define DPCORE_INSTANTIATE(T)                                                           \
  template void embedding_forward<T>(int64_t, int64_t, const int64_t*, const T*, T*); \
  template void embedding_backward<T>(int64_t, int64_t, int64_t, const int64_t*, const T*, int64_t, T*, bool);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
