// scaled_dot_product_attention on 16-bit tensors (issue 27: autocast's attention) on every
// implementation (tests/support/half_backends.h): the CPU's conversion path and the CUDA
// kernels, forward and backward, against kernels/naive's explicit formula in float64 on the
// same 16-bit inputs, over the tile edges of both kernels, key-padding and causal masks.
//
// The error bound. Both implementations widen the 16-bit operands exactly and compute in
// float32 what the float32 kernels compute, so the float32 kernels' tolerance holds for that
// part: 1e-5 of each output's rms (derived and measured in attention_test.cpp: a Tk-term
// float32 sum rounds by about sqrt(Tk) u of its size). Then:
//   * each 16-bit output (o, dq, dk, dv) is rounded once: u_H |y| (u_H = 2^-8 bfloat16,
//     2^-11 float16); lse stays float32;
//   * the backward reads the stored, rounded o in D_i = sum_c dO_ic O_ic (the reference
//     uses the exact O), off by at most dD_i = u_H sum_c |dO_ic O_ic|. D enters dS_ij =
//     P_ij (dP_ij - D_i), so dq_i moves by at most scale dD_i max_j |k_j| <= scale dD_i
//     (inputs in [-1, 1], sum_j P_ij = 1) and dk_j by at most scale sum_i P_ij dD_i |q_i|
//     <= scale sum_i dD_i over the queries of its head.
// Every output starts as NaN, so one the kernel does not write fails the bound; the CPU's
// bits are the same on 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "support/attention_cases.h"
#include "support/half_backends.h"

