// scaled_dot_product_attention, FlashAttention-2 on the CPU with GEMM tiles: the queries of a
// (batch, head) in tiles of kQueryTile rows, the keys in tiles of kKeyTile, each tile's
// products one BLAS call, so no Tq x Tk matrix exists.
//   forward, per (b, h, query tile): for each key tile S = scale Q K^T (GEMM), masked; an
//     online softmax per row (running max m, running sum l; o rescaled by exp(m_old - m_new)
//     when m grows); P = exp(S - m); o += P V (GEMM); at the end o /= l, lse = m + log l.
//   backward, per (b, h): D = rowsum(dO * O); for each key tile, for each query tile that can
//     see it: P = exp(scale Q K^T - lse) (GEMM, once per tile), dV += P^T dO, dP = dO V^T,
//     dS = P * (dP - D), dQ += scale dS K, dK += scale dS^T Q (GEMMs).
// Under a causal mask the tiles that no query of the tile sees are skipped, and so is any
// tile in which no (query, key) pair attends. Each output element is produced by one thread
// (OpenMP over (b, h, query tile) forward, over (b, h) backward, static schedules) in an
// order fixed by the shape: the results do not depend on the thread count.
// Precision: the products and exponentials are in T, the softmax statistics m and l in
// double, and dP, D and dP - D in double (dP by a double GEMM from double copies of dO and
// V): dP - D cancels to double rounding where one key takes a row's weight (P = 1, dP = D), as
// in the explicit softmax backward, instead of leaving T's rounding of dP in dq and dk.
// The K and V tiles are transposed into scratch first: OpenBLAS runs Q K^T as a product of
// row-major A and B (both "N") through its small-matrix kernels, while the "N, T" form goes
// through its general path (packing and a C memset per call), about 2x slower per call in a
// perf profile at these sizes.
// Scratch per thread, beside the outputs (which accumulate in place), in elements:
//   forward  kQueryTile kKeyTile + d kKeyTile of T (S then P; K^T) and 2 kQueryTile doubles (m, l)
//   backward 2 kQueryTile kKeyTile + d kKeyTile of T (P; dS; K^T) and
//            kQueryTile kKeyTile + d kKeyTile + Tq d doubles (dP; V^T; the head's dO)
// so d (Tq + 2 kKeyTile) + 3 kQueryTile kKeyTile values at most: O(T), none T x T.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {
namespace {

// 64 x 64: at BERT's d = 64 in float a tile of Q, K^T, V, o and S is 16 KiB each, so what a
// forward tile touches (80 KiB) stays in L2 (2 MiB per core here) beside K and V of a whole
// head at T = 512 (256 KiB), and the S/P tile, which the softmax loop and the next GEMM reuse,
// in L1 (48 KiB). 64 is a multiple of the BLAS micro-kernels' 16 rows; 128 x 128 and 64 x 128
// measured the same within the machine's noise.
constexpr int64_t kQueryTile = 64, kKeyTile = 64;

int64_t tiles(int64_t n, int64_t tile) { return (n + tile - 1) / tile; }

template <class T>
double dot(const T* a, const T* b, int64_t n) {
  double acc = 0.0;
  for (int64_t c = 0; c < n; ++c) acc += double(a[c]) * double(b[c]);
  return acc;
}

// Under a causal mask, query i sees keys [0, i]: the keys a tile of queries ending at
// `last_query` can see, and the first query a key can be seen by.
int64_t keys_seen(const AttentionShape& s, int64_t last_query) {
  return s.causal ? std::min(s.Tk, last_query + 1) : s.Tk;
}
int64_t first_query_seeing(const AttentionShape& s, int64_t key) { return s.causal ? key : 0; }

// to[c * kKeyTile + r] = from[r * d + c]: `cols` rows of d (a K or V tile) as d rows of kKeyTile.
template <class From, class To>
void transpose_tile(const From* from, int64_t cols, int64_t d, To* to) {
  for (int64_t r = 0; r < cols; ++r)
    for (int64_t c = 0; c < d; ++c) to[c * kKeyTile + r] = To(from[r * d + c]);
}

}  // namespace

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, T* o,
                       statistic_t<T>* lse) {
  const int64_t query_tiles = tiles(s.Tq, kQueryTile), work = s.B * s.H * query_tiles, d = s.d;
#pragma omp parallel for num_threads(kernel_threads()) if (work > 1) schedule(static)
  for (int64_t w = 0; w < work; ++w) {
    const int64_t bh = w / query_tiles, b = bh / s.H, i0 = (w % query_tiles) * kQueryTile;
    const int64_t rows = std::min(kQueryTile, s.Tq - i0);
    T* p = thread_scratch<T>(size_t((kQueryTile + d) * kKeyTile), 0);
    T* k_t = p + kQueryTile * kKeyTile;
    const T* q_tile = q + (bh * s.Tq + i0) * d;
    T* acc = o + (bh * s.Tq + i0) * d;  // this tile's rows of o, accumulated in place
    double m[kQueryTile], l[kQueryTile];
    std::fill(acc, acc + rows * d, T(0));
    std::fill(m, m + rows, -INFINITY);
    std::fill(l, l + rows, 0.0);
    const int64_t key_end = keys_seen(s, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
      const int64_t cols = std::min(kKeyTile, key_end - j0);
      transpose_tile(k + (bh * s.Tk + j0) * d, cols, d, k_t);
      gemm(false, false, rows, cols, d, T(s.scale), q_tile, d, k_t, kKeyTile, T(0), p, kKeyTile);  // S
      bool attended = false;
      for (int64_t r = 0; r < rows; ++r) {
        T* pr = p + r * kKeyTile;
        double tile_max = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) {
          if (attends(s, key_mask, b, i0 + r, j0 + c))
            tile_max = std::max(tile_max, double(pr[c]));
          else
            pr[c] = T(-INFINITY);
        }
        if (tile_max == -INFINITY) {  // nothing attended in this row of the tile: the row is unchanged
          std::fill(pr, pr + cols, T(0));
          continue;
        }
        attended = true;
        // The new running max; what was accumulated under the old one shrinks by exp(m - m_new)
        // (0 when nothing was: m = -inf). m_new is one of the T scores, so T holds it exactly.
        const double m_new = std::max(m[r], tile_max), rescale = std::exp(m[r] - m_new);
        T* acc_r = acc + r * d;
        for (int64_t c = 0; c < d; ++c) acc_r[c] = T(acc_r[c] * rescale);
        double sum = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
          pr[c] = std::exp(pr[c] - T(m_new));  // masked: exp(-inf) = 0
          sum += double(pr[c]);
        }
        l[r] = l[r] * rescale + sum;
        m[r] = m_new;
      }
      if (attended) gemm(false, false, rows, d, cols, T(1), p, kKeyTile, v + (bh * s.Tk + j0) * d, d, T(1), acc, d);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const double inv_l = l[r] > 0 ? 1.0 / l[r] : 0.0;  // a row that attends no key: o = 0
      for (int64_t c = 0; c < d; ++c) acc[r * d + c] = T(acc[r * d + c] * inv_l);
      lse[bh * s.Tq + i0 + r] = T(l[r] > 0 ? m[r] + std::log(l[r]) : -INFINITY);
    }
  }
}

