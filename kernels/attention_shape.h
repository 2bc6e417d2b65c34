// The shape of scaled_dot_product_attention, shared by its naive, CPU and CUDA kernels, the
// backends and the engine op (engine/ops/attention.cpp).
#pragma once

#include <cstdint>

namespace dpcore::kernels {

// q[B,H,Tq,d], k and v[B,H,Tk,d] -> o[B,H,Tq,d] = softmax(q k^T * scale + mask) v, and the
// log-sum-exp of each query row's scaled scores, lse[B,H,Tq] (all contiguous, row-major).
// Query i attends key j when the key-padding mask (optional, [B,Tk], nonzero = attend: Hugging
// Face's attention_mask) keeps j in its batch and, if causal, j <= i (PyTorch's is_causal:
// aligned top-left, also when Tq != Tk). A query that attends no key gets o = 0 and
// lse = -infinity, and passes no gradient.
struct AttentionShape {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0, d = 0;
  double scale = 1.0;
  bool causal = false;

  int64_t q_size() const { return B * H * Tq * d; }
  int64_t kv_size() const { return B * H * Tk * d; }
  int64_t rows() const { return B * H * Tq; }  // query rows: one lse each
};

// Whether query i of batch b attends key j (key_mask may be null: no padding).
template <class T>
inline bool attends(const AttentionShape& s, const T* key_mask, int64_t b, int64_t i, int64_t j) {
  return (!s.causal || j <= i) && (!key_mask || key_mask[b * s.Tk + j] != T(0));
}

}  // namespace dpcore::kernels
