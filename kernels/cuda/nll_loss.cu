// nll loss on log-probabilities. The loss is one block's fixed-order sum; a target out of
// range gives NaN (never an out-of-bounds read) and is reported by the runtime's target check.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

constexpr int kLossThreads = 256;

// One block for the whole batch: each thread adds a fixed set of rows, then a fixed tree.
__global__ void nll_loss_forward_kernel(int64_t rows, int64_t cols, const float* logp, const int64_t* target,
                                        float* loss_sum) {
  float partial = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = target[r];
    partial -= t >= 0 && t < cols ? logp[r * cols + t] : NAN;  // never read out of bounds
  }
  const float total = block_sum(partial);
  if (threadIdx.x == 0) loss_sum[0] = total;
}

__global__ void nll_loss_backward_kernel(int64_t rows, int64_t cols, const float* grad_per_row, const int64_t* target,
                                         float* dlogp) {
  const float g = -__ldg(grad_per_row);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = target[i / cols];
    dlogp[i] = t >= 0 && t < cols ? (i % cols == t ? g : 0.f) : NAN;
  }
}

}  // namespace

void nll_loss_forward(int64_t rows, int64_t cols, const float* logp, const int64_t* target, float* loss_sum,
                      cudaStream_t stream) {
  launch("nll_loss_forward_kernel", nll_loss_forward_kernel, 1, kLossThreads, stream, rows, cols, logp, target, loss_sum);
}

void nll_loss_backward(int64_t rows, int64_t cols, const float* grad_per_row, const int64_t* target, float* dlogp,
                       cudaStream_t stream) {
  if (rows * cols == 0) return;
  launch("nll_loss_backward_kernel", nll_loss_backward_kernel, blocks_for(rows * cols, kElementwiseThreads), kElementwiseThreads, stream, rows, cols, grad_per_row, target, dlogp);
}

}  // namespace dpcore::kernels::cuda
