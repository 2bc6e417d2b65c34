// bfloat16 GEMM on AVX512-BF16, and on AMX tiles where the CPU has them (the second half of
// the file, which shares B's packing and the store): C[M,N] = alpha * op(A) op(B) + beta * C.
//
// vdpbf16ps (_mm512_dpbf16_ps) takes 16 float32 lanes and two vectors of 32 bfloat16, and
// adds to lane i the two products a[2i] b[2i] and a[2i+1] b[2i+1]: exact products (8 + 8
// significant bits fit a float32), each added in float32, round to nearest even, with
// subnormal inputs and results flushed to zero. So one instruction does 32 multiply-adds if
// the operands are laid out in pairs along k:
//   * A is packed into blocks of kRows rows, [k pair][row] as 32-bit words holding
//     (A[r, 2p], A[r, 2p+1]); one word broadcast to all lanes feeds a row;
//   * B is packed into panels of 32 columns, [k pair][column] as 32-bit words holding
//     (B[2p, c], B[2p+1, c]); two 64-byte loads per pair cover the panel.
// Odd K is padded with a zero pair half, partial row blocks and panels with zeros, so the
// inner loop has no edge cases; the store writes only the real elements. Packing costs a
// pass over both operands per call, which on a convolution's small GEMMs (16 output
// channels: two row blocks) is as much work as the products, so it moves whole vectors:
// where the pairs lie in two rows of storage, 32 values of each are interleaved in
// registers; where they lie along a row (a transposed operand), 16 x 16 tiles of pair words
// are transposed in registers (docs/benchmarks.md, "16-bit convolutions on the CPU").
// The micro-kernel keeps kRows x 32 float32 sums in 2 * kRows zmm registers (16 for
// kRows = 8, plus two of B and one broadcast: 19 of the 32), and walks all of K: each
// element of C is one fixed sequence of additions, whichever thread computes it.
#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

namespace {

constexpr int64_t kRows = 8;     // rows of C per micro-kernel call
constexpr int64_t kPanel = 32;   // columns of C per micro-kernel call (two zmm of float32)

#define DPCORE_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// The pair (lo at k, hi at k + 1) as vdpbf16ps reads it from one 32-bit word.
inline uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }
// The two adjacent 16-bit values at p as one such word (lo first in memory: little-endian).
inline uint32_t word_at(const BFloat16* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// A packed: out[(blk * pairs + p) * kRows + r] holds op(A)[row, 2p] and [row, 2p + 1] for
// row = blk * kRows + r, zeros past the matrix. trans_a false: a row of op(A) is a row of
// storage, its pairs already adjacent, copied word by word; trans_a true: rows 2p and
// 2p + 1 of storage hold the block's 8 rows side by side, interleaved in registers (masked
// loads past row M).
DPCORE_AVX512_BF16 void pack_a(bool trans, int64_t M, int64_t K, const BFloat16* A, int64_t lda, int64_t blocks,
                               uint32_t* out) {
  const int64_t pairs = (K + 1) / 2, full = K / 2;
  if (trans) {
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t row = blk * kRows, rows = std::min(kRows, M - row);
      const __mmask8 mask = __mmask8((1u << rows) - 1);
      for (int64_t p = 0; p < pairs; ++p) {
        const __m128i lo_row = _mm_maskz_loadu_epi16(mask, A + 2 * p * lda + row);
        const __m128i hi_row = 2 * p + 1 < K ? _mm_maskz_loadu_epi16(mask, A + (2 * p + 1) * lda + row)
                                             : _mm_setzero_si128();
        uint32_t* dst = out + (blk * pairs + p) * kRows;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi16(lo_row, hi_row));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 4), _mm_unpackhi_epi16(lo_row, hi_row));
      }
    }
    return;
  }
#pragma omp for schedule(static)
  for (int64_t row = 0; row < blocks * kRows; ++row) {
    uint32_t* dst = out + (row / kRows) * pairs * kRows + row % kRows;
    if (row >= M) {
      for (int64_t p = 0; p < pairs; ++p) dst[p * kRows] = 0;
      continue;
    }
    const BFloat16* src = A + row * lda;
    for (int64_t p = 0; p < full; ++p) dst[p * kRows] = word_at(src + 2 * p);
    if (K % 2) dst[full * kRows] = pair(src[K - 1].bits, 0);
  }
}

