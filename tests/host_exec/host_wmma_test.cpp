// The host execution layer's nvcuda::wmma (include/mma.h): loads in both layouts with a
// leading dimension wider than the tile, the product against a double loop, stores in both
// layouts, fill_fragment, element-wise loops over a fragment, and the errors a GPU would
// give (or silently misbehave on): a lane missing from a collective, misaligned operands.
// Every kernel runs as real blocks of several warps, each warp on its own tiles.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mma.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda_runtime/check.h"
#include "host_exec/runtime_test_util.h"

namespace {

using host_runtime_test::failure_of;

using namespace nvcuda;
using dpcore::kernels::cuda::launch;

constexpr int kWarps = 4, kBlocks = 2, kTiles = kWarps * kBlocks;  // one set of tiles per warp

template <class... Params, class... Args>
void run(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
  launch(name, kernel, grid, block, nullptr, std::forward<Args>(args)...);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// Host arrays 256-bit aligned, as WMMA's operands must be (a std::vector's are only 16-byte).
template <class T>
struct Buffer {
  explicit Buffer(size_t n) : n(n), p(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64))) {}
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T& operator[](size_t i) { return p[i]; }
  size_t n;
  T* p;
};

// The warp's tile set: warp g of the grid uses A + g * 16 * ld and so on.
__device__ int warp_in_grid() { return int(blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32); }

// d = scale_a * a * b + c for 16 x 16 tiles, a and b loaded in the layouts of LA and LB, c
// loaded in c_layout (or filled with c_fill when C is null), d stored in d_layout. The scale
// is applied by an element-wise loop over a's fragment, and the result doubled by one over
// the accumulator, as kernels do (an epilogue's alpha).
template <class T, class LA, class LB>
__global__ void multiply_tiles(const T* A, unsigned lda, const T* B, unsigned ldb, const float* C, unsigned ldc,
                               wmma::layout_t c_layout, float c_fill, float scale_a, float* D, unsigned ldd,
                               wmma::layout_t d_layout) {
  const int g = warp_in_grid();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LA> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LB> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::load_matrix_sync(a, A + g * 16 * lda, lda);
  wmma::load_matrix_sync(b, B + g * 16 * ldb, ldb);
  if (C) {
    wmma::load_matrix_sync(c, C + g * 16 * ldc, ldc, c_layout);
  } else {
    wmma::fill_fragment(c, c_fill);
  }
  for (int i = 0; i < a.num_elements; ++i) a.x[i] = T(float(a.x[i]) * scale_a);
  wmma::mma_sync(c, a, b, c);
  for (int i = 0; i < c.num_elements; ++i) c.x[i] *= 2.f;
  wmma::store_matrix_sync(D + g * 16 * ldd, c, ldd, d_layout);
}

template <class T>
float to_float(T h) {
  return float(h);
}

// The element (r, c) of a 16 x 16 tile stored row-major or column-major with `ld`.
size_t at(bool row_major, int r, int c, unsigned ld) { return row_major ? r * ld + c : c * ld + r; }

// One launch of multiply_tiles over kTiles warps; checks every element of every tile.
// Exact inputs (multiples of 1/8 up to 1 in magnitude) make every sum exact in float, so
// the double reference must match bit for bit and any layout mix-up shows.
template <class T, class LA, class LB>
void check_multiply(bool c_from_memory, wmma::layout_t c_layout, wmma::layout_t d_layout, float scale_a = 1.f) {
  constexpr bool a_row = std::is_same_v<LA, wmma::row_major>, b_row = std::is_same_v<LB, wmma::row_major>;
  const unsigned lda = 24, ldb = 40, ldc = 20, ldd = 28;  // all wider than the tile
  Buffer<T> A(kTiles * 16 * lda), B(kTiles * 16 * ldb);
  Buffer<float> C(kTiles * 16 * ldc), D(kTiles * 16 * ldd);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> eighths(-8, 8);
  for (size_t i = 0; i < A.n; ++i) A[i] = T(eighths(rng) / 8.f);
  for (size_t i = 0; i < B.n; ++i) B[i] = T(eighths(rng) / 8.f);
  for (size_t i = 0; i < C.n; ++i) C[i] = float(eighths(rng));
  for (size_t i = 0; i < D.n; ++i) D[i] = -999.f;  // what the store must not touch keeps this
  const float c_fill = 0.75f;
  run("multiply_tiles", multiply_tiles<T, LA, LB>, kBlocks, kWarps * 32, A.p, lda, B.p, ldb,
      c_from_memory ? C.p : nullptr, ldc, c_layout, c_fill, scale_a, D.p, ldd, d_layout);
  for (int g = 0; g < kTiles; ++g) {
    const T* a = A.p + g * 16 * lda;
    const T* b = B.p + g * 16 * ldb;
    const float* c = C.p + g * 16 * ldc;
    const float* d = D.p + g * 16 * ldd;
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        double sum = c_from_memory ? c[at(c_layout == wmma::mem_row_major, m, n, ldc)] : c_fill;
        for (int k = 0; k < 16; ++k)
          sum += double(to_float(T(to_float(a[at(a_row, m, k, lda)]) * scale_a))) * to_float(b[at(b_row, k, n, ldb)]);
        ASSERT_EQ(d[at(d_layout == wmma::mem_row_major, m, n, ldd)], float(2 * sum))
            << "tile " << g << " (" << m << ", " << n << ")";
      }
    // The padding columns between the tile's rows (or columns) stay untouched.
    for (int r = 0; r < 16; ++r)
      for (unsigned j = 16; j < ldd; ++j) ASSERT_EQ(d[r * ldd + j], -999.f) << "tile " << g;
  }
}

