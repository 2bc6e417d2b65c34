// gelu in both of PyTorch's forms on flat arrays of float, bfloat16 or float16, through map()
// (kernels/cuda/map.cuh: 16-bit values widened, each result rounded once).
// The formulas and their order are PyTorch's CUDA ones (aten/src/ATen/native/cuda/
// ActivationGeluKernel.cu) and the CPU kernel's (kernels/cpu/gelu.cpp); erff, tanhf and
// expf are CUDA's full-precision functions (within 2 ulp), not the __expf intrinsics, so
// the GPU stays within a few roundings of the float64 reference where the tails of erf
// cancel against 1.
#include <cmath>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/map.cuh"

namespace dpcore::kernels::cuda {

namespace {

constexpr float kAlpha = float(M_SQRT1_2);                           // 1 / sqrt(2)
constexpr float kNormalDensity = float(M_2_SQRTPI * M_SQRT1_2 * 0.5);  // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = float(M_SQRT2 * M_2_SQRTPI * 0.5);      // sqrt(2 / pi)
constexpr float kCubic = 0.044715f;

struct GeluErf {
  __device__ float operator()(float x, float) const { return x * 0.5f * (1.f + erff(x * kAlpha)); }
};
struct GeluTanh {
  __device__ float operator()(float x, float) const {
    return 0.5f * x * (1.f + tanhf(kSqrt2OverPi * (x + kCubic * (x * x * x))));
  }
};
// a = dy, b = x: dy * (Phi(x) + x phi(x)).
struct GeluErfBackward {
  __device__ float operator()(float dy, float x) const {
    const float cdf = 0.5f * (1.f + erff(x * kAlpha));
    const float pdf = kNormalDensity * expf(x * x * -0.5f);
    return dy * (cdf + x * pdf);
  }
};
// a = dy, b = x: the product rule on 0.5 x * (1 + tanh(inner)).
struct GeluTanhBackward {
  __device__ float operator()(float dy, float x) const {
    const float x_sq = x * x, tanh_inner = tanhf(kSqrt2OverPi * (x + kCubic * (x_sq * x)));
    const float left_derivative = 0.5f * (1.f + tanh_inner);
    const float inner_derivative = kSqrt2OverPi * (1.f + 3.f * kCubic * x_sq);
    const float right_derivative = 0.5f * x * (1.f - tanh_inner * tanh_inner) * inner_derivative;
    return dy * (left_derivative + right_derivative);
  }
};

}  // namespace

template <class X>
void gelu_forward(GeluApproximate form, int64_t n, const X* x, X* y, cudaStream_t stream) {
  if (form == GeluApproximate::None)
    map(n, x, nullptr, y, GeluErf{}, stream);
  else
    map(n, x, nullptr, y, GeluTanh{}, stream);
}

template <class X>
void gelu_backward(GeluApproximate form, int64_t n, const X* dy, const X* x, X* dx, cudaStream_t stream) {
  if (form == GeluApproximate::None)
    map(n, dy, x, dx, GeluErfBackward{}, stream);
  else
    map(n, dy, x, dx, GeluTanhBackward{}, stream);
}

#define DPCORE_INSTANTIATE(X)                                                                  \
  template void gelu_forward<X>(GeluApproximate, int64_t, const X*, X*, cudaStream_t);          \
  template void gelu_backward<X>(GeluApproximate, int64_t, const X*, const X*, X*, cudaStream_t);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cuda
