// scaled_dot_product_attention on 16-bit tensors (kernels/cpu/kernels.h, attention_forward
// for BFloat16 and Float16): the conversion path, as gemm_half's Convert path is for the
// matrix products. Each operand is widened to float32 (exact), the float32 FlashAttention
// kernels of kernels/cpu/attention.cpp run on the copies, and each output element is
// rounded once to the 16-bit type; lse stays float32. The products inside are of widened
// 16-bit values, exact in float32 (8 + 8 or 11 + 11 significant bits), so what is computed
// is "16-bit inputs, float32 arithmetic", the CUDA kernels' contract too.
//
// The float32 copies live in one scratch buffer of the calling thread, kept between calls
// (a training step asks for the same sizes each time): slot 2, as the float32 kernels use
// slots 0 and 1 of the threads they run on, the calling one among them.
#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

namespace {

constexpr int kCopiesSlot = 2;

// Hands out consecutive pieces of one float32 scratch buffer of `total` elements.
class Copies {
 public:
  explicit Copies(int64_t total) : next_(thread_scratch<float>(size_t(total), kCopiesSlot)) {}
  // n elements for an output.
  float* take(int64_t n) {
    float* piece = next_;
    next_ += n;
    return piece;
  }
  // The n 16-bit values x widened; null for a null x (no mask).
  template <class H>
  float* widened(const H* x, int64_t n) {
    if (!x) return nullptr;
    float* piece = take(n);
    cast(n, x, piece);
    return piece;
  }

 private:
  float* next_;
};

template <class H>
void forward_on_copies(const AttentionShape& s, const H* q, const H* k, const H* v, const H* key_mask, H* o,
                       float* lse) {
  Copies c(2 * s.q_size() + 2 * s.kv_size() + (key_mask ? s.B * s.Tk : 0));
  const float *q32 = c.widened(q, s.q_size()), *k32 = c.widened(k, s.kv_size()), *v32 = c.widened(v, s.kv_size()),
              *mask32 = c.widened(key_mask, s.B * s.Tk);
  float* o32 = c.take(s.q_size());
  attention_forward<float>(s, q32, k32, v32, mask32, o32, lse);
  cast(s.q_size(), o32, o);
}

template <class H>
void backward_on_copies(const AttentionShape& s, const H* q, const H* k, const H* v, const H* key_mask, const H* o,
                        const float* lse, const H* dout, double* row_dot, H* dq, H* dk, H* dv) {
  Copies c(4 * s.q_size() + 4 * s.kv_size() + (key_mask ? s.B * s.Tk : 0));
  const float *q32 = c.widened(q, s.q_size()), *k32 = c.widened(k, s.kv_size()), *v32 = c.widened(v, s.kv_size()),
              *mask32 = c.widened(key_mask, s.B * s.Tk), *o32 = c.widened(o, s.q_size()),
              *dout32 = c.widened(dout, s.q_size());
  float *dq32 = c.take(s.q_size()), *dk32 = c.take(s.kv_size()), *dv32 = c.take(s.kv_size());
  attention_backward<float>(s, q32, k32, v32, mask32, o32, lse, dout32, row_dot, dq32, dk32, dv32);
  cast(s.q_size(), dq32, dq);
  cast(s.kv_size(), dk32, dk);
  cast(s.kv_size(), dv32, dv);
}

}  // namespace

#define DPCORE_HALF_ATTENTION(H)                                                                                  \
  template <>                                                                                                     \
  void attention_forward<H>(const AttentionShape& s, const H* q, const H* k, const H* v, const H* key_mask, H* o, \
                            float* lse) {                                                                         \
    forward_on_copies(s, q, k, v, key_mask, o, lse);                                                              \
  }                                                                                                               \
  template <>                                                                                                     \
  void attention_backward<H>(const AttentionShape& s, const H* q, const H* k, const H* v, const H* key_mask,     \
                             const H* o, const float* lse, const H* dout, double* row_dot, H* dq, H* dk, H* dv) {  \
    backward_on_copies(s, q, k, v, key_mask, o, lse, dout, row_dot, dq, dk, dv);                                  \
  }
DPCORE_HALF_ATTENTION(BFloat16)
DPCORE_HALF_ATTENTION(Float16)
#undef DPCORE_HALF_ATTENTION

}  // namespace dpcore::kernels::cpu
