// conv2d and linear routed to the engine engine_config() selects: the hand kernels, or
// cuDNN / cuBLAS, or (auto) whichever was faster when this op and shape were first seen.
// The bias and relu around the library calls use the same helper kernels as the hand
// path, so both engines compute the same function.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/half_types.h"
#include "kernels/shapes.h"

namespace dpcore::kernels::cuda_libraries {

// y = conv(x, w) + bias, then relu when `relu` (fused in the hand kernel's epilogue).
void dispatch_conv2d_forward(const kernels::Conv2dShape& s, const float* x, const float* w, const float* bias, bool relu,
                    float* y, cudaStream_t stream);
// The 16-bit forward (H = BFloat16 or Float16; no relu): the hand im2col + tensor-core GEMM
// or cuDNN in its pseudo-half mode, both accumulating in float32 and adding the bias
// before the one rounding of each output.
template <class H>
void dispatch_conv2d_forward(const kernels::Conv2dShape& s, const H* x, const H* w, const H* bias, H* y,
                             cudaStream_t stream);
// The backwards, T = float, BFloat16 or Float16 (dbias may be null).
template <class T>
void dispatch_conv2d_backward_data(const kernels::Conv2dShape& s, const T* dy, const T* w, T* dx, cudaStream_t stream);
template <class T>
void dispatch_conv2d_backward_weight(const kernels::Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias,
                                     bool accumulate, cudaStream_t stream);

void dispatch_linear_forward(const kernels::LinearShape& s, const float* x, const float* w, const float* bias, float* y,
                    cudaStream_t stream);
void dispatch_linear_backward_data(const kernels::LinearShape& s, const float* dy, const float* w, float* dx,
                          cudaStream_t stream);
void dispatch_linear_backward_weight(const kernels::LinearShape& s, const float* x, const float* dy, float* dw, float* dbias,
                            bool accumulate, cudaStream_t stream);

// batched_matmul, on the GEMM engine (--gemm-engine): the hand strided-batched sgemm or cuBLAS.
void dispatch_batched_matmul(const kernels::BatchedMatmulShape& s, const float* a, const float* b, float* c,
                             cudaStream_t stream);

// linear and batched_matmul with 16-bit tensors (H = BFloat16 or Float16, the contracts of
// kernels::cuda's *_half), on the same GEMM engine: the hand tensor-core GEMM or cuBLAS's,
// both accumulating in float32 and rounding each output once.
template <class H>
void dispatch_linear_forward(const kernels::LinearShape& s, const H* x, const H* w, const H* bias, H* y,
                             cudaStream_t stream);
template <class H>
void dispatch_linear_backward_data(const kernels::LinearShape& s, const H* dy, const H* w, H* dx, cudaStream_t stream);
template <class H>
void dispatch_linear_backward_weight(const kernels::LinearShape& s, const H* x, const H* dy, H* dw, H* dbias,
                                     bool accumulate, cudaStream_t stream);
template <class H>
void dispatch_batched_matmul(const kernels::BatchedMatmulShape& s, const H* a, const H* b, H* c, cudaStream_t stream);

}  // namespace dpcore::kernels::cuda_libraries
