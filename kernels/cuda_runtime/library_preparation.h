// What CudaGraph (graph.cu) prepares on a capture stream before its first capture, which
// the ops would otherwise create on first use, inside the capture: the stream's cuDNN and
// cuBLAS handles (library_handles.cu). A build without the libraries (DPCORE_CUDA=HOST)
// has no handles to make (no_library_handles.cpp).
#pragma once

#include <cuda_runtime_api.h>

namespace dpcore::kernels::cuda_runtime {

void prepare_library_handles(int device, cudaStream_t stream);

}  // namespace dpcore::kernels::cuda_runtime
