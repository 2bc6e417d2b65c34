// Helpers shared by the CPU kernels for splitting work across OpenMP threads.
// Internal to kernels/cpu: not part of the public kernel API.
#pragma once

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dpcore::kernels::cpu {

// The team size of every OpenMP region in the kernels: the count given to
// set_num_threads, or the OpenMP default of the calling thread. Passed explicitly with
// num_threads(...) so that the setting holds for kernels called from any thread.
int kernel_threads();

// Below this many elements an elementwise loop finishes before threads could be woken,
// so it runs on the calling thread (`if` clause of the OpenMP pragmas).
constexpr int64_t kMinParallelElements = int64_t(1) << 15;

// Runs body(i) for every i in [0, n): shared out over `threads` OpenMP threads, each
// taking the next index when it finishes one, or in order on the calling thread when there
// is one thread or one index. The loop to put around a body that calls kernels which
// share out their own work (gemm_parallel, gemm_half, cast): with one thread it opens no
// OpenMP region at all. A region of one thread (num_threads(1), or an `if` that is false)
// still counts as a nesting level to libgomp, which then starts a fresh thread for every
// parallel region opened inside it, while the pool's idle workers spin on the cores the
// new thread needs: 82 us a call against 7 on this 2-core machine, and a bfloat16 linear
// layer (one matrix, so a one-thread batch loop around its GEMM) 3.5x slower than float32.
template <class Body>
void parallel_for_each(int64_t n, int threads, const Body& body) {
  if (threads < 2 || n < 2) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  const int team = n < threads ? int(n) : threads;
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// Runs range(begin, end) over [0, n) in chunks of 2^14 elements shared out statically over
// the kernel threads: the loop around an elementwise range function built per vector width
// (the 16-bit casts, sums and relu of kernels/cpu/half/). One thread below
// kMinParallelElements, and inside a parallel region (a cast inside gemm_half's loop over
// matrices), where a nested region would start fresh threads (parallel_for_each above).
template <class Range>
void for_element_chunks(int64_t n, const Range& range) {
  constexpr int64_t kChunk = int64_t(1) << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t most = chunks < kernel_threads() ? chunks : kernel_threads();
  const int threads = omp_in_parallel() ? 1 : int(most < 1 ? 1 : most);
#pragma omp parallel for num_threads(threads) if (threads > 1 && n >= kMinParallelElements) schedule(static)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk, end = begin + kChunk < n ? begin + kChunk : n;
    range(begin, end);
  }
}

// The contiguous share [begin, end) of `n` items that worker `index` of `parts` gets.
// Static and independent of timing, so every reduction built on it has a fixed order.
struct Range {
  int64_t begin, end;
};
inline Range split_range(int64_t n, int parts, int index) {
  int64_t base = n / parts, extra = n % parts;
  int64_t begin = index * base + (index < extra ? index : extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

// Scratch memory owned by the calling thread and kept between calls: the im2col buffers
// of a training step have the same sizes every step, so reusing them saves the page
// faults of fresh allocations. `slot` (< kScratchSlots) tells apart buffers that one
// thread needs at once. The contents are whatever an earlier call left there.
constexpr int kScratchSlots = 3;
template <class T>
T* thread_scratch(size_t n, int slot) {
  thread_local std::vector<T> buffers[kScratchSlots];
  std::vector<T>& buffer = buffers[slot];
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace dpcore::kernels::cpu
