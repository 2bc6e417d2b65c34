// Bias and bias-gradient kernels used around the GEMMs of linear and conv2d, by the hand
// engines and the library (cuBLAS, cuDNN) engines alike.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

constexpr int kSumThreads = 256;

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

// One block per channel: its threads stride over (o, i) in a fixed pattern and the block
// sum adds the partials in a fixed tree, so the gradient is deterministic.
__global__ void channel_sum_kernel(int64_t outer, int64_t channels, int64_t inner, const float* x, float* out,
                                   bool accumulate) {
  const int64_t per_channel = outer * inner;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    float partial = 0.f;
    for (int64_t t = threadIdx.x; t < per_channel; t += blockDim.x) {
      const int64_t o = t / inner, i = t - o * inner;
      partial += x[(o * channels + c) * inner + i];
    }
    const float total = block_sum(partial);
    if (threadIdx.x == 0) out[c] = accumulate ? out[c] + total : total;
  }
}

}  // namespace

void broadcast_rows(int64_t rows, int64_t cols, const float* bias, float* y, cudaStream_t stream) {
  const int64_t total = rows * cols;
  if (total == 0) return;
  broadcast_rows_kernel<<<blocks_for(total, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(total, cols, bias, y);
  CUDA_LAUNCH_CHECK();
}

void bias_activation(int64_t N, int64_t channels, int64_t inner, const float* bias, bool relu, float* y,
                     cudaStream_t stream) {
  const int64_t total = N * channels * inner;
  if (total == 0 || (!bias && !relu)) return;
  bias_activation_kernel<<<blocks_for(total, kElementwiseThreads), kElementwiseThreads, 0, stream>>>(
      total, channels, inner, bias, relu, y);
  CUDA_LAUNCH_CHECK();
}

void channel_sum(int64_t outer, int64_t channels, int64_t inner, const float* x, float* out, bool accumulate,
                 cudaStream_t stream) {
  if (channels == 0) return;
  channel_sum_kernel<<<unsigned(std::min<int64_t>(channels, 65535)), kSumThreads, 0, stream>>>(outer, channels, inner,
                                                                                             x, out, accumulate);
  CUDA_LAUNCH_CHECK();
}

}  // namespace dpcore::kernels::cuda
