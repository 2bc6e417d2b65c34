// im2col/col2im, one row of col (fixed c, r, s) at a time. Along each output row the
// positions that land inside the image form one contiguous range of q, so the inner loops
// are a plain (strided) copy between two zero-filled margins: no bounds test per element.
//
// The reference models' convolutions (3x3, stride 1, padding 1) keep the width (Q == W):
// there a whole col row is the input plane shifted by a constant offset, so it moves as
// one long contiguous block, and only the few entries that wrapped across a row edge need
// fixing. That is several times fewer, longer loops on the small planes of deep layers.
#include "kernels/cpu/im2col.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/vector_variants.h"

namespace dpcore::kernels::cpu {

namespace {

// The outputs o in [lo, hi) whose input o*stride - pad + offset lies in [0, size).
struct ValidRange {
  int64_t lo, hi;
};
ValidRange valid_outputs(int64_t outputs, int64_t size, int64_t stride, int64_t pad, int64_t offset) {
  auto first_at_least = [&](int64_t target) {  // smallest o >= 0 with o*stride - pad + offset >= target
    int64_t need = target + pad - offset;
    return need <= 0 ? 0 : (need + stride - 1) / stride;
  };
  int64_t lo = std::min(first_at_least(0), outputs);
  int64_t hi = std::max(std::min(first_at_least(size), outputs), lo);
  return {lo, hi};
}

// One col row (tap r, k of one channel) as the shifted plane: valid when both strides are
// 1 and Q == W, so that col index i = p*Q + q reads plane index i + shift.
struct ShiftedRow {
  ValidRange ps, qs;      // valid output rows and columns
  int64_t shift;          // plane index - col index
  int64_t begin, end;     // col indices whose plane index lies inside the plane
  ShiftedRow(const Conv2dShape& s, int64_t r, int64_t k)
      : ps(valid_outputs(s.P, s.H, 1, s.pad_h, r)),
        qs(valid_outputs(s.Q, s.W, 1, s.pad_w, k)),
        shift((r - s.pad_h) * s.W + (k - s.pad_w)),
        begin(std::max(ps.lo * s.Q, -shift)),
        end(std::max(std::min(ps.hi * s.Q, s.H * s.W - shift), begin)) {}
};

bool keeps_width(const Conv2dShape& s) { return s.stride_h == 1 && s.stride_w == 1 && s.Q == s.W; }

// Zeroes the entries of a col row that lie in the padding: rows of p outside ps, and in
// the rows inside, the margins of q outside qs. The margins go a column at a time: there
// are few margin columns (at most the padding) but many rows, and a fill per row would
// cost a call per one or two entries.
template <class T>
void zero_padding(const Conv2dShape& s, const ValidRange& ps, const ValidRange& qs, T* row) {
  std::fill(row, row + ps.lo * s.Q, T{});
  auto zero_column = [&](int64_t q) {
    for (int64_t p = ps.lo; p < ps.hi; ++p) row[p * s.Q + q] = T{};
  };
  for (int64_t q = 0; q < qs.lo; ++q) zero_column(q);
  for (int64_t q = qs.hi; q < s.Q; ++q) zero_column(q);
  std::fill(row + ps.hi * s.Q, row + s.P * s.Q, T{});
}

// Every other 16-bit value: out[i] = in[2i], i < n, read as the low halves of the 32-bit
// words (in[2i], in[2i+1]) (x86 is little-endian), which GCC vectorises as a truncating
// conversion (vpmovdw) where it would not vectorise the strided copy; built per vector width.
DPCORE_VECTOR_LOOP void every_other_loop(int64_t n, const uint16_t* in, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t pair;
    std::memcpy(&pair, in + 2 * i, sizeof pair);
    out[i] = uint16_t(pair);
  }
}
DPCORE_VECTOR_VARIANTS(every_other, (int64_t n, const uint16_t* in, uint16_t* out), (n, in, out))

// out[q] = in[q * stride] for q in qs. A stride of 2 over 16-bit values through every_other
// (the last value alone: its word would reach one value past it, perhaps past the image).
template <class T>
void strided_copy(const T* in, int64_t stride, const ValidRange& qs, T* out) {
  if constexpr (sizeof(T) == 2) {
    if (stride == 2 && qs.hi > qs.lo) {
      const uint16_t* from = reinterpret_cast<const uint16_t*>(in) + 2 * qs.lo;
      uint16_t* to = reinterpret_cast<uint16_t*>(out) + qs.lo;
      const int64_t n = qs.hi - qs.lo;
      every_other(n - 1, from, to);
      to[n - 1] = from[2 * (n - 1)];
      return;
    }
  }
  for (int64_t q = qs.lo; q < qs.hi; ++q) out[q] = in[q * stride];
}

template <class T>
void im2col_row(const Conv2dShape& s, const T* plane, int64_t r, int64_t k, T* row) {
  if (keeps_width(s)) {
    ShiftedRow sr(s, r, k);
    // The block copy also brings in entries from across row edges; they are padding.
    std::copy(plane + sr.begin + sr.shift, plane + sr.end + sr.shift, row + sr.begin);
    zero_padding(s, sr.ps, sr.qs, row);
    return;
  }
  ValidRange ps = valid_outputs(s.P, s.H, s.stride_h, s.pad_h, r);
  ValidRange qs = valid_outputs(s.Q, s.W, s.stride_w, s.pad_w, k);
  for (int64_t p = ps.lo; p < ps.hi; ++p) {
    const int64_t base = (p * s.stride_h - s.pad_h + r) * s.W - s.pad_w + k;  // plane[base + q*stride_w] is under q
    T* out = row + p * s.Q;
    if (s.stride_w == 1) {
      std::copy(plane + base + qs.lo, plane + base + qs.hi, out + qs.lo);
    } else {
      strided_copy(plane + base, s.stride_w, qs, out);
    }
  }
  zero_padding(s, ps, qs, row);
}

// Adds a col row back onto the plane. May overwrite the row (its padding entries).
template <class T>
void col2im_row(const Conv2dShape& s, T* row, int64_t r, int64_t k, T* plane) {
  if (keeps_width(s)) {
    ShiftedRow sr(s, r, k);
    // Padding entries have no input to go to; zeroed, they can ride along in one block add.
    zero_padding(s, sr.ps, sr.qs, row);
    T* out = plane + sr.begin + sr.shift;
    const T* in = row + sr.begin;
#pragma omp simd
    for (int64_t i = 0; i < sr.end - sr.begin; ++i) out[i] += in[i];
    return;
  }
  ValidRange ps = valid_outputs(s.P, s.H, s.stride_h, s.pad_h, r);
  ValidRange qs = valid_outputs(s.Q, s.W, s.stride_w, s.pad_w, k);
  for (int64_t p = ps.lo; p < ps.hi; ++p) {
    const int64_t base = (p * s.stride_h - s.pad_h + r) * s.W - s.pad_w + k;  // plane[base + q*stride_w] fed q
    const T* in = row + p * s.Q;
    if (s.stride_w == 1) {
      T* out = plane + base + qs.lo;
      for (int64_t i = 0; i < qs.hi - qs.lo; ++i) out[i] += in[qs.lo + i];
    } else {
      for (int64_t q = qs.lo; q < qs.hi; ++q) plane[base + q * s.stride_w] += in[q];
    }
  }
}

}  // namespace

