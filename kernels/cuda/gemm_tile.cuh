// The tiled GEMM main loop shared by sgemm and the three implicit-GEMM convolutions.
//
// One thread block computes a BM x BN tile of C = A * B, walking the reduction dimension
// in steps of BK:
//   1. global -> registers: each thread fetches its four elements of the next A and B tiles
//      (a "loader" decides which: a plain matrix, or an on-the-fly im2col gather for conv);
//   2. shared -> registers -> FMA: each thread computes a TM x TN micro-tile of outer
//      products from shared memory, so every shared load feeds TM (or TN) FMAs;
//   3. registers -> shared: the fetched tile goes into the OTHER shared buffer.
// With two shared buffers (double buffering) the global loads of step 1 are in flight while
// step 2 computes, and one __syncthreads per step suffices: the buffer written in step 3
// was last read in the previous step, which every thread finished before that step's barrier.
//
// Shared tiles are stored k-major, tile[k][row], so that the micro-tile's rows (and
// columns) for one k are contiguous and load as float4. Rows are padded by 4 floats: that
// keeps float4 alignment and spreads the transposed stores of the loaders over the banks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dpcore::kernels::cuda::tile {

template <int BM_, int BN_, int BK_, int TM_, int TN_, int MIN_BLOCKS_>
struct Config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int THREADS = (BM / TM) * (BN / TN);
  // __launch_bounds__'s blocks per SM: caps the registers at 65536 / (THREADS * MIN_BLOCKS).
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int PAD = 4;
  // Every thread loads exactly four elements of A and four of B per step: the loaders rely on it.
  static_assert(BM * BK == 4 * THREADS && BN * BK == 4 * THREADS, "one float4 of A and of B per thread and step");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tiles are made of float4 groups");
};

// The block's shared memory: the double-buffered A and B tiles of the main loop. Once the
// loop is done, store_tile_by_rows reuses the same bytes to stage the output tile, as
// STAGE_COLS columns of BM rows at a time (4 * BK of them for square tiles).
template <class Cfg>
struct SharedTiles {
  static constexpr int STAGE_COLS = (Cfg::BM == Cfg::BN ? 4 * Cfg::BK : 0);
  static_assert(STAGE_COLS > 0 && Cfg::BN % STAGE_COLS == 0 && Cfg::THREADS % Cfg::BM == 0,
                "a whole number of staged slabs, each row stored by whole threads");
  float a[2][Cfg::BK][Cfg::BM + Cfg::PAD];
  float b[2][Cfg::BK][Cfg::BN + Cfg::PAD];

  __device__ float (*stage())[Cfg::BM + Cfg::PAD] {
    return reinterpret_cast<float (*)[Cfg::BM + Cfg::PAD]>(&a[0][0][0]);
  }
};

// 128 x 128 tiles, 8 x 8 per thread, 256 threads: the classic SGEMM shape for big matrices
// (64 FMAs per 4 shared loads). Small tiles keep many blocks busy when M or N is small.
// MIN_BLOCKS caps the registers at 128 (Large) and 64 (Small), what ptxas takes for most
// kernels anyway (sm_90, -Xptxas -v), without spills. Uncapped, the Large conv forward
// takes 130 (1 block per SM instead of 2) and a Small sgemm spills; a minimum of 1 lets
// the Small kernels grow to 71-87 registers (2 blocks per SM instead of 4).
using Large = Config<128, 128, 8, 8, 8, 2>;
using Small = Config<64, 64, 16, 4, 4, 4>;

// Which rows of the block tile thread `ty` owns: TM/4 groups of 4 consecutive rows, the
// groups BM*4/TM apart. Two 4-row groups half a tile apart (for TM = 8) make the float4
// fragment loads of a warp hit different banks.
template <class Cfg>
__device__ __forceinline__ int micro_row(int i, int ty) {
  return (i / 4) * (Cfg::BM * 4 / Cfg::TM) + ty * 4 + (i % 4);
}
template <class Cfg>
__device__ __forceinline__ int micro_col(int j, int tx) {
  return (j / 4) * (Cfg::BN * 4 / Cfg::TN) + tx * 4 + (j % 4);
}

