// scaled_dot_product_attention, FlashAttention-2's blocking on the CPU: the queries of a
// (batch, head) in tiles of kQueryTile, the keys in tiles of kKeyTile, an online softmax per
// query row (running max m, running sum l, an accumulator rescaled when m grows), so no
// Tq x Tk matrix exists; the backward recomputes the probabilities from q, k and the saved
// log-sum-exp. Every output element is written by one thread in a fixed order (OpenMP over
// tiles, static schedule), so the results do not depend on the thread count. Sums are in
// double, as in the other CPU softmax kernels.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {
namespace {

constexpr int64_t kQueryTile = 32, kKeyTile = 64;

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

}  // namespace

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, T* o, T* lse) {
  const int64_t query_tiles = tiles(s.Tq, kQueryTile), work = s.B * s.H * query_tiles, d = s.d;
#pragma omp parallel for num_threads(kernel_threads()) if (work > 1) schedule(static)
  for (int64_t w = 0; w < work; ++w) {
    const int64_t bh = w / query_tiles, b = bh / s.H, i0 = (w % query_tiles) * kQueryTile;
    const int64_t rows = std::min(kQueryTile, s.Tq - i0);
    const T* kb = k + bh * s.Tk * d;
    const T* vb = v + bh * s.Tk * d;
    double* acc = thread_scratch<double>(size_t(kQueryTile * d), 0);
    double* scores = thread_scratch<double>(size_t(kKeyTile), 1);
    double m[kQueryTile], l[kQueryTile];
    std::fill(acc, acc + rows * d, 0.0);
    std::fill(m, m + rows, -INFINITY);
    std::fill(l, l + rows, 0.0);
    const int64_t key_end = keys_seen(s, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile) {
      const int64_t cols = std::min(kKeyTile, key_end - j0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const T* qi = q + (bh * s.Tq + i) * d;
        double tile_max = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t j = j0 + c;
          scores[c] = attends(s, key_mask, b, i, j) ? dot(qi, kb + j * d, d) * s.scale : -INFINITY;
          tile_max = std::max(tile_max, scores[c]);
        }
        if (tile_max == -INFINITY) continue;  // nothing attended in this tile: the row is unchanged
        // The new running max; what was accumulated under the old one shrinks by exp(m - m_new)
        // (0 when nothing was: m = -inf).
        const double m_new = std::max(m[r], tile_max), rescale = std::exp(m[r] - m_new);
        double* acc_r = acc + r * d;
        l[r] *= rescale;
        for (int64_t c = 0; c < d; ++c) acc_r[c] *= rescale;
        for (int64_t c = 0; c < cols; ++c) {
          if (scores[c] == -INFINITY) continue;
          const double p = std::exp(scores[c] - m_new);
          const T* vj = vb + (j0 + c) * d;
          l[r] += p;
          for (int64_t e = 0; e < d; ++e) acc_r[e] += p * double(vj[e]);
        }
        m[r] = m_new;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = bh * s.Tq + i0 + r;
      const double inv_l = l[r] > 0 ? 1.0 / l[r] : 0.0;  // a row that attends no key: o = 0
      for (int64_t c = 0; c < d; ++c) o[row * d + c] = T(acc[r * d + c] * inv_l);
      lse[row] = T(l[r] > 0 ? m[r] + std::log(l[r]) : -INFINITY);
    }
  }
}

template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, const T* o,
                        const T* lse, const T* dout, double* row_dot, T* dq, T* dk, T* dv) {
  const int64_t d = s.d;
  // D_i = rowsum(dO * O) = rowsum(P * dP): the softmax backward's per-row term, once per row.
#pragma omp parallel for num_threads(kernel_threads()) if (s.rows() * d >= kMinParallelElements) schedule(static)
  for (int64_t row = 0; row < s.rows(); ++row) row_dot[row] = dot(dout + row * d, o + row * d, d);

  // The gradient of score (i, j): dS = P * (dP - D_i), P recomputed from the saved lse.
  auto score_grad = [&](int64_t bh, int64_t i, int64_t j, double* p) {
    const int64_t row = bh * s.Tq + i;
    const T* kj = k + (bh * s.Tk + j) * d;
    const T* vj = v + (bh * s.Tk + j) * d;
    *p = std::exp(dot(q + row * d, kj, d) * s.scale - double(lse[row]));
    return *p * (dot(dout + row * d, vj, d) - row_dot[row]);
  };

  // dQ_i = scale * sum_j dS_ij K_j: a thread per tile of queries.
  const int64_t query_tiles = tiles(s.Tq, kQueryTile), q_work = s.B * s.H * query_tiles;
#pragma omp parallel for num_threads(kernel_threads()) if (q_work > 1) schedule(static)
  for (int64_t w = 0; w < q_work; ++w) {
    const int64_t bh = w / query_tiles, b = bh / s.H, i0 = (w % query_tiles) * kQueryTile;
    const int64_t rows = std::min(kQueryTile, s.Tq - i0);
    double* acc = thread_scratch<double>(size_t(kQueryTile * d), 0);
    std::fill(acc, acc + rows * d, 0.0);
    const int64_t key_end = keys_seen(s, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < key_end; j0 += kKeyTile)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = j0; j < std::min(j0 + kKeyTile, key_end); ++j) {
          if (!attends(s, key_mask, b, i0 + r, j)) continue;
          double p;
          const double ds = score_grad(bh, i0 + r, j, &p);
          const T* kj = k + (bh * s.Tk + j) * d;
          for (int64_t c = 0; c < d; ++c) acc[r * d + c] += ds * double(kj[c]);
        }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) dq[(bh * s.Tq + i0 + r) * d + c] = T(acc[r * d + c] * s.scale);
  }

  // dK_j = scale * sum_i dS_ij Q_i and dV_j = sum_i P_ij dO_i: a thread per tile of keys.
  const int64_t key_tiles = tiles(s.Tk, kKeyTile), k_work = s.B * s.H * key_tiles;
#pragma omp parallel for num_threads(kernel_threads()) if (k_work > 1) schedule(static)
  for (int64_t w = 0; w < k_work; ++w) {
    const int64_t bh = w / key_tiles, b = bh / s.H, j0 = (w % key_tiles) * kKeyTile;
    const int64_t cols = std::min(kKeyTile, s.Tk - j0);
    double* acc_k = thread_scratch<double>(size_t(kKeyTile * d), 0);
    double* acc_v = thread_scratch<double>(size_t(kKeyTile * d), 1);
    std::fill(acc_k, acc_k + cols * d, 0.0);
    std::fill(acc_v, acc_v + cols * d, 0.0);
    for (int64_t i0 = first_query_seeing(s, j0) / kQueryTile * kQueryTile; i0 < s.Tq; i0 += kQueryTile)
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t i = i0; i < std::min(i0 + kQueryTile, s.Tq); ++i) {
          const int64_t j = j0 + c;
          if (!attends(s, key_mask, b, i, j)) continue;
          double p;
          const double ds = score_grad(bh, i, j, &p);
          const T* qi = q + (bh * s.Tq + i) * d;
          const T* doi = dout + (bh * s.Tq + i) * d;
          for (int64_t e = 0; e < d; ++e) {
            acc_k[c * d + e] += ds * double(qi[e]);
            acc_v[c * d + e] += p * double(doi[e]);
          }
        }
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t e = 0; e < d; ++e) {
        dk[(bh * s.Tk + j0 + c) * d + e] = T(acc_k[c * d + e] * s.scale);
        dv[(bh * s.Tk + j0 + c) * d + e] = T(acc_v[c * d + e]);
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