template <class T>
void check_all_layouts() {
  for (wmma::layout_t c_layout : {wmma::mem_row_major, wmma::mem_col_major})
    for (wmma::layout_t d_layout : {wmma::mem_row_major, wmma::mem_col_major}) {
      SCOPED_TRACE(std::string("C ") + (c_layout == wmma::mem_row_major ? "row" : "col") + "-major, D " +
                   (d_layout == wmma::mem_row_major ? "row" : "col") + "-major");
      check_multiply<T, wmma::row_major, wmma::row_major>(true, c_layout, d_layout);
      check_multiply<T, wmma::row_major, wmma::col_major>(true, c_layout, d_layout);
      check_multiply<T, wmma::col_major, wmma::row_major>(true, c_layout, d_layout);
      check_multiply<T, wmma::col_major, wmma::col_major>(true, c_layout, d_layout);
    }
}

TEST(HostWmma, Bfloat16ProductInEveryLayoutMatchesADoubleLoop) { check_all_layouts<__nv_bfloat16>(); }
TEST(HostWmma, HalfProductInEveryLayoutMatchesADoubleLoop) { check_all_layouts<__half>(); }

TEST(HostWmma, FilledAccumulatorAndElementwiseScaledFragment) {
  check_multiply<__nv_bfloat16, wmma::row_major, wmma::col_major>(false, wmma::mem_row_major, wmma::mem_col_major, 0.5f);
  check_multiply<__half, wmma::col_major, wmma::row_major>(false, wmma::mem_row_major, wmma::mem_row_major, -0.25f);
}

// Inexact inputs: the product is float32 sums in k order of exact products, starting from
// the accumulator, which this float loop reproduces bit for bit.
__global__ void multiply_row_major(const __half* A, const __half* B, float* D) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  const int g = warp_in_grid();
  wmma::load_matrix_sync(a, A + g * 256, 16);
  wmma::load_matrix_sync(b, B + g * 256, 16);
  wmma::fill_fragment(c, 0.1f);
  wmma::mma_sync(c, a, b, c);
  wmma::store_matrix_sync(D + g * 256, c, 16, wmma::mem_row_major);
}

TEST(HostWmma, AccumulatesInFloatInKOrder) {
  Buffer<__half> A(kTiles * 256), B(kTiles * 256);
  Buffer<float> D(kTiles * 256);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-3.f, 3.f);
  for (size_t i = 0; i < A.n; ++i) A[i] = __float2half_rn(uniform(rng));
  for (size_t i = 0; i < B.n; ++i) B[i] = __float2half_rn(uniform(rng));
  run("multiply_row_major", multiply_row_major, kBlocks, kWarps * 32, A.p, B.p, D.p);
  for (int g = 0; g < kTiles; ++g)
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        float sum = 0.1f;
        for (int k = 0; k < 16; ++k) sum += __half2float(A[g * 256 + m * 16 + k]) * __half2float(B[g * 256 + k * 16 + n]);
        ASSERT_EQ(D[g * 256 + m * 16 + n], sum) << g << " (" << m << ", " << n << ")";
      }
}

TEST(HostWmma, FragmentsHoldWhatNumElementsSays) {
  using A = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
  using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  static_assert(sizeof(A{}.x) / sizeof(A{}.x[0]) == A::num_elements);
  static_assert(sizeof(Acc{}.x) / sizeof(Acc{}.x[0]) == Acc::num_elements);
  static_assert(Acc::num_elements * 32 == 256, "the warp's lanes together hold the accumulator once");
  static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__half) == 2);
  // The conversions round to nearest even, as CUDA's: 1 + 2^-8 is halfway between two
  // bfloat16 values (1 and 1 + 2^-7) and goes to the even one; 1 + 3 * 2^-9 rounds up.
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(1.f + 1.f / 256)), 0x3f80);
  EXPECT_EQ(__bfloat16_as_ushort(__float2bfloat16_rn(1.f + 3.f / 512)), 0x3f81);
  EXPECT_EQ(__half_as_ushort(__float2half_rn(65520.f)), 0x7c00);  // overflow to infinity
  EXPECT_EQ(__half2float(__ushort_as_half(0x0001)), 5.9604644775390625e-08f);  // 2^-24, a subnormal
  EXPECT_EQ(__bfloat162float(__ushort_as_bfloat16(0xc0a0)), -5.f);
}

