// conv2d with 16-bit tensors (issue 27) on the tensor-core GEMM of gemm_half.cu: the CPU's
// data flow (kernels/cpu/half/conv2d_half.cpp), im2col + GEMM, every output 16-bit and
// rounded once from its float32 value:
//   forward          y_n  = rounded(W[K, CRS] * col_n + bias)      one batched GEMM per chunk of images
//   backward data    dx_n = rounded(col2im(W^T * dy_n))            the column gradient in float32
//   backward weight  dW   = rounded(sum_n dy_n[K, PQ] * col_n^T)   images side by side, float32 sum
// The float32 convolution's kernels gather their operand tiles straight from x (implicit
// GEMM); here the 16-bit columns are written out once into a workspace, which keeps the
// kernels short and the tensor-core GEMM the one tested kernel that multiplies. col2im
// gathers (one thread per input element, its windows in a fixed order) instead of
// scattering with atomics, so every bit is the same on every run.
#include <algorithm>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/half_types.h"

namespace dpcore::kernels::cuda {

namespace {

// The shape as the kernels index it (check_conv_shape has bounded every size to int32).
struct ConvIndex {
  int C, H, W, K, R, S, P, Q, stride_h, stride_w, pad_h, pad_w;
  int64_t crs, pq, image_in, image_out;
  explicit ConvIndex(const Conv2dShape& s)
      : C(int(s.C)), H(int(s.H)), W(int(s.W)), K(int(s.K)), R(int(s.R)), S(int(s.S)), P(int(s.P)), Q(int(s.Q)),
        stride_h(int(s.stride_h)), stride_w(int(s.stride_w)), pad_h(int(s.pad_h)), pad_w(int(s.pad_w)),
        crs(s.C * s.R * s.S), pq(s.P * s.Q), image_in(s.C * s.H * s.W), image_out(s.K * s.P * s.Q) {}
};

// The columns of `images` images from x: row j = (c, r, s), pixel (p, q) of image i at
// col[i * image_stride + j * ld + p * Q + q]: the forward's [images][CRS][PQ] (image_stride
// CRS*PQ, ld PQ) or the weight gradient's [CRS][images * PQ] (image_stride PQ, ld images*PQ).
// Padding reads as zero. A thread per column element, grid-stride.
template <class H>
__global__ void im2col_half_kernel(ConvIndex d, int64_t images, const H* x, int64_t image_stride, int64_t ld, H* col) {
  const int64_t n = images * d.crs * d.pq;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pixel = e % d.pq, j = (e / d.pq) % d.crs, i = e / (d.pq * d.crs);
    const int c = int(j / (d.R * d.S)), r = int(j / d.S) % d.R, s = int(j % d.S);
    const int p = int(pixel / d.Q), q = int(pixel % d.Q);
    const int h = p * d.stride_h - d.pad_h + r, w = q * d.stride_w - d.pad_w + s;
    const bool inside = unsigned(h) < unsigned(d.H) && unsigned(w) < unsigned(d.W);
    col[i * image_stride + j * ld + pixel] = inside ? x[i * d.image_in + (int64_t(c) * d.H + h) * d.W + w] : H{0};
  }
}

// dx of `images` images from their float32 column gradients [images][CRS][PQ]: a thread per
// input element adds the entries of every window that read it, r then s ascending (the
// CPU's col2im order), and rounds the sum once.
template <class H>
__global__ void col2im_half_kernel(ConvIndex d, int64_t images, const float* col, H* dx) {
  const int64_t n = images * d.image_in;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int w = int(e % d.W), h = int((e / d.W) % d.H), c = int((e / (int64_t(d.W) * d.H)) % d.C);
    const int64_t i = e / d.image_in;
    const float* image_col = col + i * d.crs * d.pq;
    float total = 0.f;
    for (int r = 0; r < d.R; ++r) {
      const int p_stride = h + d.pad_h - r;  // = p * stride_h for the output row p that read row h
      if (p_stride < 0 || p_stride % d.stride_h != 0 || p_stride / d.stride_h >= d.P) continue;
      const int p = p_stride / d.stride_h;
      for (int s = 0; s < d.S; ++s) {
        const int q_stride = w + d.pad_w - s;
        if (q_stride < 0 || q_stride % d.stride_w != 0 || q_stride / d.stride_w >= d.Q) continue;
        const int q = q_stride / d.stride_w;
        total += image_col[((int64_t(c) * d.R + r) * d.S + s) * d.pq + int64_t(p) * d.Q + q];
      }
    }
    dx[e] = from_float<H>(total);
  }
}

