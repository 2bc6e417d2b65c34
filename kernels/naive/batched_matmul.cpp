// The reference loop nest of batched matmul: each output element from its definition,
// with the transposes applied by index arithmetic (no copies).
#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

template <class T>
void batched_matmul(const BatchedMatmulShape& s, const T* a, const T* b, T* c) {
  for (int64_t i = 0; i < s.batch; ++i) {
    const T* ai = a + i * s.M * s.K;
    const T* bi = b + i * s.K * s.N;
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t n = 0; n < s.N; ++n) {
        double acc = 0.0;
        for (int64_t k = 0; k < s.K; ++k) {
          const double av = s.trans_a ? ai[k * s.M + m] : ai[m * s.K + k];
          const double bv = s.trans_b ? bi[n * s.K + k] : bi[k * s.N + n];
          acc += av * bv;
        }
        c[(i * s.M + m) * s.N + n] = T(acc);
      }
  }
}

template void batched_matmul<float>(const BatchedMatmulShape&, const float*, const float*, float*);
template void batched_matmul<double>(const BatchedMatmulShape&, const double*, const double*, double*);

}  // namespace dpcore::kernels::naive
