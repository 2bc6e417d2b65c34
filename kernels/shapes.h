// Shapes shared by every kernel implementation (naive reference, fast CPU, hand CUDA,
// cuDNN/cuBLAS).
//
// Kernels take raw pointers plus one of these plain structs, never a Tensor: that keeps
// kernels/ free of the engine, so each kernel file reads like a textbook loop nest and can
// be tested and benchmarked on its own. The engine's ops (engine/ops/) check tensors and
// work out these structs; the backends (engine/cpu_backend.cpp, engine/cuda_backend.cu)
// pass them on to the kernels.
#pragma once

#include <cstdint>

namespace dpcore::kernels {

// conv2d, NCHW input x[N,C,H,W], OIHW weights w[K,C,R,S], output y[N,K,P,Q].
struct Conv2dShape {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input batch, channels, height, width
  int64_t K = 0, R = 0, S = 0;         // output channels, kernel height, kernel width
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t P = 0, Q = 0;                // output height, width (floor mode)

  int64_t x_size() const { return N * C * H * W; }
  int64_t w_size() const { return K * C * R * S; }
  int64_t y_size() const { return N * K * P * Q; }
  // Multiply-adds of the forward pass; backward-data and backward-weight do the same.
  double flops() const { return 2.0 * double(N) * K * P * Q * C * R * S; }
};

// Output size along one dimension, PyTorch's floor rule; 0 when the window is larger than
// the padded input (C++ division truncates toward zero, which would give 1 there).
inline int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  const int64_t span = in + 2 * pad - kernel;
  return span < 0 ? 0 : span / stride + 1;
}

// max_pool2d and avg_pool2d over x[N,C,H,W] -> y[N,C,P,Q]; max_pool2d's padding counts as
// -infinity, avg_pool2d's as zeros.
struct Pool2dShape {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  int64_t P = 0, Q = 0;

  int64_t x_size() const { return N * C * H * W; }
  int64_t y_size() const { return N * C * P * Q; }
};

// batch_norm2d over x[N,C,H,W]: statistics per channel over its count() = N*H*W values.
struct BatchNorm2dShape {
  int64_t N = 0, C = 0, H = 0, W = 0;
  // A synchronised batch norm normalises with the statistics of the whole replica group:
  // group_count is the number of values per channel over all replicas (the sum of their
  // count()s), 0 for this replica's own count(). finalize's unbiased factor n / (n - 1) and
  // backward_apply's 1 / n take n = stats_count().
  int64_t group_count = 0;

  int64_t x_size() const { return N * C * H * W; }
  int64_t count() const { return N * H * W; }
  int64_t stats_count() const { return group_count > 0 ? group_count : count(); }
};

// y[N,out] = x[N,in] * W[out,in]^T + b[out]  (PyTorch's nn.Linear layout).
struct LinearShape {
  int64_t N = 0, in = 0, out = 0;
  double flops() const { return 2.0 * double(N) * in * out; }
};

// ---- batched matmul ----
// c[i] = op(a[i]) * op(b[i]) for each of `batch` row-major matrix pairs stored one after
// another: op(a) is [M,K], a itself [M,K] or, when trans_a, [K,M] read transposed; op(b)
// is [K,N], b itself [K,N] or, when trans_b, [N,K]; c[i] is [M,N].
struct BatchedMatmulShape {
  int64_t batch = 0, M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;

  int64_t a_size() const { return batch * M * K; }
  int64_t b_size() const { return batch * K * N; }
  int64_t c_size() const { return batch * M * N; }
  int64_t lda() const { return trans_a ? M : K; }  // row lengths of the stored matrices
  int64_t ldb() const { return trans_b ? K : N; }
  double flops() const { return 2.0 * double(batch) * M * N * K; }
};

}  // namespace dpcore::kernels
