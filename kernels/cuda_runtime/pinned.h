// Page-locked ("pinned") host memory for the data loader. The GPU's copy engines read
// pinned memory directly, so host-to-device copies from it run at full PCIe/NVLink speed
// and asynchronously; pageable memory is first staged through a driver buffer.
// cudaHostAlloc is slow (it locks pages), so freed buffers are cached and reused.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace dpcore::kernels::cuda_runtime {

// Pinned host memory of at least `bytes`; throws a dpcore::Error when it cannot be had
// (for example on a machine without a GPU). A buffer from the cache is handed out only
// once the copies recorded out of it (record_pinned_read) have run.
void* pinned_alloc(size_t bytes);
// Returns a buffer from pinned_alloc to the cache; null is ignored.
void pinned_free(void* ptr);
// True when `ptr` lies inside a buffer handed out by pinned_alloc and not yet freed.
// Host-to-device copies from such buffers are truly asynchronous (the copy engine reads
// them later): the loader must not refill one until its copy has run.
bool is_pinned(const void* ptr);
// Marks the work queued so far on `stream` (of `device`, the current device) as reading
// the pinned buffer holding `ptr`: an event recorded there, one per (buffer, stream), so
// that the replicas' copies out of one batch on their own streams are all waited for.
void record_pinned_read(const void* ptr, int device, cudaStream_t stream);
// Blocks until the reads recorded for the pinned buffer holding `ptr` have run (returns at
// once when `ptr` is not pinned memory or nothing reads it).
void await_pinned_reads(const void* ptr);

}  // namespace dpcore::kernels::cuda_runtime
