// scaled_dot_product_attention's kernels on every backend (tests/support/op_backends.h):
// o, the log-sum-exp per row and dq, dk, dv against the explicit formula of kernels/naive
// (the Tq x Tk probabilities materialised, in double), over tile edges of both the CPU's
// and the CUDA kernels' blocking, key-padding masks, causal masks with Tq <, = and > Tk,
// odd head dimensions and the CUDA limit d = 64; rows that see no key; the CPU results
// the same bits on 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/attention_cases.h"
#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

using kernels::AttentionShape;

// The CPU tiles 64 queries x 64 keys, the CUDA kernels 64 queries x 32 keys (64 keys x 32
// queries for dk, dv): each tile count is met one short, exactly and one over somewhere.
const AttentionCase kCases[] = {
    {1, 1, 5, 7, 8, false, false},   {2, 2, 33, 70, 16, false, true},   {1, 2, 70, 70, 13, true, false},
    {2, 1, 65, 31, 64, true, true},  {1, 1, 20, 129, 32, true, false}, {2, 3, 64, 96, 64, false, true},
    {1, 1, 1, 1, 1, false, false},   {1, 2, 130, 65, 7, true, true},
};

std::string describe(const AttentionCase& c, int threads) { return describe(c) + threads_label(threads); }

template <class T>
std::vector<double> widened(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}
template <class T>
std::vector<T> narrowed(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// The log-sum-exps: the same rows -infinity (rows that see no key), the others close.
template <class B, class T>
void expect_lse_close(const std::vector<T>& got, const std::vector<T>& want) {
  ASSERT_EQ(got.size(), want.size());
  std::vector<T> got_finite = got, want_finite = want;
  for (size_t r = 0; r < got.size(); ++r) {
    EXPECT_EQ(std::isinf(got[r]) && got[r] < 0, std::isinf(want[r]) && want[r] < 0) << "lse of row " << r;
    if (std::isinf(want[r])) got_finite[r] = want_finite[r] = T(0);
  }
  EXPECT_OP_CLOSE(B, got_finite, want_finite) << "lse";
}

// What the naive reference gives for one case, in double from the inputs as given.
struct AttentionWant {
  std::vector<double> o, lse, dq, dk, dv;
};
template <class T>
AttentionWant naive_attention(const AttentionShape& s, const std::vector<T>& q, const std::vector<T>& k,
                              const std::vector<T>& v, const std::vector<T>& mask, const std::vector<T>& dout) {
  AttentionWant w{std::vector<double>(s.q_size()), std::vector<double>(s.rows()), std::vector<double>(s.q_size()),
                  std::vector<double>(s.kv_size()), std::vector<double>(s.kv_size())};
  const auto qd = widened(q), kd = widened(k), vd = widened(v), maskd = widened(mask), doutd = widened(dout);
  const double* mask_ptr = mask.empty() ? nullptr : maskd.data();
  naive::attention_forward<double>(s, qd.data(), kd.data(), vd.data(), mask_ptr, w.o.data(), w.lse.data());
  naive::attention_backward<double>(s, qd.data(), kd.data(), vd.data(), mask_ptr, doutd.data(), w.dq.data(),
                                    w.dk.data(), w.dv.data());
  return w;
}

template <class B>
class AttentionTest : public OpTest<B> {};
TYPED_TEST_SUITE(AttentionTest, KernelBackends, BackendName);

// Tolerance: inputs in [-1, 1] give scores |q.k| * scale <= d / sqrt(d) <= 8, so exp()
// amplifies no rounding by more than a few units; the float kernels differ from the double
// reference by the roundings of a d-term dot product (a score), an exp and a Tk-term
// weighted sum (o), and in backward a second dot product and dP - D. The CPU kernel's sums
// are float GEMMs (o accumulated over key tiles, dq, dk, dv over tiles): a Tk-term float sum
// of terms p_j v_j, whose partial sums stay of o's size, rounds by about sqrt(Tk) u times
// that size (u = 6e-8), 1e-6 at Tk = 129, relative to each output's rms. B::tolerance()
// (1e-5 float, 1e-12 double) holds them with room: the worst measured is 1.6e-6 (CpuFloat,
// 1.3e-6 with OPENBLAS_CORETYPE=Haswell), 1.6e-6 (CudaHost) and 3.8e-15 (CpuDouble).
TYPED_TEST(AttentionTest, ForwardAndBackwardMatchTheExplicitFormula) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const AttentionCase& c : kCases) {
    const AttentionShape s = shape_of(c);
    if (!B::runs_multiply_adds(s.rows() * s.Tk * s.d)) continue;
    const auto q = random_vector<T>(s.q_size(), 1), k = random_vector<T>(s.kv_size(), 2),
               v = random_vector<T>(s.kv_size(), 3), dout = random_vector<T>(s.q_size(), 4);
    const std::vector<T> mask =
        c.padded ? padding_mask<T>(c.B, c.Tk, [](bool attend) { return T(attend ? 1 : 0); }) : std::vector<T>();
    const AttentionWant want = naive_attention(s, q, k, v, mask, dout);
    typename B::template Array<T> dev_q(q), dev_k(k), dev_v(v), dev_dout(dout), dev_mask(mask);
    const T* mask_ptr = c.padded ? dev_mask.get() : nullptr;
    std::vector<T> first_o, first_dq, first_dk, first_dv;
    for (int threads : B::thread_counts()) {
      SCOPED_TRACE(describe(c, threads));
      ScopedKernelThreads scope(threads);
      typename B::template Array<T> o(s.q_size()), lse(s.rows()), dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
      B::attention_forward(s, dev_q.get(), dev_k.get(), dev_v.get(), mask_ptr, o.get(), lse.get());
      EXPECT_OP_CLOSE(B, o.download(), narrowed<T>(want.o)) << "o";
      expect_lse_close<B>(lse.download(), narrowed<T>(want.lse));
      B::attention_backward(s, dev_q.get(), dev_k.get(), dev_v.get(), mask_ptr, o.get(), lse.get(), dev_dout.get(),
                            dq.get(), dk.get(), dv.get());
      EXPECT_OP_CLOSE(B, dq.download(), narrowed<T>(want.dq)) << "dq";
      EXPECT_OP_CLOSE(B, dk.download(), narrowed<T>(want.dk)) << "dk";
      EXPECT_OP_CLOSE(B, dv.download(), narrowed<T>(want.dv)) << "dv";
      if (first_o.empty()) {
        first_o = o.download(), first_dq = dq.download(), first_dk = dk.download(), first_dv = dv.download();
        continue;
      }
      // Every output element is summed by one thread in a fixed order: the thread count
      // changes no bit.
      EXPECT_TRUE(bitwise_equal(o.download(), first_o)) << "o";
      EXPECT_TRUE(bitwise_equal(dq.download(), first_dq)) << "dq";
      EXPECT_TRUE(bitwise_equal(dk.download(), first_dk)) << "dk";
      EXPECT_TRUE(bitwise_equal(dv.download(), first_dv)) << "dv";
    }
  }
}