// ---- loaders: fetch(k0) reads this thread's 4 elements of the tile starting at k0,
// store(tile) writes them into shared memory tile[BK][ROWS + PAD]. Elements outside the
// matrix read as 0, so partial tiles need no special case in the main loop. ----

// Element (r, k) at p[r * ld + k]: k is contiguous (A not transposed, B transposed, the
// conv weights). Two (or four) threads share a row and each reads 4 consecutive k, as one
// float4 when `vec` (ld % 4 == 0, p 16-byte aligned) and the 4 are inside the matrix.
template <class Cfg, int ROWS>
struct LoadKContiguous {
  static_assert(Cfg::THREADS / (Cfg::BK / 4) == ROWS, "each thread loads 4 consecutive k of one row");
  const float* p;
  int64_t ld;
  int rows, depth;
  bool vec;
  int r, kq;
  float v[4];

  __device__ LoadKContiguous(const float* p_, int64_t ld_, int rows_, int depth_, bool vec_, int row0)
      : p(p_), ld(ld_), rows(rows_), depth(depth_), vec(vec_) {
    r = threadIdx.x / (Cfg::BK / 4);
    kq = (threadIdx.x % (Cfg::BK / 4)) * 4;
    rows -= row0;  // rows left from this tile on
    p += int64_t(row0 + r) * ld;
  }
  __device__ __forceinline__ void fetch(int k0) {
    const int k = k0 + kq;
    if (r >= rows) {
      v[0] = v[1] = v[2] = v[3] = 0.f;
    } else if (vec && k + 3 < depth) {
      const float4 t = *reinterpret_cast<const float4*>(p + k);
      v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = k + j < depth ? p[k + j] : 0.f;
    }
  }
  __device__ __forceinline__ void store(float (*tile)[ROWS + Cfg::PAD]) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) tile[kq + j][r] = v[j];
  }
};

// Element (r, k) at p[k * ld + r]: rows are contiguous (A transposed, B not transposed).
// A warp reads whole rows of the matrix, and each thread stores one float4 into shared.
template <class Cfg, int ROWS>
struct LoadRowContiguous {
  static_assert(Cfg::THREADS / (ROWS / 4) == Cfg::BK, "each thread loads 4 consecutive rows of one k");
  const float* p;
  int64_t ld;
  int rows, depth;
  bool vec;
  int k, rq;
  float v[4];

  __device__ LoadRowContiguous(const float* p_, int64_t ld_, int rows_, int depth_, bool vec_, int row0)
      : p(p_), ld(ld_), rows(rows_), depth(depth_), vec(vec_) {
    k = threadIdx.x / (ROWS / 4);
    rq = (threadIdx.x % (ROWS / 4)) * 4;
    rows -= row0 + rq;  // rows left from this thread's first row on
    p += row0 + rq;
  }
  __device__ __forceinline__ void fetch(int k0) {
    const int kk = k0 + k;
    const float* src = p + int64_t(kk) * ld;
    if (kk >= depth) {
      v[0] = v[1] = v[2] = v[3] = 0.f;
    } else if (vec && rows >= 4) {
      const float4 t = *reinterpret_cast<const float4*>(src);
      v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = j < rows ? src[j] : 0.f;
    }
  }
  __device__ __forceinline__ void store(float (*tile)[ROWS + Cfg::PAD]) const {
    *reinterpret_cast<float4*>(&tile[k][rq]) = make_float4(v[0], v[1], v[2], v[3]);
  }
};

