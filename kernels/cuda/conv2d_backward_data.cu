// conv2d backward-data as a tiled implicit GEMM over dy and the (transposed, flipped) weights:
//   dx[m = (n, h, w), c] = sum over j = (k, r, s) of dy[n, k, p, q] * w[k, c, r, s]
// where p = (h + pad - r) / stride and q = (w + pad - s) / stride must divide exactly and
// fall inside the output; other terms are zero. GEMM with M = N*H*W, N = C, reduction
// K*R*S. Every dx element is produced by exactly one thread, so no col2im scatter and no
// atomics: the result is deterministic.
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

// Rows m = (n, h, w) of dx, reduction index j = (k, r, s): dy at the output pixel whose
// window puts tap (r, s) on (h, w).
struct DataGather {
  const float* dy;
  int K, H, W, R, S, RS, KRS, P, Q, HW, M;
  int stride_h, stride_w, pad_h, pad_w;

  struct Row {
    const float* grad;  // dy of image n
    int hp, wp;         // h + pad_h, w + pad_w
    bool valid;
  };
  __device__ Row row(int m) const {
    Row row;
    row.valid = m < M;
    if (!row.valid) m = 0;
    const int n = m / HW, hw = m - n * HW, h = hw / W, w = hw - h * W;
    row.grad = dy + int64_t(n) * K * P * Q;
    row.hp = h + pad_h;
    row.wp = w + pad_w;
    return row;
  }
  __device__ void load4(const Row& row, int j, float (&v)[4]) const {
    int k = j / RS, r = (j - k * RS) / S, s = j - k * RS - r * S;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      float value = 0.f;
      const int ht = row.hp - r, wt = row.wp - s;  // = p * stride when the tap lands on (h, w)
      if (row.valid && j + t < KRS && ht >= 0 && wt >= 0) {
        // Stride 1 (most layers) needs no division: this runs for every tap.
        const int p = stride_h == 1 ? ht : ht / stride_h, q = stride_w == 1 ? wt : wt / stride_w;
        if (p * stride_h == ht && q * stride_w == wt && p < P && q < Q) value = __ldg(row.grad + (k * P + p) * Q + q);
      }
      v[t] = value;
      if (++s == S) {
        s = 0;
        if (++r == R) r = 0, ++k;
      }
    }
  }
};

// Rows c, reduction index j = (k, r, s): w[k, c, r, s].
struct WeightGather {
  const float* w;
  int C, RS, KRS;

  struct Row {
    int c;
    bool valid;
  };
  __device__ Row row(int c) const { return Row{c, c < C}; }
  __device__ void load4(const Row& row, int j, float (&v)[4]) const {
    int k = j / RS, rs = j - k * RS;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      v[t] = row.valid && j + t < KRS ? __ldg(w + (k * C + row.c) * RS + rs) : 0.f;
      if (++rs == RS) rs = 0, ++k;
    }
  }
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    conv2d_backward_data_kernel(DataGather a, WeightGather b, float* dx) {
  const int m0 = blockIdx.x * Cfg::BM, n0 = blockIdx.y * Cfg::BN;
  tile::LoadGather<Cfg, Cfg::BM, DataGather> load_a(a, m0);
  tile::LoadGather<Cfg, Cfg::BN, WeightGather> load_b(b, n0);
  __shared__ __align__(16) tile::SharedTiles<Cfg> smem;
  float acc[Cfg::TM][Cfg::TN];
  tile::multiply_tiles<Cfg>(smem, load_a, load_b, 0, a.KRS, acc);

  // Row m is input pixel (n, hw): dx[n, c, hw] for the tile's columns c (one row per thread).
  const int m = m0 + threadIdx.x % Cfg::BM;
  const int n = m / a.HW, hw = m - n * a.HW;
  float* out = dx + int64_t(n) * b.C * a.HW + hw;
  tile::store_tile_by_rows<Cfg>(acc, smem, [&](int col, float v) {
    const int c = n0 + col;
    if (m < a.M && c < b.C) out[int64_t(c) * a.HW] = v;
  });
}

template <class Cfg>
void launch_backward_data(const DataGather& a, const WeightGather& b, float* dx, cudaStream_t stream) {
  const dim3 grid(unsigned((a.M + Cfg::BM - 1) / Cfg::BM), unsigned((b.C + Cfg::BN - 1) / Cfg::BN));
  launch("conv2d_backward_data_kernel", conv2d_backward_data_kernel<Cfg>, grid, Cfg::THREADS, stream, a, b, dx);
}

}  // namespace

void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx, cudaStream_t stream) {
  check_conv_shape("conv2d backward", s);
  if (s.x_size() == 0) return;
  DataGather a{};
  a.dy = dy;
  a.K = int(s.K), a.H = int(s.H), a.W = int(s.W), a.R = int(s.R), a.S = int(s.S);
  a.RS = int(s.R * s.S), a.KRS = int(s.K * s.R * s.S), a.P = int(s.P), a.Q = int(s.Q);
  a.HW = int(s.H * s.W), a.M = int(s.N * s.H * s.W);
  a.stride_h = int(s.stride_h), a.stride_w = int(s.stride_w), a.pad_h = int(s.pad_h), a.pad_w = int(s.pad_w);
  const WeightGather b{w, int(s.C), a.RS, a.KRS};
  if (plan_gemm(a.M, s.C, a.KRS, false, sm_count()).large) {
    launch_backward_data<tile::Large>(a, b, dx, stream);
  } else {
    launch_backward_data<tile::Small>(a, b, dx, stream);
  }
}

}  // namespace dpcore::kernels::cuda
