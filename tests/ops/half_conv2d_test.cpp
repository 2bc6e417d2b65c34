// conv2d with 16-bit tensors (issue 27) on every implementation (tests/support/half_backends.h):
// the CPU's im2col + GEMM on the convert and AVX512-BF16 paths, the CUDA im2col + WMMA
// kernels and (on a GPU) cuDNN's pseudo-half convolutions through the engine dispatch,
// forward and both backwards, against a float64 reference on the same 16-bit inputs.
//
// The error bound, as for the GEMM (half_gemm_test.cpp): products of 16-bit values are exact
// in float32, so an output that sums n products (and an old value) in float32 is within
// (n + 2) u sum |terms| of the exact sum in any order, u = 2^-24; its rounding to 16 bits
// adds half an ulp (2^-8 of |y| for bfloat16, 2^-11 for float16). n is C*R*S for the
// forward, K*R*S for the input gradient (col2im adds the windows' partial sums in float32
// too, within the same count) and N*P*Q for the weight and bias gradients. cuDNN's
// algorithms are held to the same bound: they multiply on tensor cores (exactly) and sum
// in float32, and the transformed-domain ones (Winograd, FFT) are not chosen for 16 bits. Every output
// starts as NaN, so one the kernel does not write fails the bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "support/half_backends.h"

namespace dpcore::testing {
namespace {

using kernels::BFloat16;
using kernels::Conv2dShape;
using kernels::Float16;

struct Case {
  const char* name;
  int64_t N, C, H, W, K, R, S, stride_h, stride_w, pad_h, pad_w;
};
// 1x1, padded 3x3, strided, an uneven kernel with uneven strides and padding, a deep one
// (C*R*S = 360 over several of the GEMMs' K slices, 20 output channels over two fragments)
// and a wide one (P*Q = 400 pixels over several tiles).
const Case kCases[] = {
    {"1x1", 2, 5, 4, 3, 7, 1, 1, 1, 1, 0, 0},        {"3x3_padded", 3, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1},
    {"strided", 2, 4, 9, 8, 6, 3, 3, 2, 2, 1, 1},    {"uneven", 1, 2, 6, 7, 3, 2, 4, 2, 1, 0, 2},
    {"deep", 4, 40, 5, 5, 20, 3, 3, 1, 1, 1, 1},     {"wide", 2, 3, 20, 20, 17, 3, 3, 1, 1, 1, 1},
};

Conv2dShape shape_of(const Case& c) {
  Conv2dShape s;
  s.N = c.N, s.C = c.C, s.H = c.H, s.W = c.W, s.K = c.K, s.R = c.R, s.S = c.S;
  s.stride_h = c.stride_h, s.stride_w = c.stride_w, s.pad_h = c.pad_h, s.pad_w = c.pad_w;
  s.P = kernels::conv_out_size(s.H, s.R, s.stride_h, s.pad_h);
  s.Q = kernels::conv_out_size(s.W, s.S, s.stride_w, s.pad_w);
  return s;
}

std::string describe(const Case& c, const char* type, const char* what, int threads) {
  std::ostringstream os;
  os << c.name << ": N " << c.N << ", C " << c.C << ", " << c.H << "x" << c.W << ", K " << c.K << ", kernel " << c.R
     << "x" << c.S << ", stride (" << c.stride_h << ", " << c.stride_w << "), pad (" << c.pad_h << ", " << c.pad_w
     << "), " << type << ", " << what << threads_label(threads);
  return os.str();
}

// An exact sum and the sum of the magnitudes of its terms.
struct Sum {
  double value = 0, magnitude = 0;
  void add(double term) { value += term, magnitude += std::fabs(term); }
};

// The float64 convolution of the 16-bit inputs: every output's Sum, with the input's and
// the output's indexing in one place for the three passes.
struct Reference {
  const Conv2dShape& s;
  // x[n, c, h, w] for output (p, q) and kernel tap (r, t), or nothing in the padding.
  bool tap(int64_t p, int64_t q, int64_t r, int64_t t, int64_t& h, int64_t& w) const {
    h = p * s.stride_h - s.pad_h + r, w = q * s.stride_w - s.pad_w + t;
    return h >= 0 && h < s.H && w >= 0 && w < s.W;
  }
  int64_t x_at(int64_t n, int64_t c, int64_t h, int64_t w) const { return ((n * s.C + c) * s.H + h) * s.W + w; }
  int64_t w_at(int64_t k, int64_t c, int64_t r, int64_t t) const { return ((k * s.C + c) * s.R + r) * s.S + t; }
  int64_t y_at(int64_t n, int64_t k, int64_t p, int64_t q) const { return ((n * s.K + k) * s.P + p) * s.Q + q; }
};

// Checks got[i] against want[i] within (terms + 2) u sum|.| (+ u |old|) plus the 16-bit rounding.
template <class H>
void expect_within_bound(const std::vector<H>& got, const std::vector<Sum>& want, int64_t terms,
                         const std::vector<double>& old) {
  ASSERT_EQ(got.size(), want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double exact = want[i].value + (old.empty() ? 0.0 : old[i]);
    const double bound = double(terms + 2) * std::ldexp(1.0, -24) *
                             (want[i].magnitude + (old.empty() ? 0.0 : std::fabs(old[i]))) +
                         unit_roundoff<H>() * std::fabs(exact);
    const double err = std::fabs(to_double(got[i]) - exact);
    if (!(err <= bound) && ++bad <= 3)
      ADD_FAILURE() << "element " << i << " = " << to_double(got[i]) << ", want " << exact << " (error " << err
                    << ", bound " << bound << ")";
  }
  EXPECT_EQ(bad, 0) << "elements outside the bound";
}

template <class B>
class HalfConv2dTest : public HalfTest<B> {};
TYPED_TEST_SUITE(HalfConv2dTest, HalfLibraryBackends, BackendName);

// Runs `pass` (which fills and returns its 16-bit output) on every thread count of the
// backend, checks each within the bound and all of them for the same bits.
template <class B, class H, class Pass>
void on_every_thread_count(const Case& c, const char* what, const std::vector<Sum>& want, int64_t terms,
                           const std::vector<double>& old, Pass pass) {
  std::vector<std::vector<H>> results;
  for (int threads : B::thread_counts()) {
    SCOPED_TRACE(describe(c, type_name<H>(), what, threads));
    ScopedKernelThreads scoped(threads == 0 ? 1 : threads);
    results.push_back(pass());
    expect_within_bound(results.back(), want, terms, old);
  }
  for (size_t r = 1; r < results.size(); ++r)
    EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), results[0].size() * sizeof(H)), 0)
        << describe(c, type_name<H>(), what, 0) << ": bits differ between thread counts";
}