// Rows that see no key: batch 0 pads key 0, which under the causal mask is all query 0
// sees; batch 1 pads every key. Such a row gives o = 0 and lse = -inf, and passes no
// gradient; a key no query sees gets dk = dv = 0. Everything else still matches.
TYPED_TEST(AttentionTest, RowsThatSeeNoKeyGiveZerosAndNoGradient) {
  using B = TypeParam;
  using T = typename B::Scalar;
  const AttentionCase c{2, 2, 9, 6, 5, true, true};
  const AttentionShape s = shape_of(c);
  const auto q = random_vector<T>(s.q_size(), 1), k = random_vector<T>(s.kv_size(), 2),
             v = random_vector<T>(s.kv_size(), 3), dout = random_vector<T>(s.q_size(), 4);
  std::vector<T> mask = {0, 1, 1, 0, 1, 1, /* batch 1: */ 0, 0, 0, 0, 0, 0};
  const AttentionWant want = naive_attention(s, q, k, v, mask, dout);
  typename B::template Array<T> dev_q(q), dev_k(k), dev_v(v), dev_dout(dout), dev_mask(mask);
  typename B::template Array<T> o(s.q_size()), lse(s.rows()), dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
  B::attention_forward(s, dev_q.get(), dev_k.get(), dev_v.get(), dev_mask.get(), o.get(), lse.get());
  B::attention_backward(s, dev_q.get(), dev_k.get(), dev_v.get(), dev_mask.get(), o.get(), lse.get(), dev_dout.get(),
                        dq.get(), dk.get(), dv.get());
  const std::vector<T> got_o = o.download(), got_lse = lse.download(), got_dq = dq.download(), got_dk = dk.download(),
                       got_dv = dv.download();
  const int64_t d = s.d, batch_rows = s.H * s.Tq, batch_keys = s.H * s.Tk;
  for (int64_t row = 0; row < s.rows(); ++row) {
    const bool blind = row >= batch_rows || row % s.Tq == 0;  // batch 1, or query 0 of a head of batch 0
    if (!blind) continue;
    EXPECT_TRUE(std::isinf(got_lse[row]) && got_lse[row] < 0) << "lse of row " << row << " is " << got_lse[row];
    for (int64_t e = 0; e < d; ++e) {
      EXPECT_EQ(got_o[row * d + e], T(0)) << "o of row " << row;
      EXPECT_EQ(got_dq[row * d + e], T(0)) << "dq of row " << row;
    }
  }
  for (int64_t key = 0; key < s.B * batch_keys; ++key) {
    if (key < batch_keys && mask[key % s.Tk] != 0) continue;  // seen by someone
    for (int64_t e = 0; e < d; ++e) {
      EXPECT_EQ(got_dk[key * d + e], T(0)) << "dk of key " << key;
      EXPECT_EQ(got_dv[key * d + e], T(0)) << "dv of key " << key;
    }
  }
  EXPECT_OP_CLOSE(B, got_o, narrowed<T>(want.o)) << "o";
  expect_lse_close<B>(got_lse, narrowed<T>(want.lse));
  EXPECT_OP_CLOSE(B, got_dq, narrowed<T>(want.dq)) << "dq";
  EXPECT_OP_CLOSE(B, got_dk, narrowed<T>(want.dk)) << "dk";
  EXPECT_OP_CLOSE(B, got_dv, narrowed<T>(want.dv)) << "dv";
}

#ifdef DPCORE_HAVE_CUDA
// The CUDA kernels keep a row in registers: d is bounded at compile time, and a larger one
// fails before anything runs, naming the limit.
TEST(AttentionCudaLimits, HeadDimensionAboveTheKernelLimitFailsNamingIt) {
  AttentionShape s;
  s.B = 1, s.H = 1, s.Tq = 2, s.Tk = 2, s.d = kernels::cuda::kAttentionMaxHeadDim + 1;
  try {
    kernels::cuda::attention_forward<float>(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    FAIL() << "d = " << s.d << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head dimension d = 65 is above the CUDA kernel's limit of 64"),
              std::string::npos)
        << e.what();
  }
}
#endif

}  // namespace
}  // namespace dpcore::testing
