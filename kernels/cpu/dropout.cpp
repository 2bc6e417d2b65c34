// dropout over x[samples, sample_size] in blocks of 16 groups of four elements of one
// sample: the block's Philox calls (kernels/dropout_config.h), independent of each other,
// run side by side (kernels/cpu/philox_block.h), then the block's elements are multiplied
// by their masks in a vectorised loop (one call at a time, each round waiting on the
// products of the last, and a division per group of four, were 3-4x slower on one thread;
// with the portable block loop instead of philox_block.cpp's AVX-512 one the whole kernel
// takes 1.7x as long on an AVX-512 CPU). Every element's mask is a function of its own
// indices only, so any split over threads, and any block a tail falls in, gives the same
// bits. 16-bit tensors (BFloat16, Float16): each block widened into float32
// (cast_on_this_thread, vectorised), multiplied as the float32 kernel does and rounded
// once back: the float32 kernel's bits on the widened tensor.
#include <type_traits>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/philox_block.h"
#include "kernels/cpu/stored_values.h"

namespace dpcore::kernels::cpu {

template <class X>
void dropout(const DropoutConfig& cfg, int64_t samples, int64_t sample_size, const X* x, X* y) {
  using T = computed_t<X>;
  // Kept where word < threshold, threshold in [0, 2^32]: as word <= last_kept in 32 bits
  // (a comparison the vector units have), with a threshold of 0 (p = 1, or p within 2^-33
  // of it) keeping nothing through a multiplier of 0 for every word.
  const uint64_t threshold = dropout_keep_threshold(cfg.p);
  const uint32_t last_kept = threshold == 0 ? 0 : uint32_t(threshold - 1);
  const T kept_scale = threshold == 0 ? T(0) : dropout_scale<T>(cfg.p);
  const int64_t blocks = (sample_size + kPhiloxBlockWords - 1) / kPhiloxBlockWords, work = samples * blocks,
                n = samples * sample_size;
#pragma omp parallel for num_threads(kernel_threads()) if (n >= kMinParallelElements) schedule(static)
  for (int64_t w = 0; w < work; ++w) {
    const int64_t s = w / blocks, begin = (w % blocks) * kPhiloxBlockWords;
    const int64_t count = begin + kPhiloxBlockWords < sample_size ? kPhiloxBlockWords : sample_size - begin;
    alignas(64) uint32_t words[kPhiloxBlockWords];
    philox_block(cfg, cfg.first_sample + s, begin / 4, words);
    const X* xb = x + s * sample_size + begin;
    X* yb = y + s * sample_size + begin;
    // x * 0 for a dropped element, as PyTorch's input * noise: NaN and inf stay NaN.
    if constexpr (std::is_same_v<X, T>) {
#pragma omp simd
      for (int64_t e = 0; e < count; ++e) yb[e] = xb[e] * (words[e] <= last_kept ? kept_scale : T(0));
    } else {
      alignas(64) float block[kPhiloxBlockWords];
      cast_on_this_thread(count, xb, block);
#pragma omp simd
      for (int64_t e = 0; e < count; ++e) block[e] = block[e] * (words[e] <= last_kept ? kept_scale : T(0));
      cast_on_this_thread(count, static_cast<const float*>(block), yb);
    }
  }
}

template void dropout<float>(const DropoutConfig&, int64_t, int64_t, const float*, float*);
template void dropout<double>(const DropoutConfig&, int64_t, int64_t, const double*, double*);
template void dropout<BFloat16>(const DropoutConfig&, int64_t, int64_t, const BFloat16*, BFloat16*);
template void dropout<Float16>(const DropoutConfig&, int64_t, int64_t, const Float16*, Float16*);

}  // namespace dpcore::kernels::cpu