template <class T>
void im2col(const Conv2dShape& s, const T* x, T* col, int64_t ld) {
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t r = 0; r < s.R; ++r)
      for (int64_t k = 0; k < s.S; ++k) im2col_row(s, x + c * s.H * s.W, r, k, col + ((c * s.R + r) * s.S + k) * ld);
}

template <class T>
void im2col_images(const Conv2dShape& s, const T* x, int64_t n0, int64_t images, T* col) {
  const int64_t pq = s.P * s.Q, image = s.C * s.H * s.W;
  for (int64_t i = 0; i < images; ++i) im2col(s, x + (n0 + i) * image, col + i * pq, images * pq);
}

template <class T>
const T* dy_matrix(const Conv2dShape& s, const T* dy, int64_t n0, int64_t images, T* scratch) {
  const int64_t pq = s.P * s.Q, image = s.K * pq, ld = images * pq;
  if (images == 1) return dy + n0 * image;
  for (int64_t k = 0; k < s.K; ++k)
    for (int64_t i = 0; i < images; ++i) std::copy_n(dy + (n0 + i) * image + k * pq, pq, scratch + k * ld + i * pq);
  return scratch;
}

template <class T>
void col2im(const Conv2dShape& s, T* col, T* dx) {
  std::fill(dx, dx + s.C * s.H * s.W, T{});
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t r = 0; r < s.R; ++r)
      for (int64_t k = 0; k < s.S; ++k)
        col2im_row(s, col + ((c * s.R + r) * s.S + k) * s.P * s.Q, r, k, dx + c * s.H * s.W);
}

#define DPCORE_INSTANTIATE(T)                                                                   \
  template void im2col<T>(const Conv2dShape&, const T*, T*, int64_t);                           \
  template void im2col_images<T>(const Conv2dShape&, const T*, int64_t, int64_t, T*);           \
  template const T* dy_matrix<T>(const Conv2dShape&, const T*, int64_t, int64_t, T*);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(double)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE
template void col2im<float>(const Conv2dShape&, float*, float*);
template void col2im<double>(const Conv2dShape&, double*, double*);

}  // namespace dpcore::kernels::cpu
