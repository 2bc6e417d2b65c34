// batched_matmul (c[i] = op(a[i]) * op(b[i]), every combination of the transpose flags) on
// every backend (tests/support/op_backends.h: BLAS on the CPU, the hand tiled sgemm with
// the matrix index in the grid and cuBLAS's strided-batched GEMM on CUDA) against the
// loop-nest reference of kernels/naive, on one table of shapes; and the same bits for
// every CPU thread count and every run. The backward is batched_matmul with other flags
// (engine/ops/batched_matmul.cpp), checked in tests/engine/gradcheck_test.cpp and against
// PyTorch in tests/engine/batched_matmul_test.cpp.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kernels/error.h"
#include "kernels/naive/naive.h"
#include "support/op_backends.h"

namespace dpcore::testing {
namespace {

using kernels::BatchedMatmulShape;

struct BatchedMatmulCase {
  const char* name;
  int64_t batch, M, N, K;
};

const BatchedMatmulCase kCases[] = {
    {"one_matrix", 1, 5, 7, 3},
    {"tiny", 3, 2, 3, 4},
    {"odd", 4, 17, 33, 9},         // no dimension a multiple of 4: the scalar loads and stores
    {"empty_sum", 2, 3, 4, 0},     // K = 0: c is all zeros
    {"many_small", 70, 3, 5, 2},
    {"attention_scores", 8, 64, 64, 32},  // 2 x 4 heads, 64 tokens, head dim 32: split over the threads
    {"attention_values", 8, 64, 32, 64},
    {"tall", 2, 200, 48, 120},    // several CPU row blocks of 64, one partial
    {"large_tiles", 3, 130, 140, 20},  // 128 x 128 tiles on one SM (host_sm1), with partial edge tiles
};

std::string describe(const BatchedMatmulCase& c, bool trans_a, bool trans_b, int threads) {
  std::ostringstream os;
  os << c.name << ": batch " << c.batch << ", M " << c.M << ", N " << c.N << ", K " << c.K
     << (trans_a ? ", a transposed" : "") << (trans_b ? ", b transposed" : "") << threads_label(threads);
  return os.str();
}

template <class B>
class BatchedMatmulTest : public OpTest<B> {};
TYPED_TEST_SUITE(BatchedMatmulTest, KernelAndLibraryBackends, BackendName);

// Against the double-accumulating loop nest, within the backend's GEMM tolerance (a K-term
// dot product in float: at most K float roundings, about 1e-6 relative to the rms for the
// K <= 120 here; B::tolerance() is 1e-5 for float, 1e-12 for double).
TYPED_TEST(BatchedMatmulTest, MatchesReferenceForEveryTransposition) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const BatchedMatmulCase& c : kCases) {
    if (!B::runs_multiply_adds(c.batch * c.M * c.N * c.K)) continue;
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true}) {
        const BatchedMatmulShape s{c.batch, c.M, c.N, c.K, trans_a, trans_b};
        const auto a = random_vector<T>(s.a_size(), 1), b = random_vector<T>(s.b_size(), 2);
        auto want = nan_filled<T>(s.c_size());
        naive::batched_matmul(s, a.data(), b.data(), want.data());
        typename B::template Array<T> dev_a(a), dev_b(b);
        for (int threads : B::thread_counts()) {
          SCOPED_TRACE(describe(c, trans_a, trans_b, threads));
          ScopedKernelThreads scope(threads);
          typename B::template Array<T> out(s.c_size());
          B::batched_matmul(s, dev_a.get(), dev_b.get(), out.get());
          EXPECT_OP_CLOSE(B, out.download(), want);
        }
      }
  }
}

// No float atomics, no cut that follows the thread count: every run gives the same bits,
// on the CPU whatever the number of threads (the first run is serial).
TYPED_TEST(BatchedMatmulTest, SameBitsForEveryThreadCountAndRun) {
  using B = TypeParam;
  using T = typename B::Scalar;
  for (const BatchedMatmulCase& c : kCases) {
    if (!B::runs_multiply_adds(c.batch * c.M * c.N * c.K)) continue;
    const BatchedMatmulShape s{c.batch, c.M, c.N, c.K, false, true};
    const auto a = random_vector<T>(s.a_size(), 3), b = random_vector<T>(s.b_size(), 4);
    typename B::template Array<T> dev_a(a), dev_b(b);
    std::vector<T> first;
    for (int threads : B::thread_counts())
      for (int run = 0; run < 2; ++run) {
        SCOPED_TRACE(describe(c, s.trans_a, s.trans_b, threads) + ", run " + std::to_string(run));
        ScopedKernelThreads scope(threads);
        typename B::template Array<T> out(s.c_size());
        B::batched_matmul(s, dev_a.get(), dev_b.get(), out.get());
        if (first.empty()) {
          first = out.download();
        } else {
          EXPECT_TRUE(bitwise_equal(out.download(), first));
        }
      }
  }
}

#ifdef DPCORE_HAVE_CUDA
// The hand kernel puts the matrices in the grid's z, at most 65535 of them: a larger batch
// fails before anything is launched, naming the batch and the limit.
TEST(BatchedMatmulLimits, HandKernelNamesTheBatchLimit) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const BatchedMatmulShape s{70000, 1, 1, 1, false, false};
  DeviceArray<float> a(size_t(s.a_size())), b(size_t(s.b_size())), c(size_t(s.c_size()));
  try {
    CudaBackend::batched_matmul(s, a.get(), b.get(), c.get());
    ADD_FAILURE() << "no error for a batch of 70000";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("70000"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("65535"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace dpcore::testing
