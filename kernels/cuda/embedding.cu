// embedding: a gather forward, and a deterministic backward without atomics.
//
// The backward adds dy[p, :] into table row ids[p] for every position p; repeated ids make
// it a scatter-add, which float atomics would make depend on the order threads happen to
// run in. Instead it is the classic counting sort plus a segmented sum:
//   1. one block counts each id's positions, turns the counts into segment starts by an
//      exclusive scan, and scatters every position into its id's segment. The scatter is
//      stable (a tile of positions ranks each thread among the tile's earlier threads with
//      the same id), so each segment lists its positions in increasing order;
//   2. a block per table row sums dy over its segment in that order, a column per thread.
// Every row of dweight has exactly one writer and a fixed order of additions: the same bits
// on every run and for every grid. Rows with an empty segment (and padding_idx) get 0.
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.cuh"

namespace dpcore::kernels::cuda {

namespace {

__global__ void embedding_forward_kernel(int64_t n, int64_t dim, const int64_t* ids, int64_t vocab,
                                         const float* weight, float* y) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * dim; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = ids[i / dim];
    // A bad id is reported by the backend's index check; here it must not read out of bounds.
    y[i] = id >= 0 && id < vocab ? weight[id * dim + i % dim] : NAN;
  }
}

constexpr int kSortThreads = 256;

// Where a thread's id stands in the current tile of kSortThreads positions: `before`
// threads of the tile with a lower index hold the same id, and `last` says no later one
// does (that thread then speaks for the whole group, so each id has one writer per tile).
struct TileRank {
  int before;
  bool last;
};

// Every thread of the block calls this for the tile starting at `base`; the id of a
// position past n, or outside [0, vocab), is -1 and takes part in nothing.
__device__ TileRank rank_in_tile(int64_t* tile_ids, int64_t base, int n, const int64_t* ids, int64_t vocab,
                                 int64_t& id) {
  const int64_t p = base + threadIdx.x;
  id = p < n && ids[p] >= 0 && ids[p] < vocab ? ids[p] : -1;
  tile_ids[threadIdx.x] = id;
  __syncthreads();
  TileRank r{0, true};
  for (int j = 0; j < kSortThreads; ++j) {
    if (tile_ids[j] != id) continue;
    if (j < int(threadIdx.x)) ++r.before;
    if (j > int(threadIdx.x)) r.last = false;
  }
  __syncthreads();  // the next tile overwrites tile_ids
  return r;
}

// Stage 1 of the backward, one block: starts[v] .. starts[v + 1] is id v's segment of
// `sorted`, which holds its positions in increasing order. `cursor` is scratch of vocab ints.
__global__ void sort_positions_by_id_kernel(int n, int vocab, const int64_t* ids, int* starts, int* cursor,
                                            int* sorted) {
  __shared__ int64_t tile_ids[kSortThreads];
  __shared__ int scan[kSortThreads];
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) cursor[v] = 0;
  __syncthreads();
  // Count: the last thread of each id's group in a tile adds the group's size.
  for (int64_t base = 0; base < n; base += kSortThreads) {
    int64_t id;
    const TileRank r = rank_in_tile(tile_ids, base, n, ids, vocab, id);
    if (id >= 0 && r.last) cursor[id] += r.before + 1;
    __syncthreads();
  }
  // Exclusive scan of the counts, a chunk of kSortThreads at a time (Hillis-Steele in
  // shared memory, a barrier between each read and write), carrying the chunk totals.
  int carry = 0;
  if (threadIdx.x == 0) starts[0] = 0;
  for (int chunk = 0; chunk < vocab; chunk += kSortThreads) {
    const int v = chunk + int(threadIdx.x);
    scan[threadIdx.x] = v < vocab ? cursor[v] : 0;
    __syncthreads();
    for (int offset = 1; offset < kSortThreads; offset *= 2) {
      const int add = int(threadIdx.x) >= offset ? scan[threadIdx.x - offset] : 0;
      __syncthreads();
      scan[threadIdx.x] += add;
      __syncthreads();
    }
    if (v < vocab) {
      starts[v + 1] = carry + scan[threadIdx.x];
      cursor[v] = carry + scan[threadIdx.x] - cursor[v];  // the segment's start: where its scatter begins
    }
    carry += scan[kSortThreads - 1];
    __syncthreads();  // scan[] is rewritten by the next chunk
  }
  // Stable scatter: a tile's group of one id takes the next slots of its segment in thread
  // order; then its last thread moves the segment's cursor past them.
  for (int64_t base = 0; base < n; base += kSortThreads) {
    int64_t id;
    const TileRank r = rank_in_tile(tile_ids, base, n, ids, vocab, id);
    if (id >= 0) sorted[cursor[id] + r.before] = int(base + threadIdx.x);
    __syncthreads();
    if (id >= 0 && r.last) cursor[id] += r.before + 1;
    __syncthreads();
  }
}

// Stage 2: a block per table row (grid-stride over rows), a thread per column; each
// column's sum runs over the row's segment in increasing position order.
__global__ void embedding_backward_kernel(int vocab, int64_t dim, const int* starts, const int* sorted,
                                          const float* dy, int64_t padding_idx, float* dweight, bool accumulate) {
  for (int v = blockIdx.x; v < vocab; v += gridDim.x) {
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = 0.f;
      if (v != padding_idx)
        for (int k = starts[v]; k < starts[v + 1]; ++k) acc += dy[int64_t(sorted[k]) * dim + d];
      float& out = dweight[int64_t(v) * dim + d];
      out = accumulate ? out + acc : acc;
    }
  }
}

constexpr int kBackwardThreads = 128;

}  // namespace

void embedding_forward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const float* weight, float* y,
                       cudaStream_t stream) {
  if (n * dim == 0) return;
  launch("embedding_forward_kernel", embedding_forward_kernel, blocks_for(n * dim, kElementwiseThreads),
         kElementwiseThreads, stream, n, dim, ids, vocab, weight, y);
}

void embedding_backward(int64_t n, int64_t vocab, int64_t dim, const int64_t* ids, const float* dy,
                        int64_t padding_idx, float* dweight, bool accumulate, cudaStream_t stream) {
  check_int32("embedding backward", "positions", n);
  check_int32("embedding backward", "table rows", vocab);
  if (vocab * dim == 0) return;
  namespace rt = dpcore::kernels::cuda_runtime;
  rt::Workspace starts((vocab + 1) * sizeof(int), stream), cursor(vocab * sizeof(int), stream),
      sorted(std::max<int64_t>(n, 1) * sizeof(int), stream);
  auto ints = [](const rt::Workspace& w) { return static_cast<int*>(w.data()); };
  launch("sort_positions_by_id_kernel", sort_positions_by_id_kernel, 1, kSortThreads, stream, int(n), int(vocab), ids,
         ints(starts), ints(cursor), ints(sorted));
  launch("embedding_backward_kernel", embedding_backward_kernel, blocks_for(vocab, 1), kBackwardThreads, stream,
         int(vocab), dim, ints(starts), ints(sorted), dy, padding_idx, dweight, accumulate);
}

}  // namespace dpcore::kernels::cuda
