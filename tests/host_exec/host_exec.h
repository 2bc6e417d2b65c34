// Host execution of CUDA kernels: the same kernel source nvcc compiles, compiled by g++ and
// run on CPU threads with real grid and block shapes, so that every CI run (no GPU) checks
// the hand kernels against the CPU reference under AddressSanitizer, UndefinedBehavior-
// Sanitizer and ThreadSanitizer. Test support only; never part of libdpcore.
//
// How a launch runs (host_exec.cpp): every thread of a block is an OS thread, so the
// threads of a block really run concurrently and meet at real barriers. The blocks of the
// grid run one after the other, which is one legal schedule of a GPU's. Hence:
//   * `__shared__` variables are thread_local statics: one instance per worker thread,
//     used by the one block running on it;
//   * `__syncthreads()` is a barrier of the whole block;
//   * warp shuffles exchange values among the 32 lanes of a warp, which wait for each
//     other like the lanes of a real warp;
//   * a thread that exits while others wait at a barrier, a shuffle whose mask names a lane
//     that has exited, and a block whose threads all wait on each other (deadlock) end the
//     launch with an error naming the kernel, the block and the thread, never a hang;
//   * global memory is host memory (cuda_runtime_api.h), so ASan sees every out-of-bounds
//     access, UBSan every signed overflow in the index arithmetic and every float4 access at
//     an address that is not 16-byte aligned, and TSan every pair of threads of a block that
//     touch the same word between two barriers, one of them writing.
// A launch is queued on its stream (runtime/runtime.h) and runs on that stream's worker
// thread, so launches on different streams run concurrently: `__shared__` variables are
// thread_local statics, one instance per worker thread, used by the one block running
// there (the fibers of a block all run on their worker's thread).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_runtime_api.h"
#include "host_exec/runtime/runtime.h"

// ---- the CUDA C++ keywords: qualifiers with no meaning on the host ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))

// ---- the built-in variables: set per thread by the launch ----
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace host_exec {

// Fails, as cudaGetLastError after a GPU launch does, for a configuration no GPU runs.
void check_configuration(const char* kernel, dim3 grid, dim3 block);

// Runs body() once per thread of every block of the grid (see the top of this file), on
// the calling thread. Throws std::runtime_error naming the kernel, block and thread when
// the launch fails: a bad configuration, a thread left waiting, a deadlock, or an
// exception inside the kernel.
void run_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& body);

// How many fibers (the threads of the blocks run) the process makes before a launch takes
// over other threads' idle ones (host_exec.cpp: 1024); returns the bound it replaces.
// Tests lower it to 0 to run every launch on fibers another thread used last.
size_t set_fiber_pool_bound(size_t fibers);

// The block barrier of the calling kernel thread.
void sync_threads();

// The warp exchange under every shuffle: the calling lane offers `value` (raw bits), asks
// for lane `source`'s (itself when `source` is out of range: the lane then keeps its own
// value, as in CUDA), and returns it once every lane of `mask` has arrived.
uint64_t exchange(unsigned mask, uint64_t value, int source, const char* intrinsic);

// The pointer arguments of a launch, for the runtime's device check (others: null).
template <class P>
const void* pointer_argument(const P& value) {
  if constexpr (std::is_pointer_v<P>) return value;
  else return nullptr;
}

// kernels/cuda/launch.cuh calls this where nvcc compiles `kernel<<<grid, block, 0, stream>>>(args...)`:
// the configuration is checked now, and the grid queued on `stream`. The arguments are
// copied at the launch, as a GPU's are, and each thread gets its own copy of them.
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  check_configuration(name, grid, block);
  host_runtime::Bookkeeping hide;  // copying the arguments is the runtime's business (runtime/bookkeeping.h)
  auto params = std::make_shared<const std::tuple<std::decay_t<Params>...>>(std::forward<Args>(args)...);
  std::vector<const void*> pointers =
      std::apply([](const auto&... p) { return std::vector<const void*>{pointer_argument(p)...}; }, *params);
  host_runtime::enqueue_kernel(name, stream, std::move(pointers), [name, kernel, grid, block, params] {
    run_grid(name, grid, block, [&] {
      std::tuple<std::decay_t<Params>...> own(*params);
      std::apply(kernel, own);
    });
  });
}

template <class T>
T shuffle(unsigned mask, T value, int source, const char* intrinsic) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>, "shuffles move up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = exchange(mask, bits, source, intrinsic);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

inline int lane_id() { return int((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32); }

}  // namespace host_exec

// ---- intrinsics ----
inline void __syncthreads() { host_exec::sync_threads(); }

// Shuffles within segments of `width` lanes (a power of two up to 32), CUDA's semantics:
// xor and idx read another lane of the segment, up and down keep their own value when the
// source falls outside it.
template <class T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = warpSize) {
  const int lane = host_exec::lane_id(), base = lane & ~(width - 1);
  return host_exec::shuffle(mask, value, base + (src_lane & (width - 1)), "__shfl_sync");
}
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = warpSize) {
  const int lane = host_exec::lane_id(), base = lane & ~(width - 1);
  return host_exec::shuffle(mask, value, base + ((lane ^ lane_mask) & (width - 1)), "__shfl_xor_sync");
}
template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = warpSize) {
  const int lane = host_exec::lane_id(), base = lane & ~(width - 1), in_segment = (lane & (width - 1)) + int(delta);
  return host_exec::shuffle(mask, value, in_segment < width ? base + in_segment : lane, "__shfl_down_sync");
}
template <class T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = warpSize) {
  const int lane = host_exec::lane_id(), base = lane & ~(width - 1), in_segment = (lane & (width - 1)) - int(delta);
  return host_exec::shuffle(mask, value, in_segment >= 0 ? base + in_segment : lane, "__shfl_up_sync");
}

// Atomics and fences: the compiler's atomic builtins, which ThreadSanitizer understands.
inline int atomicCAS(int* address, int compare, int value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value, whether or not it was replaced
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// Read-only cached loads are plain loads on the host (float4 keeps its alignment rule).
template <class T>
inline T __ldg(const T* p) {
  return *p;
}

// Arithmetic with an explicit rounding mode: IEEE round-to-nearest on the host anyway; on
// the GPU they stop nvcc from contracting a multiply and an add into one FMA.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }

// CUDA's math API declares these in the global namespace.
using std::isfinite;
using std::isinf;
using std::isnan;

// CUDA's integer min and max overloads (device code calls them unqualified).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
