// batch_norm2d, float32, as on the CPU (kernels/cpu/kernels.h has the formulas). The
// kernels over activations also take them in 16 bits (X = BFloat16 or Float16): to_float
// widens each value as it is read and from_float rounds each output once, so the float
// arithmetic between is the float32 kernel's, on the same widened values.
//
// The per-channel sums (statistics, backward reductions) take one block per channel: its
// threads walk the channel's N*H*W values in a fixed pattern and block_sum adds their
// partials in a fixed tree, so there are no atomics and the sums are the same bits on
// every run. The elementwise steps (normalise, input gradient) are grid-stride loops, and
// so is the combination of the replicas' statistics, one thread per channel.
#include <algorithm>

#include "kernels/half_types.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

constexpr int kChannelThreads = 256;

// Sizes for int32 index arithmetic (checked by channel_dims).
struct ChannelDims {
  int C, plane, count;  // channels, H*W, N*H*W
};

// Flat index of value t of channel c, t = n * plane + i: x[(n * C + c) * plane + i].
__device__ __forceinline__ int channel_at(ChannelDims d, int c, int t) {
  const int n = t / d.plane;
  return (n * d.C + c) * d.plane + (t - n * d.plane);
}

// Two passes over the channel: the mean, then the mean squared deviation from it, a
// centred variance (E[x^2] - E[x]^2 in float cancels to noise when the mean is large
// against the spread). The first pass sums x - shift, shift being the channel's first
// value, so that its float partial sums also stay at the scale of the spread and the mean
// keeps the bits a large offset would otherwise round away.
template <class X>
__global__ void batch_norm2d_stats_kernel(ChannelDims d, const X* x, float* mean, float* var) {
  __shared__ float channel_mean;
  for (int c = blockIdx.x; c < d.C; c += gridDim.x) {
    const float shift = to_float(x[c * d.plane]);
    float partial = 0.f;
    for (int t = threadIdx.x; t < d.count; t += blockDim.x) partial += to_float(x[channel_at(d, c, t)]) - shift;
    const float total = block_sum(partial);
    if (threadIdx.x == 0) channel_mean = shift + total / float(d.count);
    __syncthreads();
    const float m = channel_mean;
    float squares = 0.f;
    for (int t = threadIdx.x; t < d.count; t += blockDim.x) {
      const float deviation = to_float(x[channel_at(d, c, t)]) - m;
      squares += deviation * deviation;
    }
    // block_sum's barriers also order every thread's read of channel_mean above before
    // thread 0 writes the next channel's.
    const float total_squares = block_sum(squares);
    if (threadIdx.x == 0) mean[c] = m, var[c] = total_squares / float(d.count);
  }
}

// One thread per channel walks the replicas in rank order, in double (kernels/cpu/kernels.h
// has the formula): the same bits on every replica, which all hold the same gathered input.
__global__ void batch_norm2d_combine_stats_kernel(int C, int replicas, const float* gathered, float* mean,
                                                  float* var) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    double total = 0.0, weighted = 0.0;
    for (int r = 0; r < replicas; ++r) {
      const int at = r * 3 * C + c;  // replica r's count of channel c; its mean C and its var 2C later
      const double n = gathered[at];
      if (n == 0.0) continue;  // an empty replica's mean and variance are 0 / 0
      total += n;
      weighted += n * double(gathered[at + C]);
    }
    const double m = weighted / total;
    double squares = 0.0;
    for (int r = 0; r < replicas; ++r) {
      const int at = r * 3 * C + c;
      const double n = gathered[at];
      if (n == 0.0) continue;
      const double d = double(gathered[at + C]) - m;
      squares += n * (double(gathered[at + 2 * C]) + d * d);
    }
    mean[c] = float(m);
    var[c] = float(squares / total);
  }
}

__global__ void batch_norm2d_finalize_kernel(int C, float count, const float* mean, const float* var, float eps,
                                             float momentum, float* invstd, float* running_mean, float* running_var) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    invstd[c] = 1.f / sqrtf(var[c] + eps);
    if (!running_mean) continue;
    running_mean[c] = (1.f - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] = (1.f - momentum) * running_var[c] + momentum * var[c] * count / (count - 1.f);
  }
}

