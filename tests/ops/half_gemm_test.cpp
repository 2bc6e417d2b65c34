// The 16-bit matrix product and casts (issue 27) on every implementation
// (tests/support/half_backends.h): the CPU's convert and AVX512-BF16 paths and the CUDA
// tensor-core kernel, against a float64 reference on the same 16-bit inputs.
//
// The error bound: every product of two 16-bit values is exact in float32, so the only
// errors are the float32 additions of K products (and alpha, beta): in any order, at most
// (K + 2) u (|alpha| sum_k |a_k b_k| + |beta c|) with u = 2^-24 (Higham, Accuracy and
// Stability, 3.1: the bound of any summation order). A 16-bit output adds its own rounding,
// half an ulp: u = 2^-8 of |c| for bfloat16, 2^-11 for float16. The inputs are uniform in
// [-1, 1], rounded to the type, so no product is subnormal (vdpbf16ps flushes those).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "support/half_backends.h"

namespace dpcore::testing {
namespace {

using kernels::BFloat16;
using kernels::Float16;

struct Case {
  const char* name;
  int64_t M, N, K, pad, batch;  // pad: extra elements per row of every matrix
  float alpha, beta;
};
// Tile edges on every side (1, 7, 13, 17, 33, 70, 129, 130 against the CPU's 8 x 32 and
// the CUDA kernel's 16-wide fragments and 64-wide blocks), odd K (a half-filled pair for
// vdpbf16ps), padded rows, batches, alpha and beta; K = 300 and 1000 for the bound's K;
// one product past the CPU kernels' 2^20 M N K at which they share out tiles over threads
// (AMX's 32 x 32 blocks and 32-value chunks of k met one over).
const Case kCases[] = {
    {"one", 1, 1, 1, 0, 1, 1.f, 0.f},          {"odd_small", 7, 13, 5, 0, 1, 1.f, 0.f},
    {"padded_alpha", 33, 70, 300, 3, 1, 0.5f, 0.f}, {"beta_partial_tiles", 130, 129, 17, 1, 1, 1.f, 1.f},
    {"batch", 20, 36, 64, 2, 3, 1.f, 0.f},     {"long_k_beta", 40, 24, 1000, 0, 2, 1.f, 1.f},
    {"on_threads", 97, 100, 129, 0, 1, 1.f, 0.f},
};

std::string describe(const Case& c, bool ta, bool tb, const char* in, const char* out, int threads) {
  std::ostringstream os;
  os << c.name << ": M " << c.M << ", N " << c.N << ", K " << c.K << ", pad " << c.pad << ", batch " << c.batch
     << ", alpha " << c.alpha << ", beta " << c.beta << (ta ? ", A^T" : ", A") << (tb ? ", B^T" : ", B") << ", " << in
     << " -> " << out << threads_label(threads);
  return os.str();
}

template <class B>
class HalfGemmTest : public HalfTest<B> {};
TYPED_TEST_SUITE(HalfGemmTest, HalfLibraryBackends, BackendName);

// One case, transposition and pair of types: the product within the bound of the file's
// top, the padding of C untouched, and the same bits on every thread count.
template <class B, class In, class Out>
void check_case(const Case& c, bool ta, bool tb) {
  const int64_t lda = (ta ? c.M : c.K) + c.pad, ldb = (tb ? c.K : c.N) + c.pad, ldc = c.N + c.pad;
  const int64_t sa = (ta ? c.K : c.M) * lda + 5, sb = (tb ? c.N : c.K) * ldb + 3, sc = c.M * ldc + 1;
  const auto a = random_half<In>(size_t(sa * c.batch), 1);
  const auto b = random_half<In>(size_t(sb * c.batch), 2);
  // beta == 0 must not read C (it starts as NaN then); beta == 1 adds the old values.
  std::vector<Out> c0(size_t(sc * c.batch));
  if (c.beta != 0.f) {
    const auto f = random_vector<float>(c0.size(), 3);
    for (size_t i = 0; i < c0.size(); ++i) {
      if constexpr (std::is_same_v<Out, float>) c0[i] = f[i];
      else c0[i] = to_half<Out>(f[i]);
    }
  } else {
    std::memset(c0.data(), 0xFF, c0.size() * sizeof(Out));
  }
  std::vector<std::vector<Out>> results;
  for (int threads : B::thread_counts()) {
    SCOPED_TRACE(describe(c, ta, tb, type_name<In>(), type_name<Out>(), threads));
    ScopedKernelThreads scoped(threads == 0 ? 1 : threads);
    typename B::template Array<In> da(a), db(b);
    typename B::template Array<Out> dc(c0);
    B::template gemm_half<In, Out>(ta, tb, c.M, c.N, c.K, c.alpha, da.get(), lda, sa, db.get(), ldb, sb, c.beta,
                                   dc.get(), ldc, sc, c.batch);
    const std::vector<Out> got = dc.download();
    int64_t bad = 0;
    double worst = 0;  // the largest error as a fraction of its bound
    for (int64_t i = 0; i < c.batch; ++i)
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          double sum = 0, magnitude = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            const double x = to_double(ta ? a[i * sa + k * lda + m] : a[i * sa + m * lda + k]);
            const double y = to_double(tb ? b[i * sb + n * ldb + k] : b[i * sb + k * ldb + n]);
            sum += x * y, magnitude += std::fabs(x * y);
          }
          const size_t at = size_t(i * sc + m * ldc + n);
          const double old = c.beta != 0.f ? to_double(c0[at]) : 0.0;
          const double want = double(c.alpha) * sum + double(c.beta) * old;
          const double bound = double(c.K + 2) * std::ldexp(1.0, -24) *
                                   (std::fabs(c.alpha) * magnitude + std::fabs(c.beta * old)) +
                               unit_roundoff<Out>() * std::fabs(want);
          const double err = std::fabs(to_double(got[at]) - want);
          if (!(err <= bound)) {
            if (++bad <= 3)
              ADD_FAILURE() << "matrix " << i << ", C[" << m << ", " << n << "] = " << to_double(got[at])
                            << ", want " << want << " (error " << err << ", bound " << bound << ")";
          } else if (bound > 0) {
            worst = std::max(worst, err / bound);
          }
        }
    EXPECT_EQ(bad, 0) << "elements outside the bound";
    // The padding of every row of C, and the gaps between matrices, keep what was there.
    for (int64_t i = 0; i < c.batch; ++i)
      for (int64_t at = i * sc; at < (i + 1) * sc; ++at) {
        const int64_t m = (at - i * sc) / ldc, n = (at - i * sc) % ldc;
        if (m < c.M && n < c.N) continue;
        ASSERT_EQ(std::memcmp(&got[size_t(at)], &c0[size_t(at)], sizeof(Out)), 0)
            << "element " << at << " outside the matrices was written";
      }
    results.push_back(got);
  }
  for (size_t r = 1; r < results.size(); ++r)
    EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), results[0].size() * sizeof(Out)), 0)
        << describe(c, ta, tb, type_name<In>(), type_name<Out>(), 0) << ": bits differ between thread counts";
}

