// SGEMM on row-major matrices, the tiled kernel of gemm_tile.cuh with plain-matrix
// loaders; plus the GEMM planning and the split-K reduction shared with the convolutions.
//
// At 4096^3 every block gets a 128 x 128 tile (1024 blocks), each thread an 8 x 8
// micro-tile: per k it loads 2 float4 of A and 2 of B from shared memory for 64 FMAs, and
// the next tile's global loads are in flight during the FMAs (double buffering).
#include <algorithm>
#include <type_traits>

#include "kernels/error.h"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda/gemm_plan.h"
#include "kernels/cuda/gemm_tile.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

constexpr int64_t kMinChunk = 128;                    // shorter slices cost more in the reduction than they gain
constexpr int64_t kMaxPartialFloats = int64_t(1) << 26;  // 256 MiB of split-K workspace at most

struct GemmArgs {
  const float* A;
  const float* B;
  float* C;
  float* partial;  // split-K workspace [slices][M][N]
  int64_t lda, ldb, ldc;
  int M, N, K, chunk;
  float alpha, beta;
  bool vec_a, vec_b, vec_c;
};

template <class Cfg, bool TRANS_A, bool TRANS_B>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) sgemm_kernel(GemmArgs g) {
  const int m0 = blockIdx.x * Cfg::BM, n0 = blockIdx.y * Cfg::BN;
  const int k_begin = blockIdx.z * g.chunk, k_end = min(g.K, k_begin + g.chunk);
  // A[m, k] is A[m * lda + k], or A[k * lda + m] transposed; B[k, n] is B[k * ldb + n], or B[n * ldb + k].
  using LoadA = std::conditional_t<TRANS_A, tile::LoadRowContiguous<Cfg, Cfg::BM>, tile::LoadKContiguous<Cfg, Cfg::BM>>;
  using LoadB = std::conditional_t<TRANS_B, tile::LoadKContiguous<Cfg, Cfg::BN>, tile::LoadRowContiguous<Cfg, Cfg::BN>>;
  LoadA load_a(g.A, g.lda, g.M, g.K, g.vec_a, m0);
  LoadB load_b(g.B, g.ldb, g.N, g.K, g.vec_b, n0);
  __shared__ __align__(16) tile::SharedTiles<Cfg> smem;
  float acc[Cfg::TM][Cfg::TN];
  tile::multiply_tiles<Cfg>(smem, load_a, load_b, k_begin, k_end, acc);
  if (gridDim.z == 1) {
    tile::store_tile<Cfg>(acc, m0, n0, g.M, g.N, g.alpha, g.beta, g.C, g.ldc, g.vec_c);
  } else {
    float* slice = g.partial + int64_t(blockIdx.z) * g.M * g.N;
    tile::store_tile<Cfg>(acc, m0, n0, g.M, g.N, 1.f, 0.f, slice, g.N, g.N % 4 == 0);
  }
}

__global__ void split_k_reduce_kernel(int slices, int64_t M, int64_t N, const float* partial, float alpha, float beta,
                                      float* C, int64_t ldc) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int z = 0; z < slices; ++z) sum += partial[z * total + i];  // slice order: deterministic
    float* c = C + (i / N) * ldc + i % N;
    *c = beta != 0.f ? alpha * sum + beta * *c : alpha * sum;
  }
}

template <class Cfg>
void launch_sgemm(bool trans_a, bool trans_b, GemmArgs g, const GemmPlan& plan, cudaStream_t stream) {
  const dim3 grid(unsigned((g.M + Cfg::BM - 1) / Cfg::BM), unsigned((g.N + Cfg::BN - 1) / Cfg::BN), unsigned(plan.slices));
  DPCORE_CHECK(grid.y <= 65535, "sgemm: N = ", g.N, " needs more than 65535 column tiles");
  dpcore::kernels::cuda_runtime::Workspace partial(plan.slices > 1 ? size_t(plan.slices) * g.M * g.N * sizeof(float) : 0, stream);
  g.partial = partial.floats();
  g.chunk = int(plan.chunk);
  if (!trans_a && !trans_b) launch("sgemm_kernel", sgemm_kernel<Cfg, false, false>, grid, Cfg::THREADS, stream, g);
  if (!trans_a && trans_b) launch("sgemm_kernel", sgemm_kernel<Cfg, false, true>, grid, Cfg::THREADS, stream, g);
  if (trans_a && !trans_b) launch("sgemm_kernel", sgemm_kernel<Cfg, true, false>, grid, Cfg::THREADS, stream, g);
  if (trans_a && trans_b) launch("sgemm_kernel", sgemm_kernel<Cfg, true, true>, grid, Cfg::THREADS, stream, g);
  if (plan.slices > 1) split_k_reduce(plan.slices, g.M, g.N, partial.floats(), g.alpha, g.beta, g.C, g.ldc, stream);
}