// Gathered elements (conv's implicit im2col): each thread owns one row of the tile for the
// whole loop, so the row's decoding (image, output pixel) happens once, and reads 4
// consecutive k of it per step. Consecutive threads own consecutive rows, which for conv
// are neighbouring pixels: the warp's reads of the image are coalesced. Where instead k
// runs along memory (dy's pixels in backward-weight), LANES_ALONG_K puts the BK/4 threads
// of a row next to each other, so that they read BK consecutive k together.
// Gather provides: struct Row; Row row(int r) const; void load4(const Row&, int k, float (&v)[4]) const.
template <class Cfg, int ROWS, class Gather, bool LANES_ALONG_K = false>
struct LoadGather {
  static_assert(Cfg::THREADS / ROWS * 4 == Cfg::BK, "each thread loads 4 consecutive k of one row");
  Gather g;
  typename Gather::Row row;
  int r, kq;
  float v[4];

  __device__ LoadGather(const Gather& g_, int row0) : g(g_) {
    r = LANES_ALONG_K ? threadIdx.x / (Cfg::BK / 4) : threadIdx.x % ROWS;
    kq = (LANES_ALONG_K ? threadIdx.x % (Cfg::BK / 4) : threadIdx.x / ROWS) * 4;
    row = g.row(row0 + r);
  }
  __device__ __forceinline__ void fetch(int k0) { g.load4(row, k0 + kq, v); }
  __device__ __forceinline__ void store(float (*tile)[ROWS + Cfg::PAD]) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) tile[kq + j][r] = v[j];
  }
};

