// Shapes shared by every kernel implementation (CPU reference, hand CUDA, cuDNN/cuBLAS).
//
// Kernels take raw pointers plus one of these plain structs, never a Tensor: that keeps
// kernels/ free of the engine, so each kernel file reads like a textbook loop nest and can
// be tested and benchmarked on its own. The engine (engine/backend_*.cpp) turns tensors
// into these structs after it has checked them.
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

// Output size along one dimension, PyTorch's floor rule.
inline int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  return (in + 2 * pad - kernel) / stride + 1;
}

// max_pool2d over x[N,C,H,W] -> y[N,C,P,Q]; padding counts as -infinity.
struct Pool2dShape {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  int64_t P = 0, Q = 0;

  int64_t x_size() const { return N * C * H * W; }
  int64_t y_size() const { return N * C * P * Q; }
};

// y[N,out] = x[N,in] * W[out,in]^T + b[out]  (PyTorch's nn.Linear layout).
struct LinearShape {
  int64_t N = 0, in = 0, out = 0;
  double flops() const { return 2.0 * double(N) * in * out; }
};

// Hyper-parameters of torch.optim.SGD, applied in PyTorch's order (see docs/architecture.md).
struct SgdConfig {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

}  // namespace dpcore::kernels
