// Multi-head attention's shared steps, for the modules that attend (BERT's self-attention,
// torch.nn.MultiheadAttention): splitting and merging heads, and the attention itself with
// dropout on its probabilities.
#pragma once

#include <cstdint>

#include "layers/module.h"

namespace dpcore::layers {

// [N, T, H*d] -> [N, H, T, d], and back: a view as [N, T, H, d] and a transpose of T and H.
Tensor split_heads(const Tensor& x, int64_t heads);
Tensor merge_heads(const Tensor& x);

// Dropout on the attention probabilities (torch's dropout_p, Hugging Face's
// attention_probs_dropout_prob).
struct AttentionDropout {
  double p = 0;
  bool training = false;
  BatchPosition position;  // the attending module's (layers/module.h)
};

// softmax(q k^T / sqrt(d) + mask) v over heads q [N, H, Tq, d], k and v [N, H, Tk, d], with
// key_padding_mask [N, Tk] in q's dtype (1 = attend, 0 = padding; undefined: none) and causal.
// When no dropout applies (p = 0, or not training) this is the fused op
// (ops::scaled_dot_product_attention: O(T) memory, the probabilities recomputed in the
// backward). Otherwise the fused kernel cannot serve, since it never holds the probabilities
// that dropout zeroes, so the explicit composition runs: scores by batched matmul, softmax
// with padding as the lowest finite value (Hugging Face's additive mask), dropout keyed by
// the position (sample n of the batch is sample position.first_sample + n), batched matmul
// with v. Both are exact; they differ only for a query that sees no key at all (0 fused,
// the mean of v explicit, as in Hugging Face).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask,
                 const AttentionDropout& dropout, bool causal = false);

}  // namespace dpcore::layers
