// scaled_dot_product_attention, FlashAttention-2's idea in its plainest form (read in
// Dao-AILab/flash-attention and karpathy/llm.c, written anew):
//   forward:  a block per (batch*head, tile of kQueryTile queries), a thread per query row.
//             The block walks the keys in tiles of kKeyTile, staged with the values in
//             shared memory; each thread keeps its query, a running max m, a running sum l
//             and an accumulator rescaled by exp(m_old - m_new) when m grows (the online
//             softmax), so no Tq x Tk matrix exists anywhere. It writes o and
//             lse = m + log(l), all the backward needs.
//   backward: D = rowsum(dO * O) per query row; then two kernels that each recompute
//             P = exp(q k^T * scale - lse) tile by tile: one over query tiles writes dQ, one
//             over key tiles writes dK and dV. Every output element is summed by one
//             thread in a fixed order: deterministic, no atomics.
// The head dimension is a compile-time bound (kAttentionMaxHeadDim, BERT's 64) so that a
// row lives in registers and a tile in a fixed shared array.
// One template over the element type T (float, BFloat16, Float16): 16-bit operands are
// widened as they are read (exact) and everything after is float32, as in the float32
// kernels; each 16-bit output element is rounded once, at its store. lse and D stay float32.
#include <cmath>

#include "kernels/half_types.h"

#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

constexpr int kMaxD = kAttentionMaxHeadDim;
constexpr int kQueryTile = 64;  // queries per block in the forward and dQ kernels (a thread each)
constexpr int kKeyTile = 32;    // keys staged in shared memory per step
constexpr int kKeysPerBlock = 64;   // keys per block in the dK/dV kernel (a thread each)
constexpr int kQueriesStaged = 32;  // queries staged in shared memory per step there

template <class T>
struct Args {
  int B, H, Tq, Tk, d;
  float scale;
  bool causal;
  const T* key_mask;  // [B, Tk], nonzero = attend; null: no padding
};

// Whether query i of batch b sees key j (both in range).
template <class T>
__device__ __forceinline__ bool sees(const Args<T>& a, int b, int i, int j) {
  return (!a.causal || j <= i) && (!a.key_mask || to_float(a.key_mask[b * a.Tk + j]) != 0.f);
}

__device__ __forceinline__ float dot(const float* x, const float* y, int d) {
  float acc = 0.f;
  for (int c = 0; c < d; ++c) acc += x[c] * y[c];
  return acc;
}

// rows [first, first + count) of a [rows, d] matrix into tile[count][kMaxD], widened to
// float32; rows past `rows` become zeros (never read as keys: the callers skip them).
template <class T>
__device__ __forceinline__ void stage_rows(float (*tile)[kMaxD], const T* src, int first, int count, int rows, int d) {
  for (int e = threadIdx.x; e < count * d; e += blockDim.x) {
    const int r = e / d, c = e % d;
    tile[r][c] = first + r < rows ? to_float(src[int64_t(first + r) * d + c]) : 0.f;
  }
}

// Under a causal mask, the queries [i0, i0 + kQueryTile) see no key past their last one. The
// bound is the block's, not the thread's, so that every thread meets the same barriers.
template <class T>
__device__ __forceinline__ int block_key_end(const Args<T>& a, int i0) {
  return a.causal ? min(a.Tk, i0 + kQueryTile) : a.Tk;
}

template <class T>
__global__ void attention_forward_kernel(Args<T> a, const T* q, const T* k, const T* v, T* o, float* lse) {
  __shared__ float k_tile[kKeyTile][kMaxD];
  __shared__ float v_tile[kKeyTile][kMaxD];
  const int bh = blockIdx.y, b = bh / a.H, d = a.d;
  const int i0 = blockIdx.x * kQueryTile, i = i0 + threadIdx.x;
  const bool active = i < a.Tq;
  const T* kb = k + int64_t(bh) * a.Tk * d;
  const T* vb = v + int64_t(bh) * a.Tk * d;
  const int64_t row = int64_t(bh) * a.Tq + i;

  float qi[kMaxD], acc[kMaxD];
  for (int c = 0; c < d; ++c) qi[c] = active ? to_float(q[row * d + c]) : 0.f, acc[c] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int key_end = block_key_end(a, i0);
  for (int j0 = 0; j0 < key_end; j0 += kKeyTile) {
    stage_rows(k_tile, kb, j0, kKeyTile, a.Tk, d);
    stage_rows(v_tile, vb, j0, kKeyTile, a.Tk, d);
    __syncthreads();
    if (active) {
      float scores[kKeyTile], tile_max = -INFINITY;
      for (int c = 0; c < kKeyTile; ++c) {
        const int j = j0 + c;
        scores[c] = j < a.Tk && sees(a, b, i, j) ? dot(qi, k_tile[c], d) * a.scale : -INFINITY;
        tile_max = fmaxf(tile_max, scores[c]);
      }
      if (tile_max > -INFINITY) {  // else the tile holds nothing this row sees: it is unchanged
        // What was summed under the old max shrinks by exp(m - m_new); 0 when nothing was (m = -inf).
        const float m_new = fmaxf(m, tile_max), rescale = expf(m - m_new);
        l *= rescale;
        for (int c = 0; c < d; ++c) acc[c] *= rescale;
        for (int c = 0; c < kKeyTile; ++c) {
          if (scores[c] == -INFINITY) continue;
          const float p = expf(scores[c] - m_new);
          l += p;
          for (int e = 0; e < d; ++e) acc[e] += p * v_tile[c][e];
        }
        m = m_new;
      }
    }
    __syncthreads();  // before the next tile overwrites the one still being read
  }
  if (!active) return;
  const float inv_l = l > 0.f ? 1.f / l : 0.f;  // a row that sees no key: o = 0, lse = -inf
  for (int c = 0; c < d; ++c) o[row * d + c] = from_float<T>(acc[c] * inv_l);
  lse[row] = l > 0.f ? m + logf(l) : -INFINITY;
}

