// The pooling ops' shape check, shared by max_pool2d, the fused block
// (engine/ops/conv2d_relu_max_pool2d.cpp) and avg_pool2d, and the shape of a block of their
// images. Internal to engine/ops/.
#pragma once

#include "engine/ops/float32_compute.h"
#include "engine/ops/op_support.h"

namespace dpcore::ops {

// Checks a pooling op's input and options (max_pool2d's rules; errors name `op`) and works
// out its shape.
Pool2dShape pool2d_shape(const char* op, const Tensor& x, const Pool2dOptions& opt);

// s for the images [b.begin, b.end) of a block of the conversion path (in_float32_blocks).
inline Pool2dShape images(Pool2dShape s, const Block& b) {
  s.N = b.end - b.begin;
  return s;
}

}  // namespace dpcore::ops