template <class B, class H>
void check_case(const Case& c, bool bias) {
  const Conv2dShape s = shape_of(c);
  const Reference ref{s};
  const auto x = random_half<H>(size_t(s.x_size()), 1), w = random_half<H>(size_t(s.w_size()), 2);
  const auto b = random_half<H>(size_t(s.K), 3), dy = random_half<H>(size_t(s.y_size()), 4);
  const char* forward = bias ? "forward with bias" : "forward";

  // Forward: y[n, k, p, q] = sum over c, r, t of x * w, plus the bias.
  std::vector<Sum> y(size_t(s.y_size()));
  std::vector<double> bias_values;
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t p = 0; p < s.P; ++p)
        for (int64_t q = 0; q < s.Q; ++q) {
          Sum& out = y[size_t(ref.y_at(n, k, p, q))];
          for (int64_t ci = 0; ci < s.C; ++ci)
            for (int64_t r = 0; r < s.R; ++r)
              for (int64_t t = 0; t < s.S; ++t) {
                int64_t h, wi;
                if (ref.tap(p, q, r, t, h, wi))
                  out.add(to_double(x[size_t(ref.x_at(n, ci, h, wi))]) * to_double(w[size_t(ref.w_at(k, ci, r, t))]));
              }
          if (bias) bias_values.push_back(to_double(b[size_t(k)]));
        }
  on_every_thread_count<B, H>(c, forward, y, s.C * s.R * s.S, bias_values, [&] {
    typename B::template Array<H> dx_(x), dw_(w), db_(b), dout(size_t(s.y_size()));
    B::conv2d_forward(s, dx_.get(), dw_.get(), bias ? db_.get() : nullptr, dout.get());
    return dout.download();
  });

  // The input gradient: dx[n, c, h, w] = sum over the outputs whose window read it of dy * w.
  std::vector<Sum> dx(size_t(s.x_size()));
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t p = 0; p < s.P; ++p)
        for (int64_t q = 0; q < s.Q; ++q)
          for (int64_t ci = 0; ci < s.C; ++ci)
            for (int64_t r = 0; r < s.R; ++r)
              for (int64_t t = 0; t < s.S; ++t) {
                int64_t h, wi;
                if (ref.tap(p, q, r, t, h, wi))
                  dx[size_t(ref.x_at(n, ci, h, wi))].add(to_double(dy[size_t(ref.y_at(n, k, p, q))]) *
                                                         to_double(w[size_t(ref.w_at(k, ci, r, t))]));
              }
  if (!bias)  // the input gradient does not involve the bias: once per case
    on_every_thread_count<B, H>(c, "input gradient", dx, s.K * s.R * s.S, {}, [&] {
      typename B::template Array<H> ddy(dy), dw_(w), dout(size_t(s.x_size()));
      B::conv2d_backward_data(s, ddy.get(), dw_.get(), dout.get());
      return dout.download();
    });

  // The weight and bias gradients, written (bias: no) or added onto old values (bias: yes,
  // so that both accumulate paths run): dw[k, c, r, t] = sum over n, p, q of dy * x.
  std::vector<Sum> dw(size_t(s.w_size())), db(size_t(s.K));
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t p = 0; p < s.P; ++p)
        for (int64_t q = 0; q < s.Q; ++q) {
          const double g = to_double(dy[size_t(ref.y_at(n, k, p, q))]);
          db[size_t(k)].add(g);
          for (int64_t ci = 0; ci < s.C; ++ci)
            for (int64_t r = 0; r < s.R; ++r)
              for (int64_t t = 0; t < s.S; ++t) {
                int64_t h, wi;
                if (ref.tap(p, q, r, t, h, wi))
                  dw[size_t(ref.w_at(k, ci, r, t))].add(g * to_double(x[size_t(ref.x_at(n, ci, h, wi))]));
              }
        }
  const bool accumulate = bias;
  const auto dw_old = random_half<H>(dw.size(), 5), db_old = random_half<H>(db.size(), 6);
  std::vector<double> dw_old_values, db_old_values;
  if (accumulate) {
    for (const H& v : dw_old) dw_old_values.push_back(to_double(v));
    for (const H& v : db_old) db_old_values.push_back(to_double(v));
  }
  std::vector<H> bias_grad;  // the bias gradient of the last thread count, checked below
  on_every_thread_count<B, H>(c, accumulate ? "weight gradient, accumulated" : "weight gradient", dw, s.N * s.P * s.Q,
                              dw_old_values, [&] {
                                typename B::template Array<H> dx_(x), ddy(dy), ddw(size_t(s.w_size())),
                                    ddb(size_t(s.K));
                                if (accumulate) ddw.upload(dw_old), ddb.upload(db_old);
                                B::conv2d_backward_weight(s, dx_.get(), ddy.get(), ddw.get(), ddb.get(), accumulate);
                                bias_grad = ddb.download();
                                return ddw.download();
                              });
  SCOPED_TRACE(describe(c, type_name<H>(), "bias gradient", 0));
  expect_within_bound(bias_grad, db, s.N * s.P * s.Q, db_old_values);
}

template <class B, class H>
void check_type() {
  for (const Case& c : kCases)
    for (bool bias : {false, true}) check_case<B, H>(c, bias);
}

TYPED_TEST(HalfConv2dTest, Bfloat16ConvolutionsAreWithinTheFloat32AccumulationBound) {
  check_type<TypeParam, BFloat16>();
}

TYPED_TEST(HalfConv2dTest, Float16ConvolutionsAreWithinTheFloat32AccumulationBound) {
  if (TypeParam::kBfloat16Only) GTEST_SKIP() << "float16 takes the convert path on every CPU: tested as CpuConvert";
  check_type<TypeParam, Float16>();
}

}  // namespace
}  // namespace dpcore::testing