template <class B, class In>
void check_type() {
  for (const Case& c : kCases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check_case<B, In, float>(c, ta, tb);
        check_case<B, In, In>(c, ta, tb);
      }
}

TYPED_TEST(HalfGemmTest, Bfloat16ProductsAreWithinTheFloat32AccumulationBound) { check_type<TypeParam, BFloat16>(); }

TYPED_TEST(HalfGemmTest, Float16ProductsAreWithinTheFloat32AccumulationBound) {
  if (TypeParam::kBfloat16Only) GTEST_SKIP() << "float16 takes the convert path on every CPU: tested as CpuConvert";
  check_type<TypeParam, Float16>();
}

// The casts give kernels/half_types.h's bits exactly: every 16-bit pattern to float32, and
// float32 to each type over values, halfway points and their neighbours, specials and NaN
// payloads (half_types_test checks those functions themselves against a float64 search).
template <class B, class H>
void check_casts() {
  std::vector<H> all(65536);
  for (uint32_t p = 0; p < 65536; ++p) all[p].bits = uint16_t(p);
  typename B::template Array<H> halves(all);
  typename B::template Array<float> widened(all.size());
  B::template cast<H, float>(int64_t(all.size()), halves.get(), widened.get());
  const std::vector<float> got_wide = widened.download();
  for (uint32_t p = 0; p < 65536; ++p) {
    // Straight to float32: through double, a signalling NaN would come back quiet.
    const float want = std::is_same_v<H, BFloat16> ? kernels::bfloat16_to_float(BFloat16{all[p].bits})
                                                   : kernels::float16_to_float(Float16{all[p].bits});
    ASSERT_EQ(kernels::float32_bits(got_wide[p]), kernels::float32_bits(want)) << type_name<H>() << " pattern " << p;
  }
  // Every pattern's float32 value, the halfway points between neighbours and the floats
  // either side of those, then a million random bit patterns (NaNs with payloads among them).
  std::vector<float> inputs;
  for (uint32_t p = 0; p + 1 < 65536; ++p) {
    const float lo = got_wide[p], hi = got_wide[p + 1];
    const float mid = float((double(lo) + double(hi)) / 2);
    inputs.insert(inputs.end(), {lo, mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY)});
  }
  uint64_t state = 12345;
  for (int i = 0; i < 1000000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    inputs.push_back(kernels::float32_from_bits(uint32_t(state >> 32)));
  }
  typename B::template Array<float> wide(inputs);
  typename B::template Array<H> narrowed(inputs.size());
  B::template cast<float, H>(int64_t(inputs.size()), wide.get(), narrowed.get());
  const std::vector<H> got = narrowed.download();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const H want = to_half<H>(inputs[i]);
    ASSERT_EQ(got[i].bits, want.bits) << type_name<H>() << " of float bits 0x" << std::hex
                                      << kernels::float32_bits(inputs[i]);
  }
}

TYPED_TEST(HalfGemmTest, CastsGiveTheRoundToNearestEvenBits) {
  if (TypeParam::kBfloat16Only) GTEST_SKIP() << "the casts take the same code on every CPU path: tested as CpuConvert";
  check_casts<TypeParam, BFloat16>();
  check_casts<TypeParam, Float16>();
}

}  // namespace
}  // namespace dpcore::testing
