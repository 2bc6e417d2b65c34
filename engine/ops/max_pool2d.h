// max_pool2d's shape check, shared with the fused block (engine/ops/conv2d_relu_max_pool2d.cpp).
// Internal to engine/ops/.
#pragma once

#include "engine/ops/op_support.h"

namespace dpcore::ops {

// Checks max_pool2d's input and options and works out its shape.
Pool2dShape pool2d_shape(const Tensor& x, const Pool2dOptions& opt);

}  // namespace dpcore::ops
