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
  int64_t stride_a, stride_b, stride_c;  // from one matrix of a batch to the next
  int M, N, K, chunk, slices;
  float alpha, beta;
  bool vec_a, vec_b, vec_c;
};

template <class Cfg, bool TRANS_A, bool TRANS_B>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS) sgemm_kernel(GemmArgs g) {
  const int m0 = blockIdx.x * Cfg::BM, n0 = blockIdx.y * Cfg::BN;
  // blockIdx.z = matrix * slices + slice: either a batch's matrices (slices == 1) or the
  // split-K slices of a single product, never both (plan_gemm), so each block finds its
  // operands by plain strides and the tile code below is the same for both.
  const int slice = blockIdx.z % g.slices, matrix = blockIdx.z / g.slices;
  const int k_begin = slice * g.chunk, k_end = min(g.K, k_begin + g.chunk);
  // A[m, k] is A[m * lda + k], or A[k * lda + m] transposed; B[k, n] is B[k * ldb + n], or B[n * ldb + k].
  using LoadA = std::conditional_t<TRANS_A, tile::LoadRowContiguous<Cfg, Cfg::BM>, tile::LoadKContiguous<Cfg, Cfg::BM>>;
  using LoadB = std::conditional_t<TRANS_B, tile::LoadKContiguous<Cfg, Cfg::BN>, tile::LoadRowContiguous<Cfg, Cfg::BN>>;
  LoadA load_a(g.A + matrix * g.stride_a, g.lda, g.M, g.K, g.vec_a, m0);
  LoadB load_b(g.B + matrix * g.stride_b, g.ldb, g.N, g.K, g.vec_b, n0);
  __shared__ __align__(16) tile::SharedTiles<Cfg> smem;
  float acc[Cfg::TM][Cfg::TN];
  tile::multiply_tiles<Cfg>(smem, load_a, load_b, k_begin, k_end, acc);
  if (g.slices == 1) {
    tile::store_tile<Cfg>(acc, m0, n0, g.M, g.N, g.alpha, g.beta, g.C + matrix * g.stride_c, g.ldc, g.vec_c);
  } else {
    float* partial = g.partial + int64_t(slice) * g.M * g.N;
    tile::store_tile<Cfg>(acc, m0, n0, g.M, g.N, 1.f, 0.f, partial, g.N, g.N % 4 == 0);
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
void launch_sgemm(bool trans_a, bool trans_b, GemmArgs g, int64_t batch, const GemmPlan& plan, cudaStream_t stream) {
  const dim3 grid(unsigned((g.M + Cfg::BM - 1) / Cfg::BM), unsigned((g.N + Cfg::BN - 1) / Cfg::BN),
                  unsigned(plan.slices * batch));
  DPCORE_CHECK(grid.y <= 65535, "sgemm: N = ", g.N, " needs more than 65535 column tiles");
  DPCORE_CHECK(plan.slices * batch <= 65535, "sgemm: a batch of ", batch, " matrices exceeds the grid's 65535");
  dpcore::kernels::cuda_runtime::Workspace partial(plan.slices > 1 ? size_t(plan.slices) * g.M * g.N * sizeof(float) : 0, stream);
  g.partial = partial.floats();
  g.chunk = int(plan.chunk);
  g.slices = plan.slices;
  if (!trans_a && !trans_b) launch("sgemm_kernel", sgemm_kernel<Cfg, false, false>, grid, Cfg::THREADS, stream, g);
  if (!trans_a && trans_b) launch("sgemm_kernel", sgemm_kernel<Cfg, false, true>, grid, Cfg::THREADS, stream, g);
  if (trans_a && !trans_b) launch("sgemm_kernel", sgemm_kernel<Cfg, true, false>, grid, Cfg::THREADS, stream, g);
  if (trans_a && trans_b) launch("sgemm_kernel", sgemm_kernel<Cfg, true, true>, grid, Cfg::THREADS, stream, g);
  if (plan.slices > 1) split_k_reduce(plan.slices, g.M, g.N, partial.floats(), g.alpha, g.beta, g.C, g.ldc, stream);
}

int64_t round_up(int64_t value, int64_t unit) { return (value + unit - 1) / unit * unit; }

}  // namespace

GemmPlan plan_gemm(int64_t M, int64_t N, int64_t depth, bool allow_split, int multiprocessors, int64_t batch) {
  GemmPlan plan;
  const int64_t large_tiles =
      batch * ((M + tile::Large::BM - 1) / tile::Large::BM) * ((N + tile::Large::BN - 1) / tile::Large::BN);
  // Large tiles only when there are enough of them to fill every SM; otherwise the small
  // tiles' 4x more blocks win despite their lower FMA-per-load ratio.
  plan.large = M >= tile::Large::BM && N >= tile::Large::BN && large_tiles >= multiprocessors;
  const int64_t bm = plan.large ? tile::Large::BM : tile::Small::BM;
  const int64_t bn = plan.large ? tile::Large::BN : tile::Small::BN;
  const int64_t bk = plan.large ? tile::Large::BK : tile::Small::BK;
  const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn);
  plan.chunk = std::max<int64_t>(depth, 1);
  if (!allow_split || batch > 1 || tiles >= multiprocessors || depth < 2 * kMinChunk) return plan;

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
  sgemm_strided_batched(trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, stream);
}

void sgemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                           int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                           float* C, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream) {
  DPCORE_CHECK(batch >= 0 && stride_a >= 0 && stride_b >= 0 && stride_c >= 0, "sgemm: batch ", batch, ", strides ",
               stride_a, ", ", stride_b, ", ", stride_c, " must not be negative");
  check_int32("sgemm", "M", M);
  check_int32("sgemm", "N", N);
  check_int32("sgemm", "K", K);
  DPCORE_CHECK(lda >= std::max<int64_t>(1, trans_a ? M : K) && ldb >= std::max<int64_t>(1, trans_b ? K : N) &&
                   ldc >= std::max<int64_t>(1, N),
               "sgemm: leading dimensions lda ", lda, ", ldb ", ldb, ", ldc ", ldc, " too small for M ", M, ", N ", N,
               ", K ", K, (trans_a ? " (A transposed)" : ""), (trans_b ? " (B transposed)" : ""));
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // an empty sum: C = beta * C
    for (int64_t i = 0; i < batch; ++i) split_k_reduce(0, M, N, nullptr, alpha, beta, C + i * stride_c, ldc, stream);
    return;
  }
  GemmArgs g{};
  g.A = A, g.B = B, g.C = C;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.stride_a = stride_a, g.stride_b = stride_b, g.stride_c = stride_c;
  g.M = int(M), g.N = int(N), g.K = int(K);
  g.alpha = alpha, g.beta = beta;
  // float4 loads and stores need every matrix of the batch 16-byte aligned, not just the first.
  g.vec_a = lda % 4 == 0 && stride_a % 4 == 0 && aligned16(A);
  g.vec_b = ldb % 4 == 0 && stride_b % 4 == 0 && aligned16(B);
  g.vec_c = ldc % 4 == 0 && stride_c % 4 == 0 && aligned16(C);
  const GemmPlan plan = plan_gemm(M, N, K, true, sm_count(), batch);
  if (plan.large) {
    launch_sgemm<tile::Large>(trans_a, trans_b, g, batch, plan, stream);
  } else {
    launch_sgemm<tile::Small>(trans_a, trans_b, g, batch, plan, stream);
  }
}

}  // namespace dpcore::kernels::cuda