// D[row] = sum_c dO[row, c] * O[row, c], a thread per row (of the stored, rounded O).
template <class T>
__global__ void attention_row_dot_kernel(int64_t rows, int d, const T* dout, const T* o, float* row_dot) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < rows; row += stride) {
    float acc = 0.f;
    for (int c = 0; c < d; ++c) acc += to_float(dout[row * d + c]) * to_float(o[row * d + c]);
    row_dot[row] = acc;
  }
}

// dQ_i = scale * sum_j P_ij (dP_ij - D_i) K_j with dP_ij = dO_i . V_j: the forward's grid,
// the same key tiles, P recomputed from the saved lse.
template <class T>
__global__ void attention_backward_dq_kernel(Args<T> a, const T* q, const T* k, const T* v, const float* lse,
                                             const float* row_dot, const T* dout, T* dq) {
  __shared__ float k_tile[kKeyTile][kMaxD];
  __shared__ float v_tile[kKeyTile][kMaxD];
  const int bh = blockIdx.y, b = bh / a.H, d = a.d;
  const int i0 = blockIdx.x * kQueryTile, i = i0 + threadIdx.x;
  const bool active = i < a.Tq;
  const int64_t row = int64_t(bh) * a.Tq + i;

  float qi[kMaxD], doi[kMaxD], acc[kMaxD];
  for (int c = 0; c < d; ++c) {
    qi[c] = active ? to_float(q[row * d + c]) : 0.f;
    doi[c] = active ? to_float(dout[row * d + c]) : 0.f;
    acc[c] = 0.f;
  }
  const float lse_i = active ? lse[row] : 0.f, d_i = active ? row_dot[row] : 0.f;
  const int key_end = block_key_end(a, i0);
  for (int j0 = 0; j0 < key_end; j0 += kKeyTile) {
    stage_rows(k_tile, k + int64_t(bh) * a.Tk * d, j0, kKeyTile, a.Tk, d);
    stage_rows(v_tile, v + int64_t(bh) * a.Tk * d, j0, kKeyTile, a.Tk, d);
    __syncthreads();
    for (int c = 0; active && c < kKeyTile; ++c) {
      const int j = j0 + c;
      if (j >= a.Tk || !sees(a, b, i, j)) continue;
      const float p = expf(dot(qi, k_tile[c], d) * a.scale - lse_i);
      const float ds = p * (dot(doi, v_tile[c], d) - d_i);
      for (int e = 0; e < d; ++e) acc[e] += ds * k_tile[c][e];
    }
    __syncthreads();
  }
  if (!active) return;
  for (int c = 0; c < d; ++c) dq[row * d + c] = from_float<T>(acc[c] * a.scale);
}