// rows[i] (i < 16) transposed in place: afterwards rows[j] holds element j of every input
// row, as 32-bit words (three rounds of unpacks and lane shuffles, 64 instructions).
// (GCC 12 warns that the intrinsics' own undefined pass-through operand "may be used
// uninitialized", its bug 105593; every value here is defined.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
DPCORE_AVX512_BF16 void transpose_16x16(__m512i rows[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // lane L: (a[4L], b[4L], a[4L+1], b[4L+1]) and the next two
    t[2 * i] = _mm512_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  for (int j = 0; j < 4; ++j) {  // u[4j + m], lane L: element 4L + m of rows 4j..4j+3
    u[4 * j] = _mm512_unpacklo_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 1] = _mm512_unpackhi_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 2] = _mm512_unpacklo_epi64(t[4 * j + 1], t[4 * j + 3]);
    u[4 * j + 3] = _mm512_unpackhi_epi64(t[4 * j + 1], t[4 * j + 3]);
  }
  for (int m = 0; m < 4; ++m) {  // element q = 4L + m gathers lane L of u[m], u[4+m], u[8+m], u[12+m]
    const __m512i even_lo = _mm512_shuffle_i32x4(u[m], u[4 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i even_hi = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i odd_lo = _mm512_shuffle_i32x4(u[m], u[4 + m], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i odd_hi = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], _MM_SHUFFLE(3, 1, 3, 1));
    rows[m] = _mm512_shuffle_i32x4(even_lo, even_hi, _MM_SHUFFLE(2, 0, 2, 0));       // lane 0
    rows[8 + m] = _mm512_shuffle_i32x4(even_lo, even_hi, _MM_SHUFFLE(3, 1, 3, 1));   // lane 2
    rows[4 + m] = _mm512_shuffle_i32x4(odd_lo, odd_hi, _MM_SHUFFLE(2, 0, 2, 0));     // lane 1
    rows[12 + m] = _mm512_shuffle_i32x4(odd_lo, odd_hi, _MM_SHUFFLE(3, 1, 3, 1));    // lane 3
  }
}
#pragma GCC diagnostic pop

// B packed: out[(pnl * stride + p) * kPanel + c] holds op(B)[2p, col] and [2p + 1, col]
// for col = pnl * kPanel + c, zeros past the matrix and for pairs p from (K + 1) / 2 to
// `stride` (AMX's tiles take 16 pairs at a time). trans_b false: rows 2p and 2p + 1 of B
// are 32 contiguous values each, interleaved in registers (masked loads past column N);
// trans_b true: a column of op(B) is a row of storage, its pairs already adjacent.
DPCORE_AVX512_BF16 void pack_b(bool trans, int64_t N, int64_t K, const BFloat16* B, int64_t ldb, int64_t panels,
                               int64_t stride, uint32_t* out) {
  const int64_t pairs = (K + 1) / 2, full = K / 2;
  if (!trans) {
    // unpacklo/hi interleave within 128-bit lanes: lo holds columns 8j..8j+3 of lane j, hi
    // 8j+4..8j+7; these quad indices put columns 0..15, then 16..31, in order.
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
#pragma omp for schedule(static)
    for (int64_t pnl = 0; pnl < panels; ++pnl) {
      const int64_t col = pnl * kPanel, cols = std::min(kPanel, N - col);
      const __mmask32 mask = cols == kPanel ? ~__mmask32(0) : __mmask32((uint64_t(1) << cols) - 1);
      for (int64_t p = 0; p < pairs; ++p) {
        const __m512i lo_row = _mm512_maskz_loadu_epi16(mask, B + 2 * p * ldb + col);
        const __m512i hi_row = 2 * p + 1 < K ? _mm512_maskz_loadu_epi16(mask, B + (2 * p + 1) * ldb + col)
                                             : _mm512_setzero_si512();
        const __m512i lo = _mm512_unpacklo_epi16(lo_row, hi_row), hi = _mm512_unpackhi_epi16(lo_row, hi_row);
        uint32_t* dst = out + (pnl * stride + p) * kPanel;
        _mm512_storeu_si512(dst, _mm512_permutex2var_epi64(lo, first, hi));
        _mm512_storeu_si512(dst + 16, _mm512_permutex2var_epi64(lo, second, hi));
      }
      std::fill(out + (pnl * stride + pairs) * kPanel, out + (pnl + 1) * stride * kPanel, 0u);
    }
    return;
  }
  // Tiles of 16 columns x 16 pairs: 16 rows of storage (columns past N read as zeros)
  // transposed in registers into 16 stores of one pair's 16 columns; the pairs left after
  // the last whole tile (and an odd K's last, half-zero pair) word by word.
  const int64_t tiled = full / 16 * 16;
#pragma omp for schedule(static)
  for (int64_t group = 0; group < panels * 2; ++group) {
    const int64_t c0 = group * 16;  // the group's first column; its panel and place in it:
    uint32_t* dst = out + (c0 / kPanel) * stride * kPanel + c0 % kPanel;
    __m512i rows[16];
    for (int64_t p0 = 0; p0 < tiled; p0 += 16) {
      for (int64_t i = 0; i < 16; ++i)
        rows[i] = c0 + i < N ? _mm512_loadu_si512(B + (c0 + i) * ldb + 2 * p0) : _mm512_setzero_si512();
      transpose_16x16(rows);
      for (int64_t j = 0; j < 16; ++j) _mm512_storeu_si512(dst + (p0 + j) * kPanel, rows[j]);
    }
    for (int64_t i = 0; i < 16; ++i) {
      const BFloat16* src = B + (c0 + i) * ldb;
      for (int64_t p = tiled; p < pairs; ++p)
        dst[p * kPanel + i] = c0 + i >= N ? 0 : p < full ? word_at(src + 2 * p) : pair(src[K - 1].bits, 0);
      for (int64_t p = pairs; p < stride; ++p) dst[p * kPanel + i] = 0;
    }
  }
}

