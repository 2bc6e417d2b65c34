// The pooling test cases (max_pool2d, avg_pool2d): a Pool2dShape from its sizes, the output
// sizes derived as the op derives them, and a named case of a case table.
#pragma once

#include <cstdint>

#include "kernels/shapes.h"

namespace dpcore::testing {

inline kernels::Pool2dShape pool_shape(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh,
                                       int64_t sw, int64_t ph, int64_t pw) {
  kernels::Pool2dShape s;
  s.N = N, s.C = C, s.H = H, s.W = W, s.kernel_h = kh, s.kernel_w = kw;
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  s.P = kernels::conv_out_size(H, kh, sh, ph);
  s.Q = kernels::conv_out_size(W, kw, sw, pw);
  return s;
}

struct PoolCase {
  const char* name;
  kernels::Pool2dShape shape;
};

}  // namespace dpcore::testing
