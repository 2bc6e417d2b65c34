// The two relu rules, in one place so that the fused kernels (conv2d + relu forward,
// max_pool2d + relu backward) give bit for bit what the separate relu kernels give.
// Internal to kernels/cpu.
#pragma once

namespace dpcore::kernels::cpu {

// PyTorch's clamp_min(x, 0): NaN passes through, and so does -0.
template <class T>
inline T relu_value(T x) {
  return x < T(0) ? T(0) : x;
}

// The gradient through relu given its OUTPUT y: zero where y <= 0, so NaN in y lets dy
// through, as in PyTorch. dy comes in as a value, loaded unconditionally: a load of dy
// only where y > 0 is a conditional load, which keeps the compiler from vectorising and
// leaves a branch that random signs mispredict half the time (it made relu backward the
// slowest op of a simplenet step).
template <class T>
inline T relu_grad(T dy, T y) {
  return y <= T(0) ? T(0) : dy;
}

}  // namespace dpcore::kernels::cpu