// acc = A[tile rows, k_begin:k_end] * B[k_begin:k_end, tile cols] for this thread's
// micro-tile. k_begin must be a multiple of BK; loads past the matrix read 0.
// On return no thread reads `smem` any more (the loop ends with a barrier): callers may reuse it.
template <class Cfg, class LoadA, class LoadB>
__device__ __forceinline__ void multiply_tiles(SharedTiles<Cfg>& smem, LoadA& load_a, LoadB& load_b, int k_begin,
                                               int k_end, float (&acc)[Cfg::TM][Cfg::TN]) {
  auto& As = smem.a;
  auto& Bs = smem.b;
  const int tx = threadIdx.x % (Cfg::BN / Cfg::TN), ty = threadIdx.x / (Cfg::BN / Cfg::TN);

#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = 0.f;
  if (k_begin >= k_end) return;

  load_a.fetch(k_begin);
  load_b.fetch(k_begin);
  load_a.store(As[0]);
  load_b.store(Bs[0]);
  __syncthreads();

  int buf = 0;
  for (int k0 = k_begin; k0 < k_end; k0 += Cfg::BK) {
    const bool more = k0 + Cfg::BK < k_end;
    if (more) {  // issued now, consumed after the FMAs below: the latency hides behind them
      load_a.fetch(k0 + Cfg::BK);
      load_b.fetch(k0 + Cfg::BK);
    }
#pragma unroll
    for (int kk = 0; kk < Cfg::BK; ++kk) {
      float a[Cfg::TM], b[Cfg::TN];
#pragma unroll
      for (int g = 0; g < Cfg::TM / 4; ++g) {
        const float4 t = *reinterpret_cast<const float4*>(&As[buf][kk][micro_row<Cfg>(4 * g, ty)]);
        a[4 * g] = t.x, a[4 * g + 1] = t.y, a[4 * g + 2] = t.z, a[4 * g + 3] = t.w;
      }
#pragma unroll
      for (int g = 0; g < Cfg::TN / 4; ++g) {
        const float4 t = *reinterpret_cast<const float4*>(&Bs[buf][kk][micro_col<Cfg>(4 * g, tx)]);
        b[4 * g] = t.x, b[4 * g + 1] = t.y, b[4 * g + 2] = t.z, b[4 * g + 3] = t.w;
      }
#pragma unroll
      for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (more) {
      load_a.store(As[buf ^ 1]);
      load_b.store(Bs[buf ^ 1]);
    }
    __syncthreads();
    buf ^= 1;
  }
}

// Writes the micro-tile to row-major C (ldc): C = alpha * acc + beta * C, with beta == 0
// never reading C. Columns come in groups of 4 and go out as one float4 when `vec`.
template <class Cfg>
__device__ __forceinline__ void store_tile(const float (&acc)[Cfg::TM][Cfg::TN], int m0, int n0, int M, int N,
                                           float alpha, float beta, float* C, int64_t ldc, bool vec) {
  const int tx = threadIdx.x % (Cfg::BN / Cfg::TN), ty = threadIdx.x / (Cfg::BN / Cfg::TN);
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i) {
    const int m = m0 + micro_row<Cfg>(i, ty);
    if (m >= M) continue;
    float* row = C + int64_t(m) * ldc;
#pragma unroll
    for (int g = 0; g < Cfg::TN / 4; ++g) {
      const int n = n0 + micro_col<Cfg>(4 * g, tx);
      float out[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) out[j] = alpha * acc[i][4 * g + j];
      if (vec && n + 3 < N) {
        float4* dst = reinterpret_cast<float4*>(row + n);
        if (beta != 0.f) {
          const float4 old = *dst;
          out[0] += beta * old.x, out[1] += beta * old.y, out[2] += beta * old.z, out[3] += beta * old.w;
        }
        *dst = make_float4(out[0], out[1], out[2], out[3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (n + j >= N) break;
          row[n + j] = beta != 0.f ? out[j] + beta * row[n + j] : out[j];
        }
      }
    }
  }
}

// Writes the micro-tiles of an output whose ROWS are contiguous in memory and whose columns
// lie far apart (conv's y[n, k, p, q] with rows m = (n, p, q)): stored straight from the
// micro-tiles, a warp's lanes would write 16 columns, planes apart. Instead the tile passes
// through shared memory a slab of STAGE_COLS columns at a time, and then thread t stores
// tile row t % BM of the slab's columns: consecutive lanes, consecutive rows, one coalesced
// store per column. `store(col, v)` writes value v of tile column col in the calling
// thread's row, so the caller decodes that row once; it skips what is outside the matrix.
// Must follow multiply_tiles (which leaves `smem` free).
template <class Cfg, class Store>
__device__ __forceinline__ void store_tile_by_rows(const float (&acc)[Cfg::TM][Cfg::TN], SharedTiles<Cfg>& smem,
                                                   const Store& store) {
  constexpr int COLS = SharedTiles<Cfg>::STAGE_COLS;
  float(*stage)[Cfg::BM + Cfg::PAD] = smem.stage();
  const int tx = threadIdx.x % (Cfg::BN / Cfg::TN), ty = threadIdx.x / (Cfg::BN / Cfg::TN);
  for (int c0 = 0; c0 < Cfg::BN; c0 += COLS) {  // not unrolled: fully unrolled, conv forward spills at 128 registers
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) {
      const int col = micro_col<Cfg>(j, tx) - c0;
      if (unsigned(col) >= unsigned(COLS)) continue;
#pragma unroll
      for (int g = 0; g < Cfg::TM / 4; ++g)  // 4 consecutive rows: one float4
        *reinterpret_cast<float4*>(&stage[col][micro_row<Cfg>(4 * g, ty)]) =
            make_float4(acc[4 * g][j], acc[4 * g + 1][j], acc[4 * g + 2][j], acc[4 * g + 3][j]);
    }
    __syncthreads();
    constexpr int COLS_PER_PASS = Cfg::THREADS / Cfg::BM;
#pragma unroll
    for (int pass = 0; pass < COLS / COLS_PER_PASS; ++pass) {
      const int col = pass * COLS_PER_PASS + threadIdx.x / Cfg::BM;
      store(c0 + col, stage[col][threadIdx.x % Cfg::BM]);
    }
    __syncthreads();  // the slab is read before the next one overwrites it
  }
}

}  // namespace dpcore::kernels::cuda::tile