int64_t round_up(int64_t value, int64_t unit) { return (value + unit - 1) / unit * unit; }

}  // namespace

GemmPlan plan_gemm(int64_t M, int64_t N, int64_t depth, bool allow_split, int multiprocessors) {
  GemmPlan plan;
  const int64_t large_tiles = ((M + tile::Large::BM - 1) / tile::Large::BM) * ((N + tile::Large::BN - 1) / tile::Large::BN);
  // Large tiles only when there are enough of them to fill every SM; otherwise the small
  // tiles' 4x more blocks win despite their lower FMA-per-load ratio.
  plan.large = M >= tile::Large::BM && N >= tile::Large::BN && large_tiles >= multiprocessors;
  const int64_t bm = plan.large ? tile::Large::BM : tile::Small::BM;
  const int64_t bn = plan.large ? tile::Large::BN : tile::Small::BN;
  const int64_t bk = plan.large ? tile::Large::BK : tile::Small::BK;
  const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn);
  plan.chunk = std::max<int64_t>(depth, 1);
  if (!allow_split || tiles >= multiprocessors || depth < 2 * kMinChunk) return plan;

  // About two blocks per SM, each slice at least kMinChunk long, the workspace bounded.
  int64_t slices = (2 * multiprocessors + tiles - 1) / tiles;
  slices = std::min(slices, std::max<int64_t>(1, kMaxPartialFloats / std::max<int64_t>(1, M * N)));
  plan.chunk = std::max(round_up((depth + slices - 1) / slices, bk), kMinChunk);
  plan.slices = int((depth + plan.chunk - 1) / plan.chunk);
  if (plan.slices == 1) plan.chunk = depth;
  return plan;
}

void split_k_reduce(int slices, int64_t M, int64_t N, const float* partial, float alpha, float beta, float* C,
                    int64_t ldc, cudaStream_t stream) {
  if (M * N == 0) return;
  launch("split_k_reduce_kernel", split_k_reduce_kernel, blocks_for(M * N, kElementwiseThreads), kElementwiseThreads, stream, slices, M, N, partial, alpha, beta, C, ldc);
}

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t stream) {
  check_int32("sgemm", "M", M);
  check_int32("sgemm", "N", N);
  check_int32("sgemm", "K", K);
  DPCORE_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K) && ldb >= std::max<int64_t>(1, trans_b ? K : N) &&
                   ldc >= std::max<int64_t>(1, N),
               "sgemm: leading dimensions lda ", lda, ", ldb ", ldb, ", ldc ", ldc, " too small for M ", M, ", N ", N,
               ", K ", K, (trans_a ? " (A transposed)" : ""), (trans_b ? " (B transposed)" : ""));
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = beta * C
    split_k_reduce(0, M, N, nullptr, alpha, beta, C, ldc, stream);
    return;
  }
  GemmArgs g{};
  g.A = A, g.B = B, g.C = C;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.M = int(M), g.N = int(N), g.K = int(K);
  g.alpha = alpha, g.beta = beta;
  g.vec_a = lda % 4 == 0 && aligned16(A);
  g.vec_b = ldb % 4 == 0 && aligned16(B);
  g.vec_c = ldc % 4 == 0 && aligned16(C);
  const GemmPlan plan = plan_gemm(M, N, K, true, sm_count());
  if (plan.large) {
    launch_sgemm<tile::Large>(trans_a, trans_b, g, plan, stream);
  } else {
    launch_sgemm<tile::Small>(trans_a, trans_b, g, plan, stream);
  }
}

}  // namespace dpcore::kernels::cuda
