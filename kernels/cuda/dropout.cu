// Inverted dropout of x[samples, sample_size] (forward, and backward with dy for x). One
// thread per group of four elements of a sample: one Philox4x32-10 call gives the four
// words that decide them (kernels/dropout_config.h), the same bits the CPU draws, since
// the mask depends only on (seed, step, global sample, element). Nothing is stored for the
// backward: ten rounds of integer multiplies per four elements cost less than writing and
// reading back a mask, and the kernel stays memory bound. 16-bit tensors: each value widened
// as it is read, the product formed in float32 and rounded once (the float32 kernel's bits
// on the widened tensor).
#include "kernels/half_types.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

struct DropoutArgs {
  uint64_t seed, step;
  int64_t first_sample, samples, sample_size, groups;  // groups of four elements per sample
  uint32_t threshold;  // kept when the word is below it; see keep_all
  bool keep_all;       // p = 0: every word is below 2^32, which a uint32 threshold cannot say
  float scale;
};

template <class X>
__global__ void dropout_kernel(DropoutArgs a, const X* x, X* y) {
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t w = first; w < a.samples * a.groups; w += stride) {
    const int64_t s = w / a.groups, g = w % a.groups;
    const Philox4x32 words = dropout_words(a.seed, a.step, a.first_sample + s, g);
    const int64_t begin = g * 4, count = a.sample_size - begin < 4 ? a.sample_size - begin : 4;
    const int64_t at = s * a.sample_size + begin;
    // Rows of sample_size % 4 != 0 leave groups unaligned for float4, so plain stores: the
    // neighbouring threads' stores still coalesce.
    for (int64_t j = 0; j < count; ++j) {
      const bool kept = a.keep_all || words.v[j] < a.threshold;
      y[at + j] = from_float<X>(to_float(x[at + j]) * (kept ? a.scale : 0.f));  // x * 0 keeps NaN, as PyTorch's input * noise
    }
  }
}

}  // namespace

template <class X>
void dropout(const DropoutConfig& cfg, int64_t samples, int64_t sample_size, const X* x, X* y, cudaStream_t stream) {
  const int64_t groups = (sample_size + 3) / 4, work = samples * groups;
  if (work == 0) return;
  const uint64_t threshold = dropout_keep_threshold(cfg.p);
  DropoutArgs args;
  args.seed = cfg.seed, args.step = cfg.step, args.first_sample = cfg.first_sample;
  args.samples = samples, args.sample_size = sample_size, args.groups = groups;
  args.threshold = uint32_t(threshold), args.keep_all = threshold > UINT32_MAX;
  args.scale = dropout_scale<float>(cfg.p);
  launch("dropout_kernel", dropout_kernel<X>, blocks_for(work, kElementwiseThreads), kElementwiseThreads, stream, args, x,
         y);
}

template void dropout<float>(const DropoutConfig&, int64_t, int64_t, const float*, float*, cudaStream_t);
template void dropout<BFloat16>(const DropoutConfig&, int64_t, int64_t, const BFloat16*, BFloat16*, cudaStream_t);
template void dropout<Float16>(const DropoutConfig&, int64_t, int64_t, const Float16*, Float16*, cudaStream_t);

}  // namespace dpcore::kernels::cuda
