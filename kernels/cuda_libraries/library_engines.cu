// The one entry point of libdpcore_cuda_libraries.so (library_engines.h).
#include "kernels/cuda_libraries/library_engines.h"

#include "kernels/cuda_libraries/cublas_linear.h"
#include "kernels/cuda_libraries/cudnn_conv2d.h"
#include "kernels/cuda_runtime/library_handles.h"

namespace dpcore::kernels::cuda_libraries {

namespace {

template <class T>
LibraryConv<T> cudnn_conv() {
  return {cudnn::conv2d_forward<T>, cudnn::conv2d_backward_data<T>, cudnn::conv2d_backward_weight<T>};
}

}  // namespace

}  // namespace dpcore::kernels::cuda_libraries

extern "C" const dpcore::kernels::cuda_libraries::LibraryEngines* dpcore_cuda_library_engines() {
  using namespace dpcore::kernels;
  using namespace dpcore::kernels::cuda_libraries;
  static const LibraryEngines engines{cudnn_conv<float>(),
                                      cudnn_conv<BFloat16>(),
                                      cudnn_conv<Float16>(),
                                      cublas::sgemm,
                                      cublas::sgemm_strided_batched,
                                      cublas::gemm_half_strided_batched<BFloat16, BFloat16>,
                                      cublas::gemm_half_strided_batched<Float16, Float16>,
                                      cublas::gemm_half_strided_batched<BFloat16, float>,
                                      cublas::gemm_half_strided_batched<Float16, float>,
                                      cuda_runtime::make_library_handles};
  return &engines;
}
