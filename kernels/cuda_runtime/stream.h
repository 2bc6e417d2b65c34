// Which stream a thread's work goes to, per device.
//
// Every op of the CUDA backend runs on current_stream(device). By default that is the
// device's legacy default stream; StreamGuard switches it for a scope, on the calling
// thread only. That is how the data-parallel code runs several replicas on one GPU (each
// thread on its own side stream) and how CudaGraph captures a training step (on a private
// capture stream).
#pragma once

#include <cuda_runtime_api.h>

namespace dpcore::kernels::cuda_runtime {

// The calling thread's current stream on `device` (nullptr = the legacy default stream).
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);

// Sets the current stream of `device` for a scope and restores the previous one after.
class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

// The index-th side stream of `device`: a non-blocking stream created on first use and
// kept for the life of the process, so replicas can reuse streams across steps.
cudaStream_t side_stream(int device, int index);

// A stream of the calling thread's own on `device`, given to no other live thread: taken
// from a pool on the thread's first call and handed back when the thread ends (streams are
// never destroyed, so the caching allocator's per-stream lists stay valid). For the
// communication threads, whose kernels must neither queue behind the replicas' compute
// streams nor serialize with the legacy default stream.
cudaStream_t own_stream(int device);

// Makes future work on `waiting` (on waiting_device) wait for the work queued so far on
// `producer` (on producer_device). Devices may differ (peer copies).
void wait_stream(int waiting_device, cudaStream_t waiting, int producer_device, cudaStream_t producer);

// True while `stream` is being captured into a CUDA graph: code that must not
// synchronize (algorithm timing, host reads) checks this first.
bool is_capturing(cudaStream_t stream);

// While alive, lets this thread make calls that stream capture forbids (cudaMalloc for a
// graph's private memory pool): the capture mode switches to relaxed and back.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_;
};

}  // namespace dpcore::kernels::cuda_runtime
