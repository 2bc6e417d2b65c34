// cuDNN and cuBLAS handles, one per (device, stream). A handle is bound to one stream and
// is not safe to share between threads issuing on different streams, so each stream that
// runs library calls (the default stream, the side streams of replicas, a graph's capture
// stream) gets its own, created on first use and kept for the life of the process. Part of
// the library engines' module (kernels/cuda_libraries/library_engines.h).
// Creation allocates memory, so it must not happen inside a graph capture: CudaGraph
// creates the handles of its capture stream before capturing.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

namespace dpcore::kernels::cuda_runtime {

cudnnHandle_t cudnn_handle(int device, cudaStream_t stream);
// Both handles of the stream, made now (what prepare_library_handles asks of the module).
void make_library_handles(int device, cudaStream_t stream);
// With a private 32 MiB workspace (cublasSetWorkspace), so that cuBLAS never allocates
// while a graph is being captured; it comes from the device's caching allocator and so
// counts in its bytes in use and peak.
cublasHandle_t cublas_handle(int device, cudaStream_t stream);

}  // namespace dpcore::kernels::cuda_runtime
