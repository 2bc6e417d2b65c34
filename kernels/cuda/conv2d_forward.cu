// conv2d forward as a tiled implicit GEMM:
//   y[m = (n, p, q), k] = sum over j = (c, r, s) of x[n, c, p*stride - pad + r, q*stride - pad + s] * w[k, j]
// i.e. GEMM with M = N*P*Q, N = K, reduction C*R*S. The "A" tile (the im2col matrix) is
// never stored: ForwardGather reads it from x on the fly, so the kernel moves x once per
// tile column instead of materializing the R*S times larger im2col buffer. The epilogue
// adds the bias and applies relu, so a fused conv+bias+relu writes y exactly once.
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

// Rows m = (n, p, q) of the output, reduction index j = (c, r, s).
struct ForwardGather {
  const float* x;
  int C, H, W, R, S, RS, CRS, Q, PQ, M;
  int stride_h, stride_w, pad_h, pad_w;

  struct Row {
    const float* image;
    int h0, w0;  // top-left input position of the output pixel's window
    bool valid;
  };
  __device__ Row row(int m) const {
    Row row;
    row.valid = m < M;
    if (!row.valid) m = 0;
    const int n = m / PQ, pq = m - n * PQ, p = pq / Q, q = pq - p * Q;
    row.image = x + int64_t(n) * C * H * W;
    row.h0 = p * stride_h - pad_h;
    row.w0 = q * stride_w - pad_w;
    return row;
  }
  __device__ void load4(const Row& row, int j, float (&v)[4]) const {
    // Decode j once; the next three are one step further along s, then r, then c.
    int c = j / RS, r = (j - c * RS) / S, s = j - c * RS - r * S;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int h = row.h0 + r, w = row.w0 + s;
      const bool inside = row.valid && j + t < CRS && unsigned(h) < unsigned(H) && unsigned(w) < unsigned(W);
      v[t] = inside ? __ldg(row.image + (c * H + h) * W + w) : 0.f;  // padding reads as 0
      if (++s == S) {
        s = 0;
        if (++r == R) r = 0, ++c;
      }
    }
  }
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    conv2d_forward_kernel(ForwardGather g, const float* w, bool w_vec, int K, const float* bias, bool relu, float* y) {
  const int m0 = blockIdx.x * Cfg::BM, n0 = blockIdx.y * Cfg::BN;
  tile::LoadGather<Cfg, Cfg::BM, ForwardGather> load_a(g, m0);
  tile::LoadKContiguous<Cfg, Cfg::BN> load_b(w, g.CRS, K, g.CRS, w_vec, n0);  // w[k, j] at w[k * CRS + j]
  __shared__ __align__(16) tile::SharedTiles<Cfg> smem;
  float acc[Cfg::TM][Cfg::TN];
  tile::multiply_tiles<Cfg>(smem, load_a, load_b, 0, g.CRS, acc);

  // Row m is output pixel (n, pq): y[n, k, pq] for the tile's columns k. Decoded once per
  // thread, as store_tile_by_rows gives each thread one row.
  const int m = m0 + threadIdx.x % Cfg::BM;
  const int n = m / g.PQ, pq = m - n * g.PQ;
  float* out = y + int64_t(n) * K * g.PQ + pq;
  tile::store_tile_by_rows<Cfg>(acc, smem, [&](int col, float v) {
    const int k = n0 + col;
    if (m >= g.M || k >= K) return;
    v += bias ? bias[k] : 0.f;
    if (relu && v < 0.f) v = 0.f;  // written as a compare so NaN passes, as in relu_forward
    out[int64_t(k) * g.PQ] = v;
  });
}

template <class Cfg>
void launch_forward(const ForwardGather& g, const float* w, int K, const float* bias, bool relu, float* y,
                    cudaStream_t stream) {
  const dim3 grid(unsigned((g.M + Cfg::BM - 1) / Cfg::BM), unsigned((K + Cfg::BN - 1) / Cfg::BN));
  const bool w_vec = g.CRS % 4 == 0 && aligned16(w);
  launch("conv2d_forward_kernel", conv2d_forward_kernel<Cfg>, grid, Cfg::THREADS, stream, g, w, w_vec, K, bias, relu, y);
}

void forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, bool relu, float* y,
             cudaStream_t stream) {
  check_conv_shape("conv2d", s);
  if (s.y_size() == 0) return;
  ForwardGather g{};
  g.x = x;
  g.C = int(s.C), g.H = int(s.H), g.W = int(s.W);
  g.R = int(s.R), g.S = int(s.S), g.RS = int(s.R * s.S), g.CRS = int(s.C * s.R * s.S);
  g.Q = int(s.Q), g.PQ = int(s.P * s.Q), g.M = int(s.N * s.P * s.Q);
  g.stride_h = int(s.stride_h), g.stride_w = int(s.stride_w), g.pad_h = int(s.pad_h), g.pad_w = int(s.pad_w);
  if (plan_gemm(g.M, s.K, g.CRS, false, sm_count()).large) {
    launch_forward<tile::Large>(g, w, int(s.K), bias, relu, y, stream);
  } else {
    launch_forward<tile::Small>(g, w, int(s.K), bias, relu, y, stream);
  }
}

}  // namespace

void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                    cudaStream_t stream) {
  forward(s, x, w, bias, false, y, stream);
}

void conv2d_relu_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y,
                              cudaStream_t stream) {
  forward(s, x, w, bias, true, y, stream);
}

}  // namespace dpcore::kernels::cuda
