// conv2d backward-weight as a tiled implicit GEMM over dy and x:
//   dw[k, j = (c, r, s)] (+)= sum over i = (n, p, q) of dy[n, k, p, q] * x[n, c, p*stride - pad + r, q*stride - pad + s]
// GEMM with M = K, N = C*R*S and a long reduction N*P*Q (65536 for simplenet's first
// layer against a 16 x 27 output). So few output tiles cannot fill the GPU: the reduction
// is split (split-K, gemm_plan.h), each slice writes a partial dw, and the slices are added
// in a fixed order, which also applies `accumulate`. No float atomics: deterministic.
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

// Rows k, reduction index i = (n, p, q): dy[n, k, p, q]. The loader puts a row's threads
// side by side (LANES_ALONG_K): they read consecutive pixels of one plane. With PQ % 4 == 0
// (and dy 16-byte aligned: `vec`) a thread's 4 pixels (i % 4 == 0) are one float4.
struct GradGather {
  const float* dy;
  int K, PQ, NPQ;
  bool vec;

  struct Row {
    const float* grad;  // dy[0, k, :, :]
    bool valid;
  };
  __device__ Row row(int k) const { return Row{dy + int64_t(k < K ? k : 0) * PQ, k < K}; }
  __device__ void load4(const Row& row, int i, float (&v)[4]) const {
    int n = i / PQ, pq = i - n * PQ;
    if (vec && row.valid && i + 3 < NPQ) {
      const float4 t = __ldg(reinterpret_cast<const float4*>(row.grad + int64_t(n) * K * PQ + pq));
      v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
      return;
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      v[t] = row.valid && i + t < NPQ ? __ldg(row.grad + int64_t(n) * K * PQ + pq) : 0.f;
      if (++pq == PQ) pq = 0, ++n;
    }
  }
};

// Rows j = (c, r, s), reduction index i = (n, p, q): the input pixel under tap (r, s) of
// output pixel (p, q), i.e. the im2col matrix transposed.
struct InputGather {
  const float* x;
  int C, H, W, R, S, RS, CRS, P, Q, PQ, NPQ;
  int stride_h, stride_w, pad_h, pad_w;

  struct Row {
    const float* plane;  // x[0, c, :, :]
    int dh, dw;          // r - pad_h, s - pad_w
    bool valid;
  };
  __device__ Row row(int j) const {
    Row row;
    row.valid = j < CRS;
    if (!row.valid) j = 0;
    const int c = j / RS, r = (j - c * RS) / S, s = j - c * RS - r * S;
    row.plane = x + int64_t(c) * H * W;
    row.dh = r - pad_h;
    row.dw = s - pad_w;
    return row;
  }
  __device__ void load4(const Row& row, int i, float (&v)[4]) const {
    int n = i / PQ, pq = i - n * PQ, p = pq / Q, q = pq - p * Q;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int h = p * stride_h + row.dh, w = q * stride_w + row.dw;
      const bool inside = row.valid && i + t < NPQ && unsigned(h) < unsigned(H) && unsigned(w) < unsigned(W);
      v[t] = inside ? __ldg(row.plane + int64_t(n) * C * H * W + h * W + w) : 0.f;
      if (++q == Q) {
        q = 0;
        if (++p == P) p = 0, ++n;
      }
    }
  }
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    conv2d_backward_weight_kernel(GradGather a, InputGather b, int chunk, float beta, float* dw, float* partial) {
  const int m0 = blockIdx.x * Cfg::BM, n0 = blockIdx.y * Cfg::BN;
  const int i_begin = blockIdx.z * chunk, i_end = min(a.NPQ, i_begin + chunk);
  tile::LoadGather<Cfg, Cfg::BM, GradGather, true> load_a(a, m0);
  tile::LoadGather<Cfg, Cfg::BN, InputGather> load_b(b, n0);
  __shared__ __align__(16) tile::SharedTiles<Cfg> smem;
  float acc[Cfg::TM][Cfg::TN];
  tile::multiply_tiles<Cfg>(smem, load_a, load_b, i_begin, i_end, acc);
  if (gridDim.z == 1) {
    tile::store_tile<Cfg>(acc, m0, n0, a.K, b.CRS, 1.f, beta, dw, b.CRS, false);
  } else {
    float* slice = partial + int64_t(blockIdx.z) * a.K * b.CRS;
    tile::store_tile<Cfg>(acc, m0, n0, a.K, b.CRS, 1.f, 0.f, slice, b.CRS, false);
  }
}

template <class Cfg>
void launch_backward_weight(const GradGather& a, const InputGather& b, const GemmPlan& plan, bool accumulate,
                            float* dw, cudaStream_t stream) {
  const dim3 grid(unsigned((a.K + Cfg::BM - 1) / Cfg::BM), unsigned((b.CRS + Cfg::BN - 1) / Cfg::BN),
                  unsigned(plan.slices));
  const size_t dw_size = size_t(a.K) * b.CRS;
  dpcore::kernels::cuda_runtime::Workspace partial(plan.slices > 1 ? plan.slices * dw_size * sizeof(float) : 0, stream);
  const float beta = accumulate ? 1.f : 0.f;
  launch("conv2d_backward_weight_kernel", conv2d_backward_weight_kernel<Cfg>, grid, Cfg::THREADS, stream, a, b,
         int(plan.chunk), beta, dw, partial.floats());
  if (plan.slices > 1) split_k_reduce(plan.slices, a.K, b.CRS, partial.floats(), 1.f, beta, dw, b.CRS, stream);
}

}  // namespace

void conv2d_backward_weight(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* dbias,
                            bool accumulate, cudaStream_t stream) {
  check_conv_shape("conv2d backward", s);
  if (dbias) channel_sum(s.N, s.K, s.P * s.Q, dy, dbias, accumulate, stream);
  if (s.w_size() == 0) return;
  const int npq = int(s.N * s.P * s.Q);
  if (npq == 0) {  // an empty batch: the gradient is 0 (or unchanged when accumulating)
    split_k_reduce(0, s.K, s.C * s.R * s.S, nullptr, 1.f, accumulate ? 1.f : 0.f, dw, s.C * s.R * s.S, stream);
    return;
  }
  const GradGather a{dy, int(s.K), int(s.P * s.Q), npq, s.P * s.Q % 4 == 0 && aligned16(dy)};
  InputGather b{};
  b.x = x;
  b.C = int(s.C), b.H = int(s.H), b.W = int(s.W), b.R = int(s.R), b.S = int(s.S);
  b.RS = int(s.R * s.S), b.CRS = int(s.C * s.R * s.S);
  b.P = int(s.P), b.Q = int(s.Q), b.PQ = int(s.P * s.Q), b.NPQ = npq;
  b.stride_h = int(s.stride_h), b.stride_w = int(s.stride_w), b.pad_h = int(s.pad_h), b.pad_w = int(s.pad_w);
  const GemmPlan plan = plan_gemm(s.K, b.CRS, npq, true, sm_count());
  if (plan.large) {
    launch_backward_weight<tile::Large>(a, b, plan, accumulate, dw, stream);
  } else {
    launch_backward_weight<tile::Small>(a, b, plan, accumulate, dw, stream);
  }
}

}  // namespace dpcore::kernels::cuda
