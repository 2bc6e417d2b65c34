// layer_norm over the last dimension, float32, as on the CPU (kernels/cpu/kernels.h has the
// formulas). Modelled on llm.c's layernorm kernels: a warp owns a row (log_softmax.cuh's
// layout), its lanes stride over the columns and warp_sum's xor butterfly adds their
// partials. That tree is fixed, so a row's statistics have the same bits on every run and
// for every grid (no atomics, no dependence on which warp runs where): the forward and a
// rerun of it agree, and the backward reads the very mean and rstd the forward saved.
//
// The parameter gradients are column sums over all rows, a reduction the other way: blocks
// of threads own consecutive columns (coalesced loads) and a chunk of rows each, and write
// one partial per (chunk, column) to a workspace; a second pass adds each column's chunks
// in chunk order. The chunk length depends on the row count only, never on the GPU, so the
// sums are deterministic too.
//
// x, y, dy and dx are of X: float, or bfloat16 / float16 read widened and each output rounded
// once beside float32 weight, bias, statistics and parameter gradients (the float32
// kernel's bits on the widened tensors, as on the CPU).
#include <algorithm>

#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/log_softmax.cuh"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/half_types.h"

namespace dpcore::kernels::cuda {

namespace {

template <class X>
__global__ void layer_norm_forward_kernel(int64_t rows, int64_t cols, const X* x, const float* weight,
                                          const float* bias, float eps, X* y, float* mean, float* rstd) {
  const int64_t row = warp_row(rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const X* x_row = x + row * cols;
  const auto xr = [x_row](int64_t c) { return to_float(x_row[c]); };
  // Two passes, as batch_norm2d's statistics: the mean of x - shift (shift = the row's first
  // value keeps float partial sums at the scale of the spread, not of the mean), then the
  // mean squared deviation from the mean (E[x^2] - E[x]^2 would cancel to noise).
  const float shift = xr(0);
  float sum = 0.f;
  for (int64_t c = lane; c < cols; c += 32) sum += xr(c) - shift;
  const float m = shift + warp_sum(sum) / float(cols);
  float squares = 0.f;
  for (int64_t c = lane; c < cols; c += 32) {
    const float d = xr(c) - m;
    squares += d * d;
  }
  const float s = 1.f / sqrtf(warp_sum(squares) / float(cols) + eps);
  X* yr = y + row * cols;
  for (int64_t c = lane; c < cols; c += 32) {
    const float xhat = (xr(c) - m) * s;
    yr[c] = from_float<X>(weight ? xhat * weight[c] + bias[c] : xhat);
  }
  if (lane == 0) mean[row] = m, rstd[row] = s;
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight: two row sums,
// then the elementwise pass (x and dy are read twice; a row is short enough to stay in L1).
template <class X>
__global__ void layer_norm_input_grad_kernel(int64_t rows, int64_t cols, const X* dy, const X* x,
                                             const float* weight, const float* mean, const float* rstd, X* dx) {
  const int64_t row = warp_row(rows);
  if (row < 0) return;
  const int lane = threadIdx.x % 32;
  const X* dy_row = dy + row * cols;
  const X* x_row = x + row * cols;
  const auto g = [dy_row, weight](int64_t c) {
    const float dyc = to_float(dy_row[c]);
    return weight ? dyc * weight[c] : dyc;
  };
  const auto xr = [x_row](int64_t c) { return to_float(x_row[c]); };
  const float m = mean[row], s = rstd[row];
  float g_sum = 0.f, gx_sum = 0.f;
  for (int64_t c = lane; c < cols; c += 32) {
    const float gc = g(c);
    g_sum += gc;
    gx_sum += gc * (xr(c) - m) * s;
  }
  const float g_mean = warp_sum(g_sum) / float(cols), gx_mean = warp_sum(gx_sum) / float(cols);
  for (int64_t c = lane; c < cols; c += 32)
    dx[row * cols + c] = from_float<X>(s * (g(c) - g_mean - (xr(c) - m) * s * gx_mean));
}

constexpr int kColumnThreads = 256;
constexpr int64_t kMaxChunks = 256;  // bounds the workspace at 2 * 256 * cols floats
constexpr int64_t kMinChunkRows = 32;

// partial_*[chunk * cols + col]: the sums of dy * xhat and dy over the chunk's rows, in row order.
template <class X>
__global__ void layer_norm_param_partials_kernel(int64_t rows, int64_t cols, int64_t chunk_rows, int64_t chunks,
                                                 const X* dy, const X* x, const float* mean, const float* rstd,
                                                 float* partial_dw, float* partial_db) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (col >= cols) return;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t end = std::min(rows, (chunk + 1) * chunk_rows);
    float dw = 0.f, db = 0.f;
    for (int64_t r = chunk * chunk_rows; r < end; ++r) {
      const float g = to_float(dy[r * cols + col]);
      dw += g * (to_float(x[r * cols + col]) - mean[r]) * rstd[r];
      db += g;
    }
    partial_dw[chunk * cols + col] = dw;
    partial_db[chunk * cols + col] = db;
  }
}

// Each column's chunks in chunk order; written or added onto the gradient (either may be null).
__global__ void layer_norm_param_sums_kernel(int64_t cols, int64_t chunks, const float* partial_dw,
                                             const float* partial_db, float* dweight, float* dbias, bool accumulate) {
  for (int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; col < cols;
       col += int64_t(gridDim.x) * blockDim.x) {
    float dw = 0.f, db = 0.f;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) dw += partial_dw[chunk * cols + col], db += partial_db[chunk * cols + col];
    if (dweight) dweight[col] = accumulate ? dweight[col] + dw : dw;
    if (dbias) dbias[col] = accumulate ? dbias[col] + db : db;
  }
}

}  // namespace

