// How a GEMM-shaped problem is cut into thread blocks: the tile size and the split-K.
//
// Split-K: when the output has too few tiles to fill the GPU (a linear layer with 10
// outputs, a conv weight gradient with 16 x 27 entries), the reduction dimension is cut
// into `slices`; each slice's block writes its partial tile to a workspace and
// split_k_reduce adds the slices IN ORDER, so the result is the same on every run (no
// float atomics). The number of slices depends on the GPU's SM count: results are
// reproducible on one GPU model, not across models (cuBLAS behaves the same way).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dpcore::kernels::cuda {

struct GemmPlan {
  bool large = false;  // tile::Large (128 x 128) or tile::Small (64 x 64)
  int slices = 1;      // split-K slices
  int64_t chunk = 0;   // reduction length per slice, a multiple of the tile's BK
};

// M x N outputs, `depth` long reductions; allow_split = false when the epilogue must see
// the full sum (a fused bias/relu, or an output written in place). A batch of `batch` such
// products counts all their tiles towards filling the SMs and never splits K (its
// matrices fill the GPU instead; the grid's z is either the batch or the slices).
GemmPlan plan_gemm(int64_t M, int64_t N, int64_t depth, bool allow_split, int multiprocessors, int64_t batch = 1);

// C[m, n] = alpha * sum_{z < slices} partial[z][m][n] + beta * C[m, n] (beta == 0 never
// reads C). With slices == 0 this is C = beta * C, the GEMM of an empty reduction.
void split_k_reduce(int slices, int64_t M, int64_t N, const float* partial, float alpha, float beta, float* C,
                    int64_t ldc, cudaStream_t stream);

}  // namespace dpcore::kernels::cuda
