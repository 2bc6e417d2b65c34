// Index validation (class targets, embedding ids: kernels/index_check.h) without a host
// synchronization.
//
// Checking targets on the host would need the targets back from the GPU every step, a
// sync that also makes the step uncapturable as a CUDA graph. Instead a tiny kernel looks
// for the first out-of-range target and records it in a per-device error record that
// lives in mapped host memory; the backend reads the record whenever it waits for the
// device anyway (synchronize, device-to-host copies) and then throws, naming the op:
//   "nll_loss: target 12 at row 3 is outside [0, 10)"
// The loss kernels themselves never read out of bounds: a bad row yields NaN.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/index_check.h"

namespace dpcore::kernels::cuda_runtime {

// Queues the check of indices[0..n) against `check` on `stream` of `device`.
void check_indices_async(int device, const IndexCheck& check, const int64_t* indices, int64_t n,
                         cudaStream_t stream);

// Throws the recorded index error of `device`, if any, and clears it. Call once the work
// that may have recorded it is done (after a synchronize of the device or of the stream it
// ran on, or a synchronous copy).
void raise_pending_target_error(int device);

// Creates the device's error record. Done before a graph capture, which may not allocate
// host memory; the first check creates it otherwise.
void prepare_target_checks(int device);

}  // namespace dpcore::kernels::cuda_runtime