// dK_j = scale * sum_i dS_ij Q_i and dV_j = sum_i P_ij dO_i: a block per (batch*head, tile
// of kKeysPerBlock keys), a thread per key; the queries, their dO, lse and D staged in
// shared memory kQueriesStaged at a time.
template <class T>
__global__ void attention_backward_dkdv_kernel(Args<T> a, const T* q, const T* k, const T* v, const float* lse,
                                               const float* row_dot, const T* dout, T* dk, T* dv) {
  __shared__ float q_tile[kQueriesStaged][kMaxD];
  __shared__ float do_tile[kQueriesStaged][kMaxD];
  __shared__ float lse_tile[kQueriesStaged], d_tile[kQueriesStaged];
  const int bh = blockIdx.y, b = bh / a.H, d = a.d;
  const int j0 = blockIdx.x * kKeysPerBlock, j = j0 + threadIdx.x;
  const bool active = j < a.Tk;
  const int64_t key_row = int64_t(bh) * a.Tk + j, first_row = int64_t(bh) * a.Tq;

  float kj[kMaxD], vj[kMaxD], acc_k[kMaxD], acc_v[kMaxD];
  for (int c = 0; c < d; ++c) {
    kj[c] = active ? to_float(k[key_row * d + c]) : 0.f;
    vj[c] = active ? to_float(v[key_row * d + c]) : 0.f;
    acc_k[c] = acc_v[c] = 0.f;
  }
  // Under a causal mask no query before j0 sees this block's keys (block-wide, for the barriers).
  const int query_begin = a.causal ? j0 / kQueriesStaged * kQueriesStaged : 0;
  for (int i0 = query_begin; i0 < a.Tq; i0 += kQueriesStaged) {
    stage_rows(q_tile, q + first_row * d, i0, kQueriesStaged, a.Tq, d);
    stage_rows(do_tile, dout + first_row * d, i0, kQueriesStaged, a.Tq, d);
    for (int r = threadIdx.x; r < kQueriesStaged; r += blockDim.x) {
      lse_tile[r] = i0 + r < a.Tq ? lse[first_row + i0 + r] : 0.f;
      d_tile[r] = i0 + r < a.Tq ? row_dot[first_row + i0 + r] : 0.f;
    }
    __syncthreads();
    for (int r = 0; active && r < kQueriesStaged; ++r) {
      const int i = i0 + r;
      if (i >= a.Tq || !sees(a, b, i, j)) continue;
      const float p = expf(dot(q_tile[r], kj, d) * a.scale - lse_tile[r]);
      const float ds = p * (dot(do_tile[r], vj, d) - d_tile[r]);
      for (int e = 0; e < d; ++e) {
        acc_k[e] += ds * q_tile[r][e];
        acc_v[e] += p * do_tile[r][e];
      }
    }
    __syncthreads();
  }
  if (!active) return;
  for (int c = 0; c < d; ++c) {
    dk[key_row * d + c] = from_float<T>(acc_k[c] * a.scale);
    dv[key_row * d + c] = from_float<T>(acc_v[c]);
  }
}

// The kernels index rows and elements with int where the sizes allow it, and put batch*head
// on the grid's y dimension (at most 65535).
template <class T>
Args<T> checked_args(const AttentionShape& s, const T* key_mask) {
  const char* op = "scaled_dot_product_attention";
  DPCORE_CHECK(s.d >= 1 && s.d <= kMaxD, op, ": head dimension d = ", s.d,
               " is above the CUDA kernel's limit of ", kMaxD, " (kAttentionMaxHeadDim)");
  DPCORE_CHECK(s.B * s.H <= 65535, op, ": B * H = ", s.B * s.H, " is above the CUDA kernel's limit of 65535");
  check_int32(op, "query elements", s.q_size());
  check_int32(op, "key elements", s.kv_size());
  return Args<T>{int(s.B), int(s.H), int(s.Tq), int(s.Tk), int(s.d), float(s.scale), s.causal, key_mask};
}

unsigned tiles(int64_t n, int tile) { return unsigned((n + tile - 1) / tile); }

}  // namespace

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, T* o, float* lse,
                       cudaStream_t stream) {
  const Args<T> a = checked_args(s, key_mask);
  if (s.rows() == 0) return;
  launch("attention_forward_kernel", attention_forward_kernel<T>, dim3(tiles(s.Tq, kQueryTile), unsigned(s.B * s.H)),
         dim3(kQueryTile), stream, a, q, k, v, o, lse);
}

template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, const T* o,
                        const float* lse, const T* dout, float* row_dot, T* dq, T* dk, T* dv, cudaStream_t stream) {
  const Args<T> a = checked_args(s, key_mask);
  if (s.rows() > 0) {
    launch("attention_row_dot_kernel", attention_row_dot_kernel<T>, blocks_for(s.rows(), kElementwiseThreads),
           kElementwiseThreads, stream, s.rows(), a.d, dout, o, row_dot);
    launch("attention_backward_dq_kernel", attention_backward_dq_kernel<T>,
           dim3(tiles(s.Tq, kQueryTile), unsigned(s.B * s.H)), dim3(kQueryTile), stream, a, q, k, v, lse, row_dot,
           dout, dq);
  }
  if (s.kv_size() > 0)
    launch("attention_backward_dkdv_kernel", attention_backward_dkdv_kernel<T>,
           dim3(tiles(s.Tk, kKeysPerBlock), unsigned(s.B * s.H)), dim3(kKeysPerBlock), stream, a, q, k, v, lse,
           row_dot, dout, dk, dv);
}

#define DPCORE_ATTENTION(T)                                                                                     \
  template void attention_forward<T>(const AttentionShape&, const T*, const T*, const T*, const T*, T*, float*, \
                                     cudaStream_t);                                                             \
  template void attention_backward<T>(const AttentionShape&, const T*, const T*, const T*, const T*, const T*,  \
                                      const float*, const T*, float*, T*, T*, T*, cudaStream_t);
DPCORE_ATTENTION(float)
DPCORE_ATTENTION(BFloat16)
DPCORE_ATTENTION(Float16)
#undef DPCORE_ATTENTION

}  // namespace dpcore::kernels::cuda