template <class X>
__global__ void batch_norm2d_apply_kernel(int64_t total, ChannelDims d, const X* x, const float* mean,
                                          const float* invstd, const float* weight, const float* bias, X* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int c = (int(i) / d.plane) % d.C;
    const float scale = invstd[c] * (weight ? weight[c] : 1.f);
    y[i] = from_float<X>((to_float(x[i]) - mean[c]) * scale + (bias ? bias[c] : 0.f));
  }
}

// Both sums in one pass; sum(dy * xhat) = invstd * sum(dy * (x - mean)). The product
// with invstd and the accumulation onto dweight are rounded on their own (__fmul_rn,
// __fadd_rn, as in sgd.cu): accumulating is then exactly the previous gradient plus the
// fresh one, which WeightAndBiasGradientsOverwriteOrAccumulate checks bit for bit, where a
// multiply-add that nvcc may contract them into (-fmad=true, its default) rounds once.
template <class X>
__global__ void batch_norm2d_backward_reduce_kernel(ChannelDims d, const X* dy, const X* x, const float* mean,
                                                    const float* invstd, float* sum_dy, float* sum_dy_xhat,
                                                    float* dweight, float* dbias, bool accumulate) {
  for (int c = blockIdx.x; c < d.C; c += gridDim.x) {
    const float m = mean[c];
    float dy_partial = 0.f, centred_partial = 0.f;
    for (int t = threadIdx.x; t < d.count; t += blockDim.x) {
      const int at = channel_at(d, c, t);
      const float g = to_float(dy[at]);
      dy_partial += g;
      centred_partial += g * (to_float(x[at]) - m);
    }
    const float total = block_sum(dy_partial);
    const float total_xhat = __fmul_rn(block_sum(centred_partial), invstd[c]);
    if (threadIdx.x != 0) continue;
    if (sum_dy) sum_dy[c] = total;
    if (sum_dy_xhat) sum_dy_xhat[c] = total_xhat;
    if (dweight) dweight[c] = accumulate ? __fadd_rn(dweight[c], total_xhat) : total_xhat;
    if (dbias) dbias[c] = accumulate ? dbias[c] + total : total;
  }
}

// Training: dx = k * (dy - sum_dy / n - (x - mean) * invstd * sum_dy_xhat / n), k = weight * invstd,
// n = count = the shape's stats_count(). Eval (no sums): dx = k * dy.
template <class X>
__global__ void batch_norm2d_backward_apply_kernel(int64_t total, ChannelDims d, float count, const X* dy,
                                                   const X* x, const float* mean, const float* invstd,
                                                   const float* weight, const float* sum_dy, const float* sum_dy_xhat,
                                                   X* dx) {
  const float inv_count = 1.f / count;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int c = (int(i) / d.plane) % d.C;
    const float k = invstd[c] * (weight ? weight[c] : 1.f);
    if (!sum_dy) {
      dx[i] = from_float<X>(k * to_float(dy[i]));
      continue;
    }
    const float dy_mean = sum_dy[c] * inv_count, centred_coef = invstd[c] * sum_dy_xhat[c] * inv_count;
    dx[i] = from_float<X>(k * (to_float(dy[i]) - dy_mean - (to_float(x[i]) - mean[c]) * centred_coef));
  }
}

ChannelDims channel_dims(const char* op, const BatchNorm2dShape& s) {
  check_int32(op, "input elements", s.x_size());
  DPCORE_CHECK(s.count() > 0, op, ": no values per channel in x[", s.N, ",", s.C, ",", s.H, ",", s.W, "]");
  return ChannelDims{int(s.C), int(s.H * s.W), int(s.count())};
}

// One block per channel, as many as a grid row may hold; each block loops over the rest.
unsigned channel_blocks(int64_t C) { return unsigned(std::min<int64_t>(C, 65535)); }

}  // namespace

template <class X>
void batch_norm2d_stats(const BatchNorm2dShape& s, const X* x, float* mean, float* var, cudaStream_t stream) {
  const ChannelDims d = channel_dims("batch_norm2d", s);
  if (s.C == 0) return;
  launch("batch_norm2d_stats_kernel", batch_norm2d_stats_kernel<X>, channel_blocks(s.C), kChannelThreads, stream, d, x,
         mean, var);
}

