// The library engines of a build without the NVIDIA libraries (DPCORE_CUDA=HOST): there
// are none, and the dispatch (dispatch.cu) runs the hand kernels.
#include "kernels/cuda_libraries/library_engines.h"

namespace dpcore::kernels::cuda_libraries {

bool library_engines_in_build() { return false; }
const LibraryEngines* library_engines() { return nullptr; }

}  // namespace dpcore::kernels::cuda_libraries