namespace dpcore::testing {
namespace {

using kernels::AttentionShape;

// The CPU tiles 64 queries x 64 keys, the CUDA kernels 64 x 32 (64 keys x 32 queries for
// dk, dv): tile counts met one short, exactly and one over; d odd, small and at CUDA's 64.
const AttentionCase kCases[] = {
    {2, 2, 33, 70, 16, false, true}, {1, 2, 70, 70, 13, true, false}, {2, 1, 65, 31, 64, true, true},
    {1, 1, 20, 129, 32, true, false}, {1, 1, 1, 1, 1, false, false},
};
constexpr double kFloat32Tolerance = 1e-5;  // of each output's rms: attention_test.cpp

double rms(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x * x;
  return v.empty() ? 0.0 : std::sqrt(sum / double(v.size()));
}

template <class H>
std::vector<double> widened(const std::vector<H>& v) {
  std::vector<double> w(v.size());
  for (size_t i = 0; i < v.size(); ++i) w[i] = to_double(v[i]);
  return w;
}

// got[i] within kFloat32Tolerance rms(want) + rounding * |want[i]| + extra[i] (extra may be empty).
template <class T>
void expect_within(const char* what, const std::vector<T>& got, const std::vector<double>& want, double rounding,
                   const std::vector<double>& extra) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double base = kFloat32Tolerance * rms(want);
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = base + rounding * std::fabs(want[i]) + (extra.empty() ? 0.0 : extra[i]);
    const double err = std::fabs(to_double(got[i]) - want[i]);
    if (!(err <= bound) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "] = " << to_double(got[i]) << ", want " << want[i] << " (error " << err
                    << ", bound " << bound << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": elements outside the bound";
}

template <class B>
class HalfAttentionTest : public HalfTest<B> {};
TYPED_TEST_SUITE(HalfAttentionTest, HalfBackends, BackendName);

template <class B, class H>
void check_case(const AttentionCase& c) {
  const AttentionShape s = shape_of(c);
  const auto q = random_half<H>(size_t(s.q_size()), 1), k = random_half<H>(size_t(s.kv_size()), 2),
             v = random_half<H>(size_t(s.kv_size()), 3), dout = random_half<H>(size_t(s.q_size()), 4);
  const std::vector<H> mask =
      c.padded ? padding_mask<H>(s.B, s.Tk, [](bool attend) { return to_half<H>(attend ? 1.f : 0.f); })
               : std::vector<H>();
  // The reference, in float64 from the 16-bit values.
  const std::vector<double> qd = widened(q), kd = widened(k), vd = widened(v), doutd = widened(dout),
                            maskd = widened(mask);
  std::vector<double> o(size_t(s.q_size())), lse(size_t(s.rows())), dq(size_t(s.q_size())), dk(size_t(s.kv_size())),
      dv(size_t(s.kv_size()));
  const double* mask_ptr = c.padded ? maskd.data() : nullptr;
  naive::attention_forward<double>(s, qd.data(), kd.data(), vd.data(), mask_ptr, o.data(), lse.data());
  naive::attention_backward<double>(s, qd.data(), kd.data(), vd.data(), mask_ptr, doutd.data(), dq.data(), dk.data(),
                                    dv.data());
  // What reading the rounded o moves D by, and through it dq and dk (the comment at the top).
  const double u = unit_roundoff<H>();
  std::vector<double> dq_extra(size_t(s.q_size())), dk_extra(size_t(s.kv_size()));
  for (int64_t bh = 0; bh < s.B * s.H; ++bh) {
    double head_sum = 0;
    for (int64_t i = 0; i < s.Tq; ++i) {
      const int64_t row = bh * s.Tq + i;
      double dD = 0;
      for (int64_t e = 0; e < s.d; ++e) dD += u * std::fabs(doutd[size_t(row * s.d + e)] * o[size_t(row * s.d + e)]);
      for (int64_t e = 0; e < s.d; ++e) dq_extra[size_t(row * s.d + e)] = s.scale * dD;
      head_sum += dD;
    }
    for (int64_t j = 0; j < s.Tk * s.d; ++j) dk_extra[size_t(bh * s.Tk * s.d + j)] = s.scale * head_sum;
  }

  typename B::template Array<H> dev_q(q), dev_k(k), dev_v(v), dev_dout(dout), dev_mask(mask);
  std::vector<std::vector<H>> first;
  for (int threads : B::thread_counts()) {
    SCOPED_TRACE(describe(c) + ", " + type_name<H>() + threads_label(threads));
    ScopedKernelThreads scoped(threads == 0 ? 1 : threads);
    typename B::template Array<H> got_o(size_t(s.q_size())), got_dq(size_t(s.q_size())), got_dk(size_t(s.kv_size())),
        got_dv(size_t(s.kv_size()));
    typename B::template Array<float> got_lse(size_t(s.rows()));
    const H* m = c.padded ? dev_mask.get() : nullptr;
    B::attention_forward(s, dev_q.get(), dev_k.get(), dev_v.get(), m, got_o.get(), got_lse.get());
    B::attention_backward(s, dev_q.get(), dev_k.get(), dev_v.get(), m, got_o.get(), got_lse.get(), dev_dout.get(),
                          got_dq.get(), got_dk.get(), got_dv.get());
    expect_within("o", got_o.download(), o, u, {});
    expect_within("lse", got_lse.download(), lse, 0.0, {});
    expect_within("dq", got_dq.download(), dq, u, dq_extra);
    expect_within("dk", got_dk.download(), dk, u, dk_extra);
    expect_within("dv", got_dv.download(), dv, u, {});
    std::vector<std::vector<H>> results = {got_o.download(), got_dq.download(), got_dk.download(), got_dv.download()};
    if (first.empty()) {
      first = results;
      continue;
    }
    for (size_t r = 0; r < results.size(); ++r)
      EXPECT_EQ(std::memcmp(results[r].data(), first[r].data(), first[r].size() * sizeof(H)), 0)
          << "output " << r << " (o, dq, dk, dv): bits differ between thread counts";
  }
}

TYPED_TEST(HalfAttentionTest, ForwardAndBackwardWithinTheBoundOfTheFloat64Formula) {
  using B = TypeParam;
  if (B::kBfloat16Only) GTEST_SKIP() << "attention widens to float32 whatever the GEMM path: tested as CpuConvert";
  for (const AttentionCase& c : kCases) {
    check_case<B, kernels::BFloat16>(c);
    check_case<B, kernels::Float16>(c);
  }
}

}  // namespace
}  // namespace dpcore::testing
