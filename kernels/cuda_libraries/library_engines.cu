#include "kernels/cuda_libraries/library_engines.h"

#include "kernels/cuda_libraries/cublas_linear.h"
#include "kernels/cuda_libraries/cudnn_conv2d.h"

namespace dpcore::kernels::cuda_libraries {

namespace {

template <class T>
LibraryConv<T> cudnn_conv() {
  return {cudnn::conv2d_forward<T>, cudnn::conv2d_backward_data<T>, cudnn::conv2d_backward_weight<T>};
}

}  // namespace

const LibraryEngines* library_engines() {
  static const LibraryEngines engines{cudnn_conv<float>(),
                                      cudnn_conv<BFloat16>(),
                                      cudnn_conv<Float16>(),
                                      cublas::sgemm,
                                      cublas::sgemm_strided_batched,
                                      cublas::gemm_half_strided_batched<BFloat16, BFloat16>,
                                      cublas::gemm_half_strided_batched<Float16, Float16>};
  return &engines;
}

}  // namespace dpcore::kernels::cuda_libraries
