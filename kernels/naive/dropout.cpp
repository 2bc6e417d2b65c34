// dropout, one element at a time: its own Philox call, its own word of the four, its own
// comparison with the threshold (kernels/dropout_config.h).
#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {

template <class T>
void dropout(const DropoutConfig& cfg, int64_t samples, int64_t sample_size, const T* x, T* y) {
  const uint64_t threshold = dropout_keep_threshold(cfg.p);
  const T scale = dropout_scale<T>(cfg.p);
  for (int64_t s = 0; s < samples; ++s)
    for (int64_t e = 0; e < sample_size; ++e) {
      const uint32_t word = dropout_words(cfg.seed, cfg.step, cfg.first_sample + s, e / 4).v[e % 4];
      const int64_t i = s * sample_size + e;
      y[i] = x[i] * (word < threshold ? scale : T(0));
    }
}

template void dropout<float>(const DropoutConfig&, int64_t, int64_t, const float*, float*);
template void dropout<double>(const DropoutConfig&, int64_t, int64_t, const double*, double*);

}  // namespace dpcore::kernels::naive
