// The host execution layer's <mma.h>: nvcuda::wmma, the warp-level matrix operations, for
// the shape the tensor-core kernels use (m16n16k16: matrix_a and matrix_b fragments of
// __nv_bfloat16 or __half, row_major or col_major; accumulators of float).
//
// CUDA leaves unspecified which lane holds which element of a fragment; a kernel may only
// load, multiply, store, fill, and apply the same operation to every element (x[0] up to
// num_elements). This emulation picks a layout that needs no cross-lane traffic:
//   * matrix_a / matrix_b: every lane holds the whole 16 x 16 tile (num_elements 256),
//     kept as the matrix itself: A[m][k] at x[m * 16 + k], B[k][n] at x[k * 16 + n],
//     whatever the memory layout it was loaded from. Loads only read, so all 32 lanes
//     reading the whole tile is no race.
//   * accumulator: the 256 elements of C are spread over the warp, C[m][n] (e = m * 16 + n)
//     held by lane e % 32 as x[e / 32] (num_elements 8, as on the hardware). Each lane's
//     mma_sync computes its own 8 elements from the whole A and B tiles, and each lane's
//     store writes only its own: no two lanes write one word (ThreadSanitizer would report
//     a race), and mma costs each lane 8 x 16 products, not 16 x 16 x 16.
// The product is the exact float products (a 16-bit by 16-bit product fits in float32's
// 24-bit significand) accumulated in float32 in k order from the accumulator's value;
// tensor cores round their sums differently, which kernels must tolerate anyway.
//
// load_matrix_sync, mma_sync and store_matrix_sync are warp-collective: all 32 lanes of the
// warp must call them together. Each one is a host_exec::exchange over the full warp, so a
// lane that has exited, a lane that is not there (a block that is not a whole number of
// warps), or lanes in different operations end the launch with an error, as a shuffle's
// would; the exchange also orders the lanes for ThreadSanitizer like a real warp's
// convergence. fill_fragment is per lane (registers only), as in CUDA.
//
// CUDA's rules on the memory operands are checked, so a kernel that breaks them fails here
// and not only on a GPU: the pointer 256-bit (32-byte) aligned, ldm a multiple of 8
// elements for 16-bit types and of 4 for float (16 bytes either way).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment;

// The multiplicands: the whole tile in every lane (see the top of this file).
template <class Use, class T, class Layout>
struct fragment<Use, 16, 16, 16, T, Layout> {
  static_assert(std::is_same_v<Use, matrix_a> || std::is_same_v<Use, matrix_b>, "a fragment of matrix_a or matrix_b");
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "the host WMMA has 16-bit multiplicands only (__nv_bfloat16, __half)");
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "a multiplicand fragment is row_major or col_major");
  using element_type = T;
  using storage_element_type = T;
  static constexpr int num_elements = 256;
  T x[num_elements];
};

// The accumulator: element e of the 16 x 16 tile in lane e % 32, as x[e / 32].
template <>
struct fragment<accumulator, 16, 16, 16, float, void> {
  using element_type = float;
  using storage_element_type = float;
  static constexpr int num_elements = 8;
  float x[num_elements];
};

namespace detail {

// The warp's convergence point of each collective operation (see the top of this file).
inline void converge(const char* operation) { host_exec::exchange(0xffffffffu, 0, host_exec::lane_id(), operation); }

inline void check_operand(const char* operation, const void* p, unsigned ldm, unsigned ldm_multiple) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    throw std::runtime_error(std::string(operation) + ": the pointer is not 256-bit aligned, as WMMA requires");
  if (ldm % ldm_multiple != 0)
    throw std::runtime_error(std::string(operation) + ": ldm = " + std::to_string(ldm) + " is not a multiple of " +
                             std::to_string(ldm_multiple) + " elements (16 bytes), as WMMA requires");
}

template <class Layout>
constexpr layout_t layout_of() {
  return std::is_same_v<Layout, row_major> ? mem_row_major : mem_col_major;
}

}  // namespace detail

template <class Use, class T, class Layout, class V>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, const V& value) {
  for (auto& e : f.x) e = T(value);
}

// A multiplicand: matrix_a's element (m, k) is p[m * ldm + k] row-major, p[k * ldm + m]
// column-major; matrix_b's (k, n) is p[k * ldm + n] row-major, p[n * ldm + k] column-major.
// Both are kept as the logical matrix, row r column c at x[r * 16 + c].
template <class Use, class T, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  detail::check_operand("wmma::load_matrix_sync", p, ldm, 8);
  detail::converge("wmma::load_matrix_sync");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = detail::layout_of<Layout>() == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}

// The accumulator: each lane reads its own elements only.
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  detail::check_operand("wmma::load_matrix_sync", p, ldm, 4);
  detail::converge("wmma::load_matrix_sync");
  const int lane = host_exec::lane_id();
  for (int i = 0; i < f.num_elements; ++i) {
    const int e = i * 32 + lane, m = e / 16, n = e % 16;
    f.x[i] = layout == mem_row_major ? p[m * ldm + n] : p[n * ldm + m];
  }
}

template <class Use, class T, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>&, const T*, unsigned, layout_t) = delete;  // a multiplicand's layout is its type's

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  detail::check_operand("wmma::store_matrix_sync", p, ldm, 4);
  detail::converge("wmma::store_matrix_sync");
  const int lane = host_exec::lane_id();
  for (int i = 0; i < f.num_elements; ++i) {
    const int e = i * 32 + lane, m = e / 16, n = e % 16;
    (layout == mem_row_major ? p[m * ldm + n] : p[n * ldm + m]) = f.x[i];
  }
}

// d = a * b + c over this lane's elements of d; d may be c.
template <class T, class LayoutA, class LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  detail::converge("wmma::mma_sync");
  const int lane = host_exec::lane_id();
  for (int i = 0; i < d.num_elements; ++i) {
    const int e = i * 32 + lane, m = e / 16, n = e % 16;
    float sum = c.x[i];
    for (int k = 0; k < 16; ++k) sum += float(a.x[m * 16 + k]) * float(b.x[k * 16 + n]);  // each product exact
    d.x[i] = sum;
  }
}

}  // namespace wmma
}  // namespace nvcuda