// The tensor-core kernels' pattern: the block copies tiles to __shared__ 16-bit arrays,
// meets at the barrier, each warp loads its fragments from there and stores its product to
// a shared float tile, and after another barrier every thread writes out other warps'
// results. Under ThreadSanitizer this must be race-free (the barriers order it), which
// also needs the 16-bit types' shared arrays to be constant-initialised (cuda_bf16.h).
__global__ void multiply_through_shared(const float* A, const float* B, float* D) {
  __shared__ __align__(32) __nv_bfloat16 a_tile[kWarps * 256];
  __shared__ __align__(32) __nv_bfloat16 b_tile[256];
  __shared__ __align__(32) float d_tile[kWarps * 256];
  for (int e = threadIdx.x; e < kWarps * 256; e += blockDim.x) a_tile[e] = __float2bfloat16_rn(A[e]);
  for (int e = threadIdx.x; e < 256; e += blockDim.x) b_tile[e] = __float2bfloat16_rn(B[e]);
  __syncthreads();
  const int warp = threadIdx.x / 32;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::load_matrix_sync(a, a_tile + warp * 256, 16);
  wmma::load_matrix_sync(b, b_tile, 16);
  wmma::fill_fragment(c, 0.f);
  wmma::mma_sync(c, a, b, c);
  wmma::store_matrix_sync(d_tile + warp * 256, c, 16, wmma::mem_row_major);
  __syncthreads();
  for (int e = threadIdx.x; e < kWarps * 256; e += blockDim.x) D[e] = d_tile[(e + 256) % (kWarps * 256)];
}

TEST(HostWmma, BlockSharesTilesThroughSharedMemory) {
  std::vector<float> A(kWarps * 256), B(256), D(kWarps * 256, -1.f);
  for (size_t i = 0; i < A.size(); ++i) A[i] = float(int(i % 7) - 3);
  for (size_t i = 0; i < B.size(); ++i) B[i] = float(int(i % 5) - 2) / 4;
  run("multiply_through_shared", multiply_through_shared, 1, kWarps * 32, A.data(), B.data(), D.data());
  for (int e = 0; e < kWarps * 256; ++e) {
    const int tile = ((e + 256) % (kWarps * 256)) / 256, m = e % 256 / 16, n = e % 16;
    double sum = 0;
    for (int k = 0; k < 16; ++k) sum += double(A[tile * 256 + m * 16 + k]) * B[k * 16 + n];
    ASSERT_EQ(D[e], float(sum)) << e;
  }
}

// Lane 7 of warp 1 leaves before the product: the warp's other lanes wait for it in vain.
__global__ void lane_missing_from_mma(const __nv_bfloat16* A, float* D) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::load_matrix_sync(a, A, 16);
  wmma::load_matrix_sync(b, A, 16);
  if (threadIdx.x == 39) return;
  wmma::fill_fragment(c, 0.f);
  wmma::mma_sync(c, a, b, c);
  wmma::store_matrix_sync(D + warp_in_grid() * 256, c, 16, wmma::mem_row_major);
}

TEST(HostWmma, LaneMissingFromACollectiveIsAnError) {
  Buffer<__nv_bfloat16> A(256);
  Buffer<float> D(kWarps * 256);
  for (size_t i = 0; i < A.n; ++i) A[i] = __float2bfloat16_rn(1.f);
  const std::string error =
      failure_of([&] { run("lane_missing_from_mma", lane_missing_from_mma, 1, kWarps * 32, A.p, D.p); });
  EXPECT_CONTAINS(error, "host kernel lane_missing_from_mma: block (0,0,0)");
  EXPECT_CONTAINS(error, "wmma::mma_sync");
  EXPECT_TRUE(error.find("thread (39,0,0): exited while lanes") != std::string::npos ||
              error.find("names lane 7, which has exited") != std::string::npos)
      << error;
}

__global__ void load_tile(const __half* A, unsigned lda, float* D) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major> a;
  wmma::load_matrix_sync(a, A, lda);
  D[threadIdx.x] = float(a.x[threadIdx.x % 256]);
}

TEST(HostWmma, OperandsBreakingWmmaRulesAreErrors) {
  Buffer<__half> A(16 * 48 + 16);
  Buffer<float> D(64);
  for (size_t i = 0; i < A.n; ++i) A[i] = __float2half_rn(0.f);
  // A block that is not a whole number of warps: lanes 16..31 of the second warp do not exist.
  std::string error = failure_of([&] { run("load_tile", load_tile, 1, 48, A.p, 16u, D.p); });
  EXPECT_CONTAINS(error, "wmma::load_matrix_sync");
  EXPECT_CONTAINS(error, "which does not exist");
  // A pointer off the 32-byte grid (8 bytes on), and an ldm of 12 (24 bytes).
  error = failure_of([&] { run("load_tile", load_tile, 1, 32, A.p + 4, 16u, D.p); });
  EXPECT_CONTAINS(error, "host kernel load_tile: block (0,0,0) thread (0,0,0)");
  EXPECT_CONTAINS(error, "256-bit aligned");
  error = failure_of([&] { run("load_tile", load_tile, 1, 32, A.p, 12u, D.p); });
  EXPECT_CONTAINS(error, "ldm = 12 is not a multiple of 8");
}

}  // namespace
