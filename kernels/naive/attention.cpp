// The reference of scaled_dot_product_attention: the explicit formula, materialising each
// (batch, head)'s Tq x Tk score and probability matrices in double. The backward is the
// textbook softmax backward, dS = P * (dP - rowsum(P * dP)), not the fast kernels' rowsum(dO
// * O) form, so the two formulations check each other.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/naive/naive.h"

namespace dpcore::kernels::naive {
namespace {

// P[i, j] of one (batch, head), and each row's log-sum-exp (-inf for a row that attends no key).
template <class T>
void attention_probabilities(const AttentionShape& s, const T* q, const T* k, const T* key_mask, int64_t b,
                             std::vector<double>& p, std::vector<double>& lse) {
  for (int64_t i = 0; i < s.Tq; ++i) {
    double max = -INFINITY;
    for (int64_t j = 0; j < s.Tk; ++j) {
      double score = -INFINITY;
      if (attends(s, key_mask, b, i, j)) {
        score = 0.0;
        for (int64_t c = 0; c < s.d; ++c) score += double(q[i * s.d + c]) * double(k[j * s.d + c]);
        score *= s.scale;
      }
      p[i * s.Tk + j] = score;
      max = std::max(max, score);
    }
    double total = 0.0;
    for (int64_t j = 0; j < s.Tk; ++j) {
      p[i * s.Tk + j] = max == -INFINITY ? 0.0 : std::exp(p[i * s.Tk + j] - max);
      total += p[i * s.Tk + j];
    }
    for (int64_t j = 0; j < s.Tk; ++j) p[i * s.Tk + j] = total > 0 ? p[i * s.Tk + j] / total : 0.0;
    lse[i] = total > 0 ? max + std::log(total) : -INFINITY;
  }
}

}  // namespace

template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, T* o, T* lse) {
  std::vector<double> p(s.Tq * s.Tk), row_lse(s.Tq);
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t qo = bh * s.Tq * s.d, kv = bh * s.Tk * s.d;
    attention_probabilities(s, q + qo, k + kv, key_mask, bh / s.H, p, row_lse);
    for (int64_t i = 0; i < s.Tq; ++i) {
      lse[bh * s.Tq + i] = T(row_lse[i]);
      for (int64_t c = 0; c < s.d; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j < s.Tk; ++j) acc += p[i * s.Tk + j] * double(v[kv + j * s.d + c]);
        o[qo + i * s.d + c] = T(acc);
      }
    }
  }
}

template <class T>
void attention_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* key_mask, const T* dout,
                        T* dq, T* dk, T* dv) {
  std::vector<double> p(s.Tq * s.Tk), ds(s.Tq * s.Tk), row_lse(s.Tq);
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    const int64_t qo = bh * s.Tq * s.d, kv = bh * s.Tk * s.d;
    attention_probabilities(s, q + qo, k + kv, key_mask, bh / s.H, p, row_lse);
    // dP = dO V^T, then dS = P * (dP - rowsum(P * dP)).
    for (int64_t i = 0; i < s.Tq; ++i) {
      double row = 0.0;
      for (int64_t j = 0; j < s.Tk; ++j) {
        double dp = 0.0;
        for (int64_t c = 0; c < s.d; ++c) dp += double(dout[qo + i * s.d + c]) * double(v[kv + j * s.d + c]);
        ds[i * s.Tk + j] = dp;
        row += p[i * s.Tk + j] * dp;
      }
      for (int64_t j = 0; j < s.Tk; ++j) ds[i * s.Tk + j] = p[i * s.Tk + j] * (ds[i * s.Tk + j] - row);
    }
    for (int64_t i = 0; i < s.Tq; ++i)  // dQ = dS K * scale
      for (int64_t c = 0; c < s.d; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j < s.Tk; ++j) acc += ds[i * s.Tk + j] * double(k[kv + j * s.d + c]);
        dq[qo + i * s.d + c] = T(acc * s.scale);
      }
    for (int64_t j = 0; j < s.Tk; ++j)  // dK = dS^T Q * scale, dV = P^T dO
      for (int64_t c = 0; c < s.d; ++c) {
        double acc_k = 0.0, acc_v = 0.0;
        for (int64_t i = 0; i < s.Tq; ++i) {
          acc_k += ds[i * s.Tk + j] * double(q[qo + i * s.d + c]);
          acc_v += p[i * s.Tk + j] * double(dout[qo + i * s.d + c]);
        }
        dk[kv + j * s.d + c] = T(acc_k * s.scale);
        dv[kv + j * s.d + c] = T(acc_v);
      }
  }
}

#define DPCORE_INSTANTIATE(T)                                                                                      \
  template void attention_forward<T>(const AttentionShape&, const T*, const T*, const T*, const T*, T*, T*);      \
  template void attention_backward<T>(const AttentionShape&, const T*, const T*, const T*, const T*, const T*, T*, \
                                      T*, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::naive
