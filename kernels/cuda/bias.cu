// Bias and bias-gradient kernels used around the GEMMs of linear and conv2d, by the hand
// engines and the library (cuBLAS, cuDNN) engines alike.
#include <algorithm>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/half_types.h"

namespace dpcore::kernels::cuda {

namespace {

constexpr int kChannelSumThreads = 256;

__global__ void broadcast_rows_kernel(int64_t total, int64_t cols, const float* bias, float* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bias[i % cols];
}

__global__ void bias_activation_kernel(int64_t total, int64_t channels, int64_t inner, const float* bias, bool relu,
                                       float* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float v = y[i] + (bias ? bias[(i / inner) % channels] : 0.f);
    if (relu && v < 0.f) v = 0.f;  // NaN passes, as in relu_forward
    y[i] = v;
  }
}

// Block (s, c) sums slice s of channel c: the values t in [s * chunk, (s + 1) * chunk) of
// the channel's outer x inner values, t = o * inner + i at x[(o * channels + c) * inner + i].
// Threads start at consecutive t (consecutive addresses within a row) and step by
// blockDim.x, which advances the address by a fixed amount plus a carry when i wraps: no
// division per element. The block sum adds the partials in a fixed tree and the slices
// are written apart, so nothing depends on timing: the gradient is deterministic.
__global__ void channel_sum_kernel(int64_t outer, int64_t channels, int64_t inner, int64_t chunk, const float* x,
                                   float* out, bool accumulate) {
  const int64_t row = channels * inner;  // from (o, i) to (o + 1, i)
  const int64_t begin = blockIdx.x * chunk, end = min(outer * inner, begin + chunk);
  for (int64_t c = blockIdx.y; c < channels; c += gridDim.y) {
    float partial = 0.f;
    int64_t t = begin + threadIdx.x;
    if (t < end) {
      const int64_t rows_per_step = blockDim.x / inner, i_per_step = blockDim.x - rows_per_step * inner;
      int64_t i = t % inner, at = (t / inner) * row + c * inner + i;
#pragma unroll 4  // 4 loads in flight per thread (the addresses do not wait for the sums)
      for (; t < end; t += blockDim.x) {
        partial += x[at];
        at += rows_per_step * row + i_per_step;
        i += i_per_step;
        if (i >= inner) i -= inner, at += row - inner;
      }
    }
    const float total = block_sum(partial);
    float* dst = out + c * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) *dst = accumulate ? *dst + total : total;
  }
}

template <class H>
__global__ void broadcast_channels_half_kernel(int64_t total, int64_t channels, int64_t inner, const H* bias, H* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bias[(i / inner) % channels];
}

// A thread per channel walks its values in order; with inner = 1 (linear) neighbouring
// threads read neighbouring columns (coalesced).
template <class H>
__global__ void channel_sum_half_kernel(int64_t outer, int64_t channels, int64_t inner, const H* x, H* out,
                                        bool accumulate) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < channels;
       c += int64_t(gridDim.x) * blockDim.x) {
    float total = accumulate ? to_float(out[c]) : 0.f;
    for (int64_t o = 0; o < outer; ++o) {
      const H* row = x + (o * channels + c) * inner;
      for (int64_t i = 0; i < inner; ++i) total += to_float(row[i]);
    }
    out[c] = from_float<H>(total);
  }
}

}  // namespace

template <class H>
void broadcast_channels_half(int64_t outer, int64_t channels, int64_t inner, const H* bias, H* y,
                             cudaStream_t stream) {
  const int64_t total = outer * channels * inner;
  if (total == 0) return;
  launch("broadcast_channels_half_kernel", broadcast_channels_half_kernel<H>, blocks_for(total, kElementwiseThreads),
         kElementwiseThreads, stream, total, channels, inner, bias, y);
}

template <class H>
void channel_sum_half(int64_t outer, int64_t channels, int64_t inner, const H* x, H* out, bool accumulate,
                      cudaStream_t stream) {
  if (channels == 0) return;
  launch("channel_sum_half_kernel", channel_sum_half_kernel<H>, blocks_for(channels, kElementwiseThreads),
         kElementwiseThreads, stream, outer, channels, inner, x, out, accumulate);
}

#define DPCORE_BIAS_HALF(H)                                                                                      \
  template void broadcast_channels_half<H>(int64_t, int64_t, int64_t, const H*, H*, cudaStream_t);              \
  template void channel_sum_half<H>(int64_t, int64_t, int64_t, const H*, H*, bool, cudaStream_t);
DPCORE_BIAS_HALF(BFloat16)
DPCORE_BIAS_HALF(Float16)
#undef DPCORE_BIAS_HALF

void broadcast_rows(int64_t rows, int64_t cols, const float* bias, float* y, cudaStream_t stream) {
  const int64_t total = rows * cols;
  if (total == 0) return;
  launch("broadcast_rows_kernel", broadcast_rows_kernel, blocks_for(total, kElementwiseThreads), kElementwiseThreads, stream, total, cols, bias, y);
}

void bias_activation(int64_t N, int64_t channels, int64_t inner, const float* bias, bool relu, float* y,
                     cudaStream_t stream) {
  const int64_t total = N * channels * inner;
  if (total == 0 || (!bias && !relu)) return;
  launch("bias_activation_kernel", bias_activation_kernel, blocks_for(total, kElementwiseThreads), kElementwiseThreads, stream, total, channels, inner, bias, relu, y);
}

// A channel of many values (a conv layer's bias gradient at a large batch: outer * inner
// = 4M per channel, 16 channels) is cut into slices of at least kMinSliceValues, so that
// there are enough blocks to fill the GPU; a second pass adds up each channel's slice sums
// (in a fixed tree, like the first). The slicing depends on the shape only, never on the
// GPU, so the sum is the same bits on every run and every GPU.
void channel_sum(int64_t outer, int64_t channels, int64_t inner, const float* x, float* out, bool accumulate,
                 cudaStream_t stream) {
  if (channels == 0) return;
  constexpr int64_t kMinSliceValues = 16 * kChannelSumThreads, kMaxSlices = 1024;
  const int64_t per_channel = outer * inner;
  const int64_t slices = std::clamp<int64_t>(per_channel / kMinSliceValues, 1, kMaxSlices);
  const int64_t chunk = (per_channel + slices - 1) / slices;
  const unsigned channel_blocks = unsigned(std::min<int64_t>(channels, 65535));
  if (slices == 1) {
    launch("channel_sum_kernel", channel_sum_kernel, dim3(1, channel_blocks), kChannelSumThreads, stream, outer, channels,
           inner, chunk, x, out, accumulate);
    return;
  }
  // partial[c][s]: the second pass is this same sum with outer = 1 and inner = slices.
  dpcore::kernels::cuda_runtime::Workspace partial(size_t(channels * slices) * sizeof(float), stream);
  launch("channel_sum_kernel", channel_sum_kernel, dim3(unsigned(slices), channel_blocks), kChannelSumThreads, stream, outer,
         channels, inner, chunk, x, partial.floats(), false);
  launch("channel_sum_kernel", channel_sum_kernel, dim3(1, channel_blocks), kChannelSumThreads, stream, int64_t(1), channels,
         slices, slices, partial.floats(), out, accumulate);
}

}  // namespace dpcore::kernels::cuda