template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, const T* o,
                        const statistic_t<T>* lse, const T* dout, double* row_dot, T* dq, T* dk, T* dv) {
  const int64_t d = s.d, heads = s.B * s.H, tile = kQueryTile * kKeyTile;
  const T scale = T(s.scale);
  // D_i = rowsum(dO * O) = rowsum(P * dP): the softmax backward's per-row term, once per row.
#pragma omp parallel for num_threads(kernel_threads()) if (s.rows() * d >= kMinParallelElements) schedule(static)
  for (int64_t row = 0; row < s.rows(); ++row) row_dot[row] = dot(dout + row * d, o + row * d, d);

#pragma omp parallel for num_threads(kernel_threads()) if (heads > 1) schedule(static)
  for (int64_t bh = 0; bh < heads; ++bh) {
    const int64_t b = bh / s.H;
    const T* q_h = q + bh * s.Tq * d;
    const T* dout_h = dout + bh * s.Tq * d;
    const T* lse_h = lse + bh * s.Tq;
    const double* row_dot_h = row_dot + bh * s.Tq;
    T* dq_h = dq + bh * s.Tq * d;
    T* dk_h = dk + bh * s.Tk * d;
    T* dv_h = dv + bh * s.Tk * d;
    T* p = thread_scratch<T>(size_t(2 * tile + d * kKeyTile), 0);
    T* ds = p + tile;
    T* k_t = ds + tile;
    double* dp = thread_scratch<double>(size_t(tile + d * kKeyTile + s.Tq * d), 1);
    double* v_t = dp + tile;
    double* dout_wide = v_t + d * kKeyTile;
    std::copy(dout_h, dout_h + s.Tq * d, dout_wide);
    std::fill(dq_h, dq_h + s.Tq * d, T(0));
    std::fill(dk_h, dk_h + s.Tk * d, T(0));
    std::fill(dv_h, dv_h + s.Tk * d, T(0));
    for (int64_t j0 = 0; j0 < s.Tk; j0 += kKeyTile) {
      const int64_t cols = std::min(kKeyTile, s.Tk - j0);
      transpose_tile(k + (bh * s.Tk + j0) * d, cols, d, k_t);
      transpose_tile(v + (bh * s.Tk + j0) * d, cols, d, v_t);
      for (int64_t i0 = first_query_seeing(s, j0) / kQueryTile * kQueryTile; i0 < s.Tq; i0 += kQueryTile) {
        const int64_t rows = std::min(kQueryTile, s.Tq - i0);
        const T* q_tile = q_h + i0 * d;
        gemm(false, false, rows, cols, d, scale, q_tile, d, k_t, kKeyTile, T(0), p, kKeyTile);  // S
        bool attended = false;
        for (int64_t r = 0; r < rows; ++r) {
          T* pr = p + r * kKeyTile;
          for (int64_t c = 0; c < cols; ++c) {
            const bool seen = attends(s, key_mask, b, i0 + r, j0 + c);
            pr[c] = seen ? std::exp(pr[c] - lse_h[i0 + r]) : T(0);
            attended = attended || seen;
          }
        }
        if (!attended) continue;
        const T* dout_tile = dout_h + i0 * d;
        gemm(true, false, cols, d, rows, T(1), p, kKeyTile, dout_tile, d, T(1), dv_h + j0 * d, d);  // dV += P^T dO
        gemm(false, false, rows, cols, d, 1.0, dout_wide + i0 * d, d, v_t, kKeyTile, 0.0, dp, kKeyTile);  // dP = dO V^T
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            const int64_t e = r * kKeyTile + c;
            ds[e] = T(double(p[e]) * (dp[e] - row_dot_h[i0 + r]));  // dS = P * (dP - D)
          }
        const T* k_tile = k + (bh * s.Tk + j0) * d;
        gemm(false, false, rows, d, cols, scale, ds, kKeyTile, k_tile, d, T(1), dq_h + i0 * d, d);  // dQ += s dS K
        gemm(true, false, cols, d, rows, scale, ds, kKeyTile, q_tile, d, T(1), dk_h + j0 * d, d);  // dK += s dS^T Q
      }
    }
  }
}

#define DPCORE_INSTANTIATE(T)                                                                                    \
  template void attention_forward<T>(const AttentionShape&, const T*, const T*, const T*, const T*, T*, T*);    \
  template void attention_backward<T>(const AttentionShape&, const T*, const T*, const T*, const T*, const T*, \
                                      const T*, const T*, double*, T*, T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cpu