void batch_norm2d_combine_stats(const BatchNorm2dShape& s, int64_t replicas, const float* gathered, float* mean,
                                float* var, cudaStream_t stream) {
  DPCORE_CHECK(replicas > 0, "batch_norm2d combine_stats: ", replicas, " replicas for ", s.C,
               " channels; expected at least one");
  check_int32("batch_norm2d combine_stats", "gathered elements", replicas * 3 * s.C);
  if (s.C == 0) return;
  launch("batch_norm2d_combine_stats_kernel", batch_norm2d_combine_stats_kernel, blocks_for(s.C, kElementwiseThreads),
         kElementwiseThreads, stream, int(s.C), int(replicas), gathered, mean, var);
}

void batch_norm2d_finalize(const BatchNorm2dShape& s, const float* mean, const float* var, float eps, float momentum,
                           float* invstd, float* running_mean, float* running_var, cudaStream_t stream) {
  check_int32("batch_norm2d", "channels", s.C);
  if (s.C == 0) return;
  launch("batch_norm2d_finalize_kernel", batch_norm2d_finalize_kernel, blocks_for(s.C, kElementwiseThreads),
         kElementwiseThreads, stream, int(s.C), float(s.stats_count()), mean, var, eps, momentum, invstd, running_mean,
         running_var);
}

template <class X>
void batch_norm2d_apply(const BatchNorm2dShape& s, const X* x, const float* mean, const float* invstd,
                        const float* weight, const float* bias, X* y, cudaStream_t stream) {
  const ChannelDims d = channel_dims("batch_norm2d", s);
  const int64_t total = s.x_size();
  if (total == 0) return;
  launch("batch_norm2d_apply_kernel", batch_norm2d_apply_kernel<X>, blocks_for(total, kElementwiseThreads),
         kElementwiseThreads, stream, total, d, x, mean, invstd, weight, bias, y);
}

template <class X>
void batch_norm2d_backward_reduce(const BatchNorm2dShape& s, const X* dy, const X* x, const float* mean,
                                  const float* invstd, float* sum_dy, float* sum_dy_xhat, float* dweight, float* dbias,
                                  bool accumulate, cudaStream_t stream) {
  const ChannelDims d = channel_dims("batch_norm2d backward", s);
  if (s.C == 0) return;
  launch("batch_norm2d_backward_reduce_kernel", batch_norm2d_backward_reduce_kernel<X>, channel_blocks(s.C),
         kChannelThreads, stream, d, dy, x, mean, invstd, sum_dy, sum_dy_xhat, dweight, dbias, accumulate);
}

template <class X>
void batch_norm2d_backward_apply(const BatchNorm2dShape& s, const X* dy, const X* x, const float* mean,
                                 const float* invstd, const float* weight, const float* sum_dy,
                                 const float* sum_dy_xhat, X* dx, cudaStream_t stream) {
  const ChannelDims d = channel_dims("batch_norm2d backward", s);
  const int64_t total = s.x_size();
  if (total == 0) return;
  launch("batch_norm2d_backward_apply_kernel", batch_norm2d_backward_apply_kernel<X>,
         blocks_for(total, kElementwiseThreads), kElementwiseThreads, stream, total, d, float(s.stats_count()), dy, x,
         mean, invstd, weight, sum_dy, sum_dy_xhat, dx);
}

#define DPCORE_INSTANTIATE(X)                                                                                        \
  template void batch_norm2d_stats<X>(const BatchNorm2dShape&, const X*, float*, float*, cudaStream_t);             \
  template void batch_norm2d_apply<X>(const BatchNorm2dShape&, const X*, const float*, const float*, const float*,  \
                                      const float*, X*, cudaStream_t);                                              \
  template void batch_norm2d_backward_reduce<X>(const BatchNorm2dShape&, const X*, const X*, const float*,          \
                                                const float*, float*, float*, float*, float*, bool, cudaStream_t);  \
  template void batch_norm2d_backward_apply<X>(const BatchNorm2dShape&, const X*, const X*, const float*,           \
                                               const float*, const float*, const float*, const float*, X*,          \
                                               cudaStream_t);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cuda