// dy of `images` images as one [K][images * PQ] matrix (the weight gradient's left operand).
template <class H>
__global__ void gather_dy_half_kernel(ConvIndex d, int64_t images, const H* dy, H* out) {
  const int64_t n = images * d.image_out, ld = images * d.pq;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pixel = e % d.pq, k = (e / d.pq) % d.K, i = e / d.image_out;
    out[k * ld + i * d.pq + pixel] = dy[e];
  }
}

// dw = rounded(sum (+ the old dw)), one rounding per element.
template <class H>
__global__ void finish_weight_grad_half_kernel(int64_t n, const float* sum, H* dw, bool accumulate) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    dw[e] = from_float<H>(accumulate ? to_float(dw[e]) + sum[e] : sum[e]);
}

// Images per chunk: as many as keep the chunk's workspace under kWorkspaceBytes (at least
// one), a function of the shape alone, so the order of every sum is too.
constexpr int64_t kWorkspaceBytes = int64_t(64) << 20;
int64_t images_per_chunk(int64_t N, int64_t bytes_per_image) {
  return std::clamp<int64_t>(kWorkspaceBytes / std::max<int64_t>(bytes_per_image, 1), 1, std::max<int64_t>(N, 1));
}

template <class K_, class... Args>
void launch_elementwise(const char* name, K_ kernel, int64_t work, cudaStream_t stream, Args... args) {
  if (work > 0) launch(name, kernel, blocks_for(work, kElementwiseThreads), kElementwiseThreads, stream, args...);
}

}  // namespace

template <class H>
void conv2d_forward_half(const Conv2dShape& s, const H* x, const H* w, const H* bias, H* y, cudaStream_t stream) {
  check_conv_shape("conv2d", s);
  const ConvIndex d(s);
  const int64_t chunk = images_per_chunk(s.N, d.crs * d.pq * int64_t(sizeof(H)));
  cuda_runtime::Workspace col(size_t(std::max<int64_t>(1, chunk * d.crs * d.pq)) * sizeof(H), stream);
  H* c = static_cast<H*>(col.data());
  for (int64_t n0 = 0; n0 < s.N; n0 += chunk) {
    const int64_t images = std::min(chunk, s.N - n0);
    H* y_chunk = y + n0 * d.image_out;
    launch_elementwise("im2col_half_kernel", im2col_half_kernel<H>, images * d.crs * d.pq, stream, d, images,
                       x + n0 * d.image_in, d.crs * d.pq, d.pq, c);
    if (bias) broadcast_channels_half(images, s.K, d.pq, bias, y_chunk, stream);
    gemm_half_strided_batched<H, H>(false, false, s.K, d.pq, d.crs, 1.f, w, d.crs, 0, c, d.pq, d.crs * d.pq,
                                    bias ? 1.f : 0.f, y_chunk, d.pq, d.image_out, images, stream);
  }
}

