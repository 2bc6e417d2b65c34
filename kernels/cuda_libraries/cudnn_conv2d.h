// cuDNN 9 (the legacy convolution API) as the library convolution engine. Descriptors
// and algorithms are set up once per (device, element type, shape, math mode) and cached. Algorithms
// come from cuDNN's heuristics (cudnnGet*_v7, as PyTorch does without cudnn.benchmark):
// the choice is the same on every run and queries nothing on the GPU, so it also works
// during graph capture. Only deterministic algorithms are accepted, and in FP32 mode only
// FMA (non-tensor-core) ones that are neither Winograd nor FFT (they round in a transformed
// domain: see cudnn_conv2d.cu); with engine_config().tf32 TF32 tensor-core algorithms and
// those transforms are allowed. 16-bit tensors (bfloat16, float16) run in cuDNN's
// pseudo-half configurations, products accumulated in float32 and each output rounded
// once, on tensor-core algorithms, still deterministic and without the transforms (the
// tests bound a direct sum's error). Replica threads enqueue convolutions without waiting
// on each other: the plan cache is locked only while a plan is made or an algorithm picked.
// Bias and relu are not done here: kernels::cuda's bias helpers run around these calls.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/half_types.h"
#include "kernels/shapes.h"

namespace dpcore::kernels::cuda_libraries::cudnn {

// T is float, BFloat16 or Float16. y = conv(x, w) (accumulate = false) or y = y + conv(x, w)
// (for 16-bit outputs the sum rounded once: how the 16-bit bias is added).
template <class T>
void conv2d_forward(const kernels::Conv2dShape& s, const T* x, const T* w, T* y, bool accumulate, cudaStream_t stream);
template <class T>
void conv2d_backward_data(const kernels::Conv2dShape& s, const T* dy, const T* w, T* dx, cudaStream_t stream);
// dw = grad (accumulate = false) or dw += grad.
template <class T>
void conv2d_backward_weight(const kernels::Conv2dShape& s, const T* x, const T* dy, T* dw, bool accumulate,
                            cudaStream_t stream);

}  // namespace dpcore::kernels::cuda_libraries::cudnn
