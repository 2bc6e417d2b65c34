// How softmax(x + mask) over the last dimension finds each row's mask row and causal limit,
// shared by the CPU and CUDA softmax kernels, their reference and the engine op.
//
// x is [..., Tq, Tk], viewed as rows of Tk. The mask is optional and broadcasts against x
// as in PyTorch's x + mask: aligned from the right, every dimension either x's size or 1,
// with two restrictions: its last dimension must be Tk (a per-row constant would not change
// a softmax), and it has at most as many dimensions as x. So, against attention scores
// [B, H, Tq, Tk]: the same shape, a key mask [B, 1, 1, Tk], a [Tq, Tk] (or [1, 1, Tq, Tk])
// mask shared by the batch and heads, [B, H, 1, Tk], or a [Tk] vector. A key-padding mask
// [B, Tk] is NOT the same as [B, 1, 1, Tk] under broadcasting (it would align B with Tq):
// reshape it first, as torch.nn.MultiheadAttention does. causal masks key j of query i when
// j > i, top-left aligned, as PyTorch 2.x's scaled_dot_product_attention(is_causal=True)
// (its mask is ones(Tq, Tk).tril(0)); the query of row r is r % Tq.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/error.h"

namespace dpcore::kernels {

constexpr int kSoftmaxMaxDims = 8;  // of x

struct SoftmaxShape {
  int64_t rows = 0, cols = 0;  // x as [rows, cols]
  int64_t queries = 1;         // Tq = x's second-to-last size (1 for a 1-d x)
  bool causal = false;
  bool masked = false;         // a mask is given
  // The leading dimensions of x (all but the last) and, for each, the mask's stride in
  // elements along it (0 where the mask broadcasts).
  int lead_dims = 0;
  int64_t lead_size[kSoftmaxMaxDims] = {};
  int64_t mask_stride[kSoftmaxMaxDims] = {};
};

// The offset of row `row`'s mask row in the mask.
#ifdef __CUDACC__
__host__ __device__
#endif
inline int64_t softmax_mask_row(const SoftmaxShape& s, int64_t row) {
  int64_t offset = 0;
  for (int d = s.lead_dims - 1; d >= 0; --d) {
    offset += (row % s.lead_size[d]) * s.mask_stride[d];
    row /= s.lead_size[d];
  }
  return offset;
}

// Entry j of row `row`'s logits, x + mask, or -inf where causal masks it; Acc is the type
// the kernel computes in (double on the CPU, float on CUDA).
template <class Acc, class T>
#ifdef __CUDACC__
__host__ __device__
#endif
inline Acc softmax_logit(const SoftmaxShape& s, const T* x_row, const T* mask_row, int64_t row, int64_t j) {
  if (s.causal && j > row % s.queries) return -Acc(INFINITY);
  return mask_row ? Acc(x_row[j]) + Acc(mask_row[j]) : Acc(x_row[j]);
}

// The shape of softmax over x_shape's last dimension with a mask of mask_shape (null: none);
// fails naming the op and both shapes for a mask that does not broadcast as above.
inline SoftmaxShape softmax_shape(const std::vector<int64_t>& x_shape, const std::vector<int64_t>* mask_shape,
                                  bool causal) {
  const int dims = int(x_shape.size());
  DPCORE_CHECK(dims >= 1 && x_shape.back() > 0, "softmax: input ", shape_str(x_shape),
               " has no last dimension to normalise over");
  DPCORE_CHECK(dims <= kSoftmaxMaxDims, "softmax: input ", shape_str(x_shape), " has more than ", kSoftmaxMaxDims,
               " dimensions");
  DPCORE_CHECK(!causal || dims >= 2, "softmax: causal needs an input of at least 2 dimensions [..., Tq, Tk], got ",
               shape_str(x_shape));
  SoftmaxShape s;
  s.cols = x_shape.back();
  s.rows = 1;
  for (int d = 0; d < dims - 1; ++d) s.rows *= x_shape[d];
  s.queries = dims >= 2 ? x_shape[dims - 2] : 1;
  s.causal = causal;
  s.lead_dims = dims - 1;
  for (int d = 0; d < dims - 1; ++d) s.lead_size[d] = x_shape[d];
  if (!mask_shape) return s;
  const std::vector<int64_t>& m = *mask_shape;
  const int mask_dims = int(m.size());
  DPCORE_CHECK(mask_dims >= 1 && mask_dims <= dims && m.back() == s.cols, "softmax: mask ", shape_str(m),
               " does not broadcast against input ", shape_str(x_shape), " (it needs at most ", dims,
               " dimensions and a last dimension of ", s.cols, ")");
  s.masked = true;
  int64_t stride = s.cols;
  for (int d = dims - 2, md = mask_dims - 2; d >= 0; --d, --md) {
    const int64_t size = md >= 0 ? m[md] : 1;
    DPCORE_CHECK(size == 1 || size == x_shape[d], "softmax: mask ", shape_str(m), " does not broadcast against input ",
                 shape_str(x_shape), " (dimension ", md, " of the mask is ", size, ", not 1 or ", x_shape[d], ")");
    s.mask_stride[d] = size == 1 ? 0 : stride;
    stride *= size;
  }
  return s;
}

}  // namespace dpcore::kernels
