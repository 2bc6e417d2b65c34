// dropout over x[samples, sample_size]: each iteration takes one group of four elements of
// one sample, whose four keep decisions are one Philox call (kernels/dropout_config.h).
// Every element's mask is a function of its own indices only, so any split over threads
// gives the same bits.
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

template <class T>
void dropout(const DropoutConfig& cfg, int64_t samples, int64_t sample_size, const T* x, T* y) {
  const uint64_t threshold = dropout_keep_threshold(cfg.p);
  const T scale = dropout_scale<T>(cfg.p);
  const int64_t groups = (sample_size + 3) / 4, work = samples * groups, n = samples * sample_size;
#pragma omp parallel for num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t w = 0; w < work; ++w) {
    const int64_t s = w / groups, g = w % groups;
    const Philox4x32 words = dropout_words(cfg.seed, cfg.step, cfg.first_sample + s, g);
    const int64_t begin = g * 4, end = begin + 4 < sample_size ? begin + 4 : sample_size;
    for (int64_t e = begin; e < end; ++e) {
      const int64_t i = s * sample_size + e;
      // x * 0 for a dropped element, as PyTorch's input * noise: NaN and inf stay NaN.
      y[i] = x[i] * (words.v[e - begin] < threshold ? scale : T(0));
    }
  }
}

template void dropout<float>(const DropoutConfig&, int64_t, int64_t, const float*, float*);
template void dropout<double>(const DropoutConfig&, int64_t, int64_t, const double*, double*);

}  // namespace dpcore::kernels::cpu
