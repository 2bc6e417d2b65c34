// How the ops outside autocast's 16-bit list take 16-bit tensors: the activations that
// autocast's ops hand on stay bfloat16 or float16 between ops, as in PyTorch, so the
// tensors the backward keeps take half float32's memory. Such an op computes in float32,
// as PyTorch's kernels compute their bfloat16 and float16 elementwise ops and norms: each
// 16-bit operand is widened (exactly) for the float32 kernel, and each 16-bit result is
// computed in float32 and rounded once (to nearest, ties to even).
//
// This is the conversion path: the float32 kernels serve every dtype, at the price of a
// widening pass per 16-bit operand and a rounding pass per 16-bit result. Ops whose rows
// (dim 0) are independent (elementwise ops, pooling, dropout) run it block by block,
//
//   Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
//   in_float32_blocks({flat(x)}, {flat(y)}, [&](Block& b) { backend(x).relu_forward(b.in[0], b.out[0]); });
//
// so that the float32 temporaries stay a few hundred kilobytes whatever the activation's
// size (widening a whole activation would hold three float32 copies of it at once, more
// than the 16-bit activations save). Layer norm, whose statistics span all rows, converts
// whole tensors (in_compute_dtype, empty_computed, stored_as). relu, add, transpose, max
// pooling, dropout and batch norm's passes over activations have 16-bit kernels of their
// own instead. Float32 and float64 tensors
// pass through untouched, in one call, so the float32 path costs nothing. None of this
// records autograd: the op records its own node, which saves the 16-bit tensors. Internal
// to engine/ops/.
#pragma once

#include <functional>
#include <vector>

#include "engine/tensor.h"

namespace dpcore::ops {

// The dtype the kernels compute a tensor of `dtype` in: float32 for bfloat16 and float16,
// the dtype itself otherwise.
DType compute_dtype(DType dtype);
// t itself, or (bfloat16, float16) its float32 widening.
Tensor in_compute_dtype(const Tensor& t);
// An uninitialised tensor of `shape` on like's device, of compute_dtype(like.dtype()).
Tensor empty_computed(const Shape& shape, const Tensor& like);
// `computed` itself when it is already of `dtype`, else a copy rounded once to `dtype`.
Tensor stored_as(const Tensor& computed, DType dtype);

// Rows [begin, end) of dim 0 of every tensor given to in_float32_blocks, in compute dtype:
// 16-bit inputs widened, 16-bit outputs to be rounded into their rows after the kernel.
struct Block {
  int64_t begin = 0, end = 0;
  std::vector<Tensor> in, out;
};
// Runs `kernel` on blocks of the rows (dim 0) of the first input, which every input and
// output has as many of, about 2^18 elements a block, when any tensor is 16-bit; on one
// block of all rows, the tensors themselves, otherwise. A kernel must treat rows
// independently.
void in_float32_blocks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                       const std::function<void(Block&)>& kernel);
// t viewed as one row per element, [numel]: the rows of an elementwise op.
Tensor flat(const Tensor& t);

// A per-feature tensor of a norm (weight, bias, running statistics) beside input x: on x's
// device and of compute_dtype(x.dtype()), so float32 beside a 16-bit input as in PyTorch.
void check_statistics_tensor(const char* op, const char* what, const Tensor& x, const Tensor& t);

}  // namespace dpcore::ops
