// The float32 paths of gelu, softmax and layer_norm work in blocks of kFloatBlock floats,
// each one `#pragma omp simd` loop of a constant trip count, so that GCC vectorises the
// block whole, with no scalar remainder, and calls glibc's vector math (libmvec) for the
// expf, erff and tanhf in it. A row's or an array's tail, shorter than a block, runs
// through the same block code on a padded copy: every element takes the same path, so the
// results do not depend on where a thread's share or a row starts, and the reductions
// (one partial sum per lane, then a fixed tree) have one order whatever the thread count.
// Internal to kernels/cpu.
//
// glibc's math.h declares the vector variants only under -ffast-math (bits/math-vector.h),
// which would also drop the NaN and inf semantics the tests check; the declarations below
// are the ones it would make, for the three functions these kernels need. They take effect
// where the file is built with -fno-math-errno (kernels/cpu/CMakeLists.txt): a call that
// may set errno is not vectorised. glibc documents its vector functions within 4 ulp. gelu
// and softmax build their blocks for AVX-512 and AVX2 as well (vector_variants.h), which
// call libmvec's 16- and 8-lane functions; a sweep of one float bit pattern in every 64
// against double (glibc 2.36) measured at most, for the 4-, 8- and 16-lane versions: expf
// 2.80, 2.57 and 2.57 ulp, erff 1.91, 1.91 and 4.00, tanhf 1.02, 1.02 and 1.37, with NaN,
// +-inf and +-0 as the scalar functions give them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

extern "C" {
__attribute__((simd("notinbranch"))) float expf(float);
__attribute__((simd("notinbranch"))) float erff(float);
__attribute__((simd("notinbranch"))) float tanhf(float);
}

namespace dpcore::kernels::cpu {

constexpr int kFloatBlock = 16;  // floats: one AVX-512 register, four SSE ones

// out[i] = f(a[i], b[i]) for the block of `count` <= kFloatBlock elements at a, b and out
// (out may be a or b). The block goes through local copies, padded with `pad` when short:
// the vector loop then has nothing to check for overlap, and GCC emits it alone, where on
// the arrays themselves it kept a scalar version beside it for overlapping ones. A full
// block's copies have a constant length (a few vector moves, no memmove call).
// Always inlined, so that a caller built for a wider vector target (vector_variants.h)
// vectorises the block at its own width.
template <class F>
__attribute__((always_inline)) inline void map_block(int64_t count, const float* a, const float* b, float* out, float pad, const F& f) {
  float a_block[kFloatBlock], b_block[kFloatBlock], out_block[kFloatBlock];
  if (count == kFloatBlock) {
    std::copy(a, a + kFloatBlock, a_block), std::copy(b, b + kFloatBlock, b_block);
  } else {
    std::fill(a_block + count, a_block + kFloatBlock, pad), std::fill(b_block + count, b_block + kFloatBlock, pad);
    std::copy(a, a + count, a_block), std::copy(b, b + count, b_block);
  }
#pragma omp simd
  for (int k = 0; k < kFloatBlock; ++k) out_block[k] = f(a_block[k], b_block[k]);
  if (count == kFloatBlock)
    std::copy(out_block, out_block + kFloatBlock, out);
  else
    std::copy(out_block, out_block + count, out);
}

// The sum of a block's lane partial sums, in a fixed tree.
template <class Acc>
__attribute__((always_inline)) inline Acc lane_total(Acc (&lanes)[kFloatBlock]) {
  for (int width = kFloatBlock / 2; width >= 1; width /= 2)
    for (int k = 0; k < width; ++k) lanes[k] += lanes[k + width];
  return lanes[0];
}

// sum over j < n of term(j), one partial sum in Acc per lane j % kFloatBlock, then
// lane_total: n / kFloatBlock + 1 additions per lane and 4 in the tree, whatever n's split.
template <class Acc, class F>
__attribute__((always_inline)) inline Acc lane_sum(int64_t n, const F& term) {
  Acc lanes[kFloatBlock] = {};
  int64_t j = 0;
  for (; j + kFloatBlock <= n; j += kFloatBlock) {
#pragma omp simd
    for (int k = 0; k < kFloatBlock; ++k) lanes[k] += Acc(term(j + k));
  }
  for (int k = 0; j + k < n; ++k) lanes[k] += Acc(term(j + k));
  return lane_total(lanes);
}

// max over j < n of value(j) (-inf for n = 0), one running max per lane as lane_sum keeps
// its sums, then a tree: a vector max per block where one running max would wait on each
// comparison in turn (a scalar chain GCC does not vectorise: 4 cycles an element). A max
// is the same value in any order, so the lanes change no bits; a NaN may be kept or passed
// over, as the scalar loop's std::max did.
template <class F>
__attribute__((always_inline)) inline float lane_max(int64_t n, const F& value) {
  float lanes[kFloatBlock];
  std::fill(lanes, lanes + kFloatBlock, -INFINITY);
  int64_t j = 0;
  for (; j + kFloatBlock <= n; j += kFloatBlock) {
#pragma omp simd
    for (int k = 0; k < kFloatBlock; ++k) lanes[k] = std::max(lanes[k], value(j + k));
  }
  for (int k = 0; j + k < n; ++k) lanes[k] = std::max(lanes[k], value(j + k));
  for (int width = kFloatBlock / 2; width >= 1; width /= 2)
    for (int k = 0; k < width; ++k) lanes[k] = std::max(lanes[k], lanes[k + width]);
  return lanes[0];
}

}  // namespace dpcore::kernels::cpu
