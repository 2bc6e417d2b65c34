// The pooling ops' shape check, shared by max_pool2d, the fused block
// (engine/ops/conv2d_relu_max_pool2d.cpp) and avg_pool2d. Internal to engine/ops/.
#pragma once

#include "engine/ops/op_support.h"

namespace dpcore::ops {

// Checks a pooling op's input and options (max_pool2d's rules; errors name `op`) and works
// out its shape.
Pool2dShape pool2d_shape(const char* op, const Tensor& x, const Pool2dOptions& opt);

}  // namespace dpcore::ops
