// A build without the NVIDIA libraries (DPCORE_CUDA=HOST) has no library handles: a
// capture stream needs none made before it captures (library_preparation.h).
#include "kernels/cuda_runtime/library_preparation.h"

namespace dpcore::kernels::cuda_runtime {

void prepare_library_handles(int, cudaStream_t) {}

}  // namespace dpcore::kernels::cuda_runtime
