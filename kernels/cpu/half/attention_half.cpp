// scaled_dot_product_attention on 16-bit tensors (kernels/cpu/kernels.h,
// attention_forward_half): the conversion path, as gemm_half's Convert path is for the
// matrix products. Each operand is widened to float32 (exact), the float32 FlashAttention
// kernels of kernels/cpu/attention.cpp run on the copies, and each output element is
// rounded once to the 16-bit type; lse stays float32. The products inside are of widened
// 16-bit values, exact in float32 (8 + 8 or 11 + 11 significant bits), so what is computed
// is "16-bit inputs, float32 arithmetic", the CUDA kernels' contract too.
#include <vector>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/kernels.h"

namespace dpcore::kernels::cpu {

namespace {

// n 16-bit values (none: a null pointer) as a float32 vector.
template <class H>
std::vector<float> widened(const H* x, int64_t n) {
  std::vector<float> y(x ? size_t(n) : 0);
  if (x) cast(n, x, y.data());
  return y;
}

template <class H>
void narrow_into(const std::vector<float>& x, H* y) {
  cast(int64_t(x.size()), x.data(), y);
}

float* data_or_null(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

}  // namespace

template <class H>
void attention_forward_half(const AttentionShape& s, const H* q, const H* k, const H* v, const H* key_mask, H* o,
                            float* lse) {
  std::vector<float> q32 = widened(q, s.q_size()), k32 = widened(k, s.kv_size()), v32 = widened(v, s.kv_size()),
                     mask32 = widened(key_mask, s.B * s.Tk), o32(size_t(s.q_size()));
  attention_forward<float>(s, q32.data(), k32.data(), v32.data(), data_or_null(mask32), o32.data(), lse);
  narrow_into(o32, o);
}

template <class H>
void attention_backward_half(const AttentionShape& s, const H* q, const H* k, const H* v, const H* key_mask,
                             const H* o, const float* lse, const H* dout, double* row_dot, H* dq, H* dk, H* dv) {
  std::vector<float> q32 = widened(q, s.q_size()), k32 = widened(k, s.kv_size()), v32 = widened(v, s.kv_size()),
                     mask32 = widened(key_mask, s.B * s.Tk), o32 = widened(o, s.q_size()),
                     dout32 = widened(dout, s.q_size()), dq32(size_t(s.q_size())), dk32(size_t(s.kv_size())),
                     dv32(size_t(s.kv_size()));
  attention_backward<float>(s, q32.data(), k32.data(), v32.data(), data_or_null(mask32), o32.data(), lse,
                            dout32.data(), row_dot, dq32.data(), dk32.data(), dv32.data());
  narrow_into(dq32, dq);
  narrow_into(dk32, dk);
  narrow_into(dv32, dv);
}

#define DPCORE_HALF_ATTENTION(H)                                                                                  \
  template void attention_forward_half<H>(const AttentionShape&, const H*, const H*, const H*, const H*, H*,     \
                                          float*);                                                               \
  template void attention_backward_half<H>(const AttentionShape&, const H*, const H*, const H*, const H*,        \
                                           const H*, const float*, const H*, double*, H*, H*, H*);
DPCORE_HALF_ATTENTION(BFloat16)
DPCORE_HALF_ATTENTION(Float16)
#undef DPCORE_HALF_ATTENTION

}  // namespace dpcore::kernels::cpu