template <class H>
void conv2d_backward_data_half(const Conv2dShape& s, const H* dy, const H* w, H* dx, cudaStream_t stream) {
  check_conv_shape("conv2d backward", s);
  const ConvIndex d(s);
  const int64_t chunk = images_per_chunk(s.N, d.crs * d.pq * int64_t(sizeof(float)));
  cuda_runtime::Workspace col(size_t(std::max<int64_t>(1, chunk * d.crs * d.pq)) * sizeof(float), stream);
  for (int64_t n0 = 0; n0 < s.N; n0 += chunk) {
    const int64_t images = std::min(chunk, s.N - n0);
    gemm_half_strided_batched<H, float>(true, false, d.crs, d.pq, s.K, 1.f, w, d.crs, 0, dy + n0 * d.image_out, d.pq,
                                        d.image_out, 0.f, col.floats(), d.pq, d.crs * d.pq, images, stream);
    launch_elementwise("col2im_half_kernel", col2im_half_kernel<H>, images * d.image_in, stream, d, images,
                       static_cast<const float*>(col.floats()), dx + n0 * d.image_in);
  }
}

template <class H>
void conv2d_backward_weight_half(const Conv2dShape& s, const H* x, const H* dy, H* dw, H* dbias, bool accumulate,
                                 cudaStream_t stream) {
  check_conv_shape("conv2d backward", s);
  const ConvIndex d(s);
  // As many images per GEMM as the workspace allows: its inner dimension, images * P*Q,
  // is what keeps the tensor cores busy on the deep layers' few pixels.
  const int64_t group = images_per_chunk(s.N, (d.crs + s.K) * d.pq * int64_t(sizeof(H)));
  cuda_runtime::Workspace sum(size_t(std::max<int64_t>(1, s.K * d.crs)) * sizeof(float), stream);
  cuda_runtime::Workspace col(size_t(std::max<int64_t>(1, group * d.crs * d.pq)) * sizeof(H), stream);
  cuda_runtime::Workspace dy_group(size_t(std::max<int64_t>(1, group * d.image_out)) * sizeof(H), stream);
  if (s.N == 0 && s.K * d.crs > 0) CUDA_CHECK(cudaMemsetAsync(sum.data(), 0, size_t(s.K * d.crs) * sizeof(float), stream));
  for (int64_t n0 = 0; n0 < s.N; n0 += group) {
    const int64_t images = std::min(group, s.N - n0), ld = images * d.pq;
    H* c = static_cast<H*>(col.data());
    H* g = static_cast<H*>(dy_group.data());
    launch_elementwise("im2col_half_kernel", im2col_half_kernel<H>, images * d.crs * d.pq, stream, d, images,
                       x + n0 * d.image_in, d.pq, ld, c);
    launch_elementwise("gather_dy_half_kernel", gather_dy_half_kernel<H>, images * d.image_out, stream, d, images,
                       dy + n0 * d.image_out, g);
    gemm_half_strided_batched<H, float>(false, true, s.K, d.crs, ld, 1.f, g, ld, 0, c, ld, 0, n0 == 0 ? 0.f : 1.f,
                                        sum.floats(), d.crs, 0, 1, stream);
  }
  launch_elementwise("finish_weight_grad_half_kernel", finish_weight_grad_half_kernel<H>, s.K * d.crs, stream,
                     s.K * d.crs, static_cast<const float*>(sum.floats()), dw, accumulate);
  if (dbias) channel_sum_half(s.N, s.K, d.pq, dy, dbias, accumulate, stream);
}

#define DPCORE_CONV2D_HALF(H)                                                                                    \
  template void conv2d_forward_half<H>(const Conv2dShape&, const H*, const H*, const H*, H*, cudaStream_t);     \
  template void conv2d_backward_data_half<H>(const Conv2dShape&, const H*, const H*, H*, cudaStream_t);         \
  template void conv2d_backward_weight_half<H>(const Conv2dShape&, const H*, const H*, H*, H*, bool, cudaStream_t);
DPCORE_CONV2D_HALF(BFloat16)
DPCORE_CONV2D_HALF(Float16)
#undef DPCORE_CONV2D_HALF

}  // namespace dpcore::kernels::cuda
