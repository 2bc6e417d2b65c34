// cuDNN 9 (the legacy convolution API) as the library convolution engine. Descriptors
// and algorithms are set up once per (device, shape, math mode) and cached. Algorithms
// come from cuDNN's heuristics (cudnnGet*_v7, as PyTorch does without cudnn.benchmark):
// the choice is the same on every run and queries nothing on the GPU, so it also works
// during graph capture. Only deterministic algorithms are accepted, and in FP32 mode only
// FMA (non-tensor-core) ones that are neither Winograd nor FFT (they round in a transformed
// domain: see cudnn_conv2d.cu); with engine_config().tf32 TF32 tensor-core algorithms and
// those transforms are allowed. Replica threads enqueue convolutions without waiting on
// each other: the plan cache is locked only while a plan is made or an algorithm picked.
// Bias and relu are not done here: kernels::cuda::bias_activation / channel_sum follow.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/shapes.h"

namespace dpcore::kernels::cuda_libraries::cudnn {

void conv2d_forward(const kernels::Conv2dShape& s, const float* x, const float* w, float* y, cudaStream_t stream);
void conv2d_backward_data(const kernels::Conv2dShape& s, const float* dy, const float* w, float* dx,
                          cudaStream_t stream);
// dw = grad (accumulate = false) or dw += grad.
void conv2d_backward_weight(const kernels::Conv2dShape& s, const float* x, const float* dy, float* dw, bool accumulate,
                            cudaStream_t stream);

}  // namespace dpcore::kernels::cuda_libraries::cudnn
