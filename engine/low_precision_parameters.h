// The low-precision copy of a model's float32 parameters that autocast computes with
// (issue 27, docs/mixed-precision.md): ONE flat buffer of bfloat16 or float16 in the very
// layout of FlatParameters::values(), refreshed by one cast over the whole buffer once per
// step, after the optimizer has updated the float32 master weights; never per op or per
// micro-batch. The master weights, their gradients and the optimizer state stay float32.
//
// param(i) hands a forward parameter i in the low precision: a view into the copy that
// autograd records as to(master.param(i), dtype), so its backward widens the 16-bit
// gradient into the float32 gradient buffer (PyTorch's autocast casts the weight inside
// each op and caches the cast for the forward; here the cast is done once for all
// parameters and the uses only take views).
#pragma once

#include <vector>

#include "engine/flat_parameters.h"

namespace dpcore {

class LowPrecisionParameters {
 public:
  // master: float32 parameters; dtype: BFloat16 or Float16 (anything else is refused,
  // naming it). The copy starts stale: refresh() before the first forward.
  LowPrecisionParameters(const FlatParameters& master, DType dtype);

  DType dtype() const { return values_.dtype(); }
  // The copy itself, [master.total()]; its padding is the master's zeros, cast.
  const Tensor& values() const { return values_; }

  // values = master.values() cast to dtype (round to nearest even): one Backend::cast.
  void refresh();
  // Parameter i in the low precision, for one forward (a fresh tensor each call, so each
  // forward records its own use); its gradient reaches master.param(i)'s.
  Tensor param(size_t i) const;

 private:
  const FlatParameters& master_;
  Tensor values_;
};

}  // namespace dpcore
