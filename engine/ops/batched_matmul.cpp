// batched_matmul: c[..., M, N] = op(a)[..., M, K] * op(b)[..., K, N] over equal batch
// dimensions (torch.matmul of 3-d and 4-d operands, without broadcasting), and its backward.
#include <string>

#include "engine/ops/autocast_operands.h"
#include "engine/ops/op_support.h"

namespace dpcore::ops {

namespace {

using kernels::BatchedMatmulShape;

// c = op(x) * op(y) in a fresh tensor of `shape` (the batch dims, then s.M, s.N).
Tensor product(const BatchedMatmulShape& s, const Tensor& x, const Tensor& y, const Shape& shape) {
  Tensor c = Tensor::empty(shape, x.dtype(), x.device());
  backend(x).batched_matmul(s, x, y, c);
  return c;
}

// "a [2,3,4]", or "a [2,4,3] transposed": an operand as the error messages show it.
std::string operand(const char* name, const Tensor& t, bool transposed) {
  return std::string(name) + " " + shape_str(t.shape()) + (transposed ? " transposed" : "");
}

}  // namespace

// The gradients are batched matmuls too, each stored the way its operand is, with the
// transposes folded into the flags (no transposed copies). d op(a) = dc op(b)^T and
// d op(b) = op(a)^T dc, so:
//   da = dc op(b)^T                  : (dc, b, false, !trans_b), [M, K]
//   da = (dc op(b)^T)^T = op(b) dc^T : (b, dc, trans_b, true),  [K, M] when trans_a
//   db = op(a)^T dc                  : (a, dc, !trans_a, false), [K, N]
//   db = (op(a)^T dc)^T = dc^T op(a) : (dc, a, true, trans_a),  [N, K] when trans_b
struct BatchedMatmulBackward : Node {
  BatchedMatmulShape s;
  Tensor a, b;
  const char* name() const override { return "BatchedMatmulBackward"; }
  std::vector<Tensor> apply(const Tensor& dc) override {
    std::vector<Tensor> grads(2);
    if (needs_grad(*this, 0)) {
      grads[0] = s.trans_a ? product({s.batch, s.K, s.M, s.N, s.trans_b, true}, b, dc, a.shape())
                           : product({s.batch, s.M, s.K, s.N, false, !s.trans_b}, dc, b, a.shape());
    }
    if (needs_grad(*this, 1)) {
      grads[1] = s.trans_b ? product({s.batch, s.N, s.K, s.M, true, s.trans_a}, dc, a, b.shape())
                           : product({s.batch, s.K, s.N, s.M, !s.trans_a, false}, a, dc, b.shape());
    }
    return grads;
  }
};

Tensor batched_matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  if (auto low = autocast_dtype_for({a, b})) {  // the 16-bit kernels, float32 accumulation
    AutocastScope off(DType::Float32);
    return batched_matmul(lowered(a, *low), lowered(b, *low), trans_a, trans_b);
  }
  check_float_or_half_tensor("batched_matmul", "a", a);
  check_float_or_half_tensor("batched_matmul", "b", b);
  check_same_device_dtype("batched_matmul", a, b);
  DPCORE_CHECK(a.dim() == 3 || a.dim() == 4, "batched_matmul: ", operand("a", a, trans_a),
               " must have 3 or 4 dimensions (batch dimensions, then the matrix)");
  const Shape batch_dims(a.shape().begin(), a.shape().end() - 2);
  DPCORE_CHECK(b.dim() == a.dim() && Shape(b.shape().begin(), b.shape().end() - 2) == batch_dims,
               "batched_matmul: ", operand("a", a, trans_a), " and ", operand("b", b, trans_b),
               " must have the same batch dimensions ", shape_str(batch_dims),
               " (broadcasting them is not supported)");
  const int64_t M = a.size(trans_a ? -1 : -2), K = a.size(trans_a ? -2 : -1);
  const int64_t b_rows = b.size(trans_b ? -1 : -2), N = b.size(trans_b ? -2 : -1);
  DPCORE_CHECK(K == b_rows, "batched_matmul: ", operand("a", a, trans_a), " has ", K, " columns but ",
               operand("b", b, trans_b), " has ", b_rows, " rows");
  int64_t batch = 1;
  for (int64_t d : batch_dims) batch *= d;
  const BatchedMatmulShape s{batch, M, N, K, trans_a, trans_b};
  Shape c_shape = batch_dims;
  c_shape.push_back(M);
  c_shape.push_back(N);
  Tensor c = product(s, a, b, c_shape);
  auto node = std::make_shared<BatchedMatmulBackward>();
  node->s = s, node->a = a.detach(), node->b = b.detach();
  return record(node, c, {a, b});
}

}  // namespace dpcore::ops