// Packing space kept per calling thread between calls (a training step asks for the same
// sizes every time; every word is written before it is read).
uint32_t* packing_scratch(size_t n, int slot) {
  thread_local std::vector<uint32_t> buffers[2];
  std::vector<uint32_t>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// sums[r][j] over rows r < kRows, columns j < 32 of one block of A and one panel of B.
DPCORE_AVX512_BF16 void micro_kernel(int64_t pairs, const uint32_t* a, const uint32_t* b, float* sums) {
  __m512 acc[kRows][2];
  for (int64_t r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kPanel);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * kPanel + 16);
    for (int64_t r = 0; r < kRows; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(int(a[p * kRows + r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    _mm512_storeu_ps(sums + r * kPanel, acc[r][0]);
    _mm512_storeu_ps(sums + r * kPanel + 16, acc[r][1]);
  }
}

// c[j] = alpha * s[j] + beta * c[j] for one row of a tile, j < cols: float32 C as is; a
// bfloat16 C rounded once, here, with the old value added first when beta is 1. Built for
// AVX-512 (the target of this file's kernels), so that GCC vectorises the rounding's
// integer arithmetic (kernels/half_types.h) 16 lanes at a time.
DPCORE_AVX512_BF16 void store_row(int64_t cols, float alpha, const float* s, float beta, float* c) {
  if (beta == 0.f) {
    for (int64_t j = 0; j < cols; ++j) c[j] = alpha * s[j];
  } else {
    for (int64_t j = 0; j < cols; ++j) c[j] = alpha * s[j] + beta * c[j];
  }
}
DPCORE_AVX512_BF16 void store_row(int64_t cols, float alpha, const float* s, float beta, BFloat16* c) {
  if (beta == 0.f) {
    for (int64_t j = 0; j < cols; ++j) c[j] = float_to_bfloat16(alpha * s[j]);
  } else {
    for (int64_t j = 0; j < cols; ++j) c[j] = float_to_bfloat16(alpha * s[j] + bfloat16_to_float(c[j]));
  }
}

// ---- AMX (Intel's Advanced Matrix Extensions, Sapphire Rapids on): eight tile registers of
// up to 16 rows x 64 bytes, and tdpbf16ps, which adds to a 16 x 16 float32 tile the
// products of a 16 x 32 bfloat16 tile of A and a 16-pair x 16 tile of B in the pair layout
// above: vdpbf16ps's arithmetic (exact products, float32 sums, subnormals flushed), a
// whole 16 x 16 x 32 block per instruction. The kernel keeps a 32 x 32 block of C in four
// tiles, loads two tiles of A and two of B per 32 values of k, and walks all of K: as in
// the vdpbf16ps kernel, each element of C is one fixed sequence of additions.

constexpr int64_t kAmxRows = 32;   // rows of C per micro-kernel call (two tiles)
constexpr int64_t kAmxPairs = 16;  // pairs of k per tile of A or B (32 values)

#define DPCORE_AMX_BF16 __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

// The 64-byte configuration ldtilecfg reads: palette 1, then the bytes per row and rows of
// each tile register: all eight 16 x 64 bytes. A namespace-scope object: GCC 12 does not
// count ldtilecfg as a read of the memory it is given, and dropped the stores that filled
// in a local one.
struct TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
const TileConfig kTileConfig;

// A packed for the tiles: out[((blk * chunks + c) * kAmxRows + r) * 16 + w] holds the pair
// w of chunk c (k = 32c + 2w, + 1) of row blk * kAmxRows + r of op(A), zeros past the
// matrix, so that each tile of A is 16 rows of 64 contiguous bytes. trans_a false: a row
// of op(A) is a row of storage, copied 32 values at a time; trans_a true: rows 2p and
// 2p + 1 of storage hold the block's rows side by side, read along them a pair at a time.
DPCORE_AMX_BF16 void pack_a_tiles(bool trans, int64_t M, int64_t K, const BFloat16* A, int64_t lda, int64_t blocks,
                                  int64_t chunks, uint32_t* out) {
  const int64_t pairs = (K + 1) / 2, stride = chunks * kAmxPairs;
  auto at = [&](int64_t blk, int64_t r, int64_t p) -> uint32_t& {
    return out[((blk * chunks + p / kAmxPairs) * kAmxRows + r) * kAmxPairs + p % kAmxPairs];
  };
#pragma omp for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t rows = std::min(kAmxRows, M - blk * kAmxRows);
    for (int64_t r = rows; r < kAmxRows; ++r)
      for (int64_t p = 0; p < stride; ++p) at(blk, r, p) = 0;
    if (!trans) {
      // A tile row is 32 consecutive values of a row of storage: one 64-byte copy, the last
      // chunk's values past K zeros.
      for (int64_t r = 0; r < rows; ++r) {
        const BFloat16* src = A + (blk * kAmxRows + r) * lda;
        for (int64_t c = 0; c < chunks; ++c) {
          uint32_t* dst = &at(blk, r, c * kAmxPairs);
          const int64_t values = std::min<int64_t>(2 * kAmxPairs, K - 2 * kAmxPairs * c);
          if (values < 2 * kAmxPairs) std::fill(dst, dst + kAmxPairs, 0u);
          std::memcpy(dst, src + 2 * kAmxPairs * c, size_t(values) * sizeof(BFloat16));
        }
      }
      continue;
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t p = pairs; p < stride; ++p) at(blk, r, p) = 0;
    for (int64_t p = 0; p < pairs; ++p) {
      const BFloat16* lo = A + 2 * p * lda + blk * kAmxRows;
      const BFloat16* hi = 2 * p + 1 < K ? lo + lda : nullptr;
      for (int64_t r = 0; r < rows; ++r) at(blk, r, p) = pair(lo[r].bits, hi ? hi[r].bits : 0);
    }
  }
}

// sums[r][j] over rows r < 32, columns j < 32 of one block of A and one panel of B; tiles
// 0-3 hold C, 4-5 A, 6-7 B (configured by the caller).
DPCORE_AMX_BF16 void amx_micro_kernel(int64_t chunks, const uint32_t* a, const uint32_t* b, float* sums) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  constexpr int64_t a_tile = 16 * kAmxPairs, a_stride = kAmxPairs * 4, b_stride = kPanel * 4;
  for (int64_t c = 0; c < chunks; ++c) {
    const uint32_t* a_chunk = a + c * kAmxRows * kAmxPairs;
    const uint32_t* b_chunk = b + c * kAmxPairs * kPanel;
    _tile_loadd(4, a_chunk, a_stride);
    _tile_loadd(5, a_chunk + a_tile, a_stride);
    _tile_loadd(6, b_chunk, b_stride);
    _tile_loadd(7, b_chunk + 16, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  constexpr int64_t c_stride = kPanel * 4;
  _tile_stored(0, sums, c_stride);
  _tile_stored(1, sums + 16, c_stride);
  _tile_stored(2, sums + 16 * kPanel, c_stride);
  _tile_stored(3, sums + 16 * kPanel + 16, c_stride);
}

DPCORE_AMX_BF16 void configure_tiles() { _tile_loadconfig(&kTileConfig); }
DPCORE_AMX_BF16 void release_tiles() { _tile_release(); }

// Linux hands out the tiles' register state only to a process that asks for it (the
// kernel's arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, Linux 5.16 on); asked once.
bool amx_permitted() {
  static const bool permitted = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return permitted;
}

// The two kernels as the driver below takes them: rows of C per block, the pairs of k each
// packed block and panel holds, A's packing, and the micro-kernel with what each thread
// sets up around its tiles.
struct Avx512Kernel {
  static constexpr int64_t kBlockRows = kRows;
  static int64_t stride(int64_t pairs) { return pairs; }
  static void pack(bool trans, int64_t M, int64_t K, const BFloat16* A, int64_t lda, int64_t blocks, uint32_t* out) {
    pack_a(trans, M, K, A, lda, blocks, out);
  }
  static void begin() {}
  static void multiply(int64_t stride, const uint32_t* a, const uint32_t* b, float* sums) {
    micro_kernel(stride, a, b, sums);
  }
  static void end() {}
};
struct AmxKernel {
  static constexpr int64_t kBlockRows = kAmxRows;
  static int64_t stride(int64_t pairs) { return (pairs + kAmxPairs - 1) / kAmxPairs * kAmxPairs; }
  static void pack(bool trans, int64_t M, int64_t K, const BFloat16* A, int64_t lda, int64_t blocks, uint32_t* out) {
    pack_a_tiles(trans, M, K, A, lda, blocks, stride((K + 1) / 2) / kAmxPairs, out);
  }
  static void begin() { configure_tiles(); }
  static void multiply(int64_t stride, const uint32_t* a, const uint32_t* b, float* sums) {
    amx_micro_kernel(stride / kAmxPairs, a, b, sums);
  }
  static void end() { release_tiles(); }
};

// C = alpha * op(A) op(B) + beta * C on one of the kernels: both operands packed (see the
// top of the file; a missing k + 1 or row or column reads 0), then the tiles panel by
// panel, so that a thread's consecutive tiles share one panel of B, each tile's sums stored
// a row at a time.
template <class Kernel, class Out>
void gemm_tiles(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A,
                int64_t lda, const BFloat16* B, int64_t ldb, float beta, Out* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  constexpr int64_t rows_per_block = Kernel::kBlockRows;
  const int64_t stride = Kernel::stride((K + 1) / 2);
  const int64_t blocks = (M + rows_per_block - 1) / rows_per_block, panels = (N + kPanel - 1) / kPanel;
  uint32_t* a = packing_scratch(size_t(blocks * stride * rows_per_block), 0);
  uint32_t* b = packing_scratch(size_t(panels * stride * kPanel), 1);
  const int threads = omp_in_parallel() ? 1 : kernel_threads();
  const bool parallel = threads > 1 && double(M) * N * K >= double(1 << 20);
#pragma omp parallel num_threads(threads) if (parallel)
  {
    Kernel::pack(trans_a, M, K, A, lda, blocks, a);
    pack_b(trans_b, N, K, B, ldb, panels, stride, b);  // (its omp for's barrier: both packed before any tile)
    Kernel::begin();
    float sums[rows_per_block * kPanel];
#pragma omp for schedule(static)
    for (int64_t tile = 0; tile < blocks * panels; ++tile) {
      const int64_t pnl = tile / blocks, blk = tile % blocks;
      Kernel::multiply(stride, a + blk * stride * rows_per_block, b + pnl * stride * kPanel, sums);
      const int64_t rows = std::min(rows_per_block, M - blk * rows_per_block), cols = std::min(kPanel, N - pnl * kPanel);
      for (int64_t r = 0; r < rows; ++r)
        store_row(cols, alpha, sums + r * kPanel, beta, C + (blk * rows_per_block + r) * ldc + pnl * kPanel);
    }
    Kernel::end();
  }
}

}  // namespace

bool cpu_has_amx_bf16() {
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool amx_bf16 = edx & (1u << 22), amx_tile = edx & (1u << 24);
  return amx_bf16 && amx_tile && cpu_has_avx512_bf16() && amx_permitted();
}

template <class Out>
void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A,
                   int64_t lda, const BFloat16* B, int64_t ldb, float beta, Out* C, int64_t ldc) {
  gemm_tiles<AmxKernel>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template void gemm_bf16_amx<float>(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t,
                                   const BFloat16*, int64_t, float, float*, int64_t);
template void gemm_bf16_amx<BFloat16>(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t,
                                      const BFloat16*, int64_t, float, BFloat16*, int64_t);

bool cpu_has_avx512_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

template <class Out>
void gemm_bf16_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* A,
                      int64_t lda, const BFloat16* B, int64_t ldb, float beta, Out* C, int64_t ldc) {
  gemm_tiles<Avx512Kernel>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template void gemm_bf16_avx512<float>(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t,
                                       const BFloat16*, int64_t, float, float*, int64_t);
template void gemm_bf16_avx512<BFloat16>(bool, bool, int64_t, int64_t, int64_t, float, const BFloat16*, int64_t,
                                          const BFloat16*, int64_t, float, BFloat16*, int64_t);

}  // namespace dpcore::kernels::cpu
