// The thread count of the CPU kernels. It is one process-wide number rather than
// OpenMP's per-thread setting, so that kernels called from worker threads (one per
// in-process replica, say) obey it too; a thread may cap its own kernels below it (a
// pipeline stage's team). OpenBLAS is not part of it: the kernels call BLAS
// from inside their own OpenMP loops, so BLAS always runs on one thread (gemm.cpp).
#include <omp.h>

#include <atomic>

#include "kernels/error.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/parallel.h"

namespace dpcore::kernels::cpu {

static std::atomic<int> configured_threads{0};  // 0: OpenMP's default
static thread_local int calling_thread_threads = 0;  // 0: no cap of this thread's own

void set_num_threads(int threads) {
  DPCORE_CHECK(threads >= 0, "set_num_threads: the thread count must be >= 0 (0 = library default), got ", threads);
  configured_threads.store(threads, std::memory_order_relaxed);
}

int num_threads() { return kernel_threads(); }

void set_calling_thread_threads(int threads) {
  DPCORE_CHECK(threads >= 0, "set_calling_thread_threads: the thread count must be >= 0 (0 = no cap), got ", threads);
  calling_thread_threads = threads;
}

int kernel_threads() {
  const int configured = configured_threads.load(std::memory_order_relaxed);
  const int threads = configured > 0 ? configured : omp_get_max_threads();
  return calling_thread_threads > 0 && calling_thread_threads < threads ? calling_thread_threads : threads;
}

}  // namespace dpcore::kernels::cpu
