// Autocast (torch.autocast): while an AutocastScope is open on a thread, the ops that
// profit from 16-bit operands (linear, batched_matmul, conv2d and its fused forms,
// scaled_dot_product_attention) cast their float32 operands to bfloat16 or float16, compute
// with float32 accumulation and hand on a 16-bit result, as PyTorch's do. The ops after
// them take it as it is: elementwise ops, pooling and the norms compute in float32 and hand
// on the input's dtype, softmax, log-softmax and the losses widen it and hand on float32
// (engine/ops/norm_statistics.h, docs/mixed-precision.md). The scope is per thread, as
// PyTorch's: each replica thread opens its own (layers::Model::set_precision does it around
// every forward).
#pragma once

#include "engine/dtype.h"

namespace dpcore {

// The dtype autocast computes its ops in on this thread: BFloat16 or Float16 inside a
// scope, Float32 (off) outside any.
DType autocast_dtype();

// Opens autocast in `dtype` (BFloat16, Float16, or Float32 to turn it off inside an outer
// scope) for this thread until it is destroyed; scopes nest. Any other dtype is refused,
// naming it.
class AutocastScope {
 public:
  explicit AutocastScope(DType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  DType previous_;
};

}  // namespace dpcore