template <class X>
void layer_norm_forward(int64_t rows, int64_t cols, const X* x, const float* weight, const float* bias, float eps,
                        X* y, float* mean, float* rstd, cudaStream_t stream) {
  if (rows * cols == 0) return;
  launch("layer_norm_forward_kernel", layer_norm_forward_kernel<X>, row_blocks(rows), kRowThreads, stream, rows, cols, x,
         weight, bias, eps, y, mean, rstd);
}

template <class X>
void layer_norm_backward(int64_t rows, int64_t cols, const X* dy, const X* x, const float* weight, const float* mean,
                         const float* rstd, X* dx, float* dweight, float* dbias, bool accumulate, cudaStream_t stream) {
  if (cols == 0) return;
  if (dx && rows > 0)
    launch("layer_norm_input_grad_kernel", layer_norm_input_grad_kernel<X>, row_blocks(rows), kRowThreads, stream, rows,
           cols, dy, x, weight, mean, rstd, dx);
  if (!dweight && !dbias) return;
  // At least kMinChunkRows rows a chunk, at most kMaxChunks chunks: a function of rows alone.
  const int64_t chunk_rows = std::max(kMinChunkRows, (rows + kMaxChunks - 1) / kMaxChunks);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  cuda_runtime::Workspace partial(std::max<int64_t>(1, 2 * chunks * cols) * sizeof(float), stream);
  float* partial_dw = partial.floats();
  float* partial_db = partial_dw + chunks * cols;
  if (chunks > 0) {
    // Narrow rows (a few columns) take blocks of a warp or so rather than idle threads.
    const int threads = int(std::min<int64_t>(kColumnThreads, (cols + 31) / 32 * 32));
    const dim3 grid(unsigned((cols + threads - 1) / threads), blocks_for(chunks, 1, 65535));
    launch("layer_norm_param_partials_kernel", layer_norm_param_partials_kernel<X>, grid, threads, stream, rows,
           cols, chunk_rows, chunks, dy, x, mean, rstd, partial_dw, partial_db);
  }
  launch("layer_norm_param_sums_kernel", layer_norm_param_sums_kernel, blocks_for(cols, kColumnThreads),
         kColumnThreads, stream, cols, chunks, partial_dw, partial_db, dweight, dbias, accumulate);
}

#define DPCORE_INSTANTIATE(X)                                                                                   \
  template void layer_norm_forward<X>(int64_t, int64_t, const X*, const float*, const float*, float, X*, float*,    \
                                      float*, cudaStream_t);                                                         \
  template void layer_norm_backward<X>(int64_t, int64_t, const X*, const X*, const float*, const float*,          \
                                       const float*, X*, float*, float*, bool, cudaStream_t);
DPCORE_INSTANTIATE(float)
DPCORE_INSTANTIATE(BFloat16)
DPCORE_INSTANTIATE(Float16)
#undef DPCORE_INSTANTIATE

}  // namespace dpcore::kernels::cuda
