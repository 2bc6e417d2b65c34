#include "kernels/cuda_runtime/stream.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/error.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"

namespace dpcore::kernels::cuda_runtime {

namespace {

// Per thread: the current stream of each device, null (legacy default stream) until set.
std::vector<cudaStream_t>& thread_streams() {
  thread_local std::vector<cudaStream_t> streams;
  if (streams.empty()) streams.assign(device_count(), nullptr);
  return streams;
}

void check_device(int device) {
  DPCORE_CHECK(device >= 0 && device < device_count(), "cuda:", device, " does not exist (", device_count(),
               " CUDA device(s) usable)");
}

}  // namespace

cudaStream_t current_stream(int device) {
  check_device(device);
  return thread_streams()[device];
}

void set_current_stream(int device, cudaStream_t stream) {
  check_device(device);
  thread_streams()[device] = stream;
}

StreamGuard::StreamGuard(int device, cudaStream_t stream) : device_(device), previous_(current_stream(device)) {
  set_current_stream(device, stream);
}

StreamGuard::~StreamGuard() { thread_streams()[device_] = previous_; }

cudaStream_t side_stream(int device, int index) {
  check_device(device);
  DPCORE_CHECK(index >= 0, "side_stream: negative index ", index);
  static std::mutex mutex;
  static std::map<std::pair<int, int>, cudaStream_t> streams;  // never destroyed: they live as long as the process
  std::lock_guard<std::mutex> lock(mutex);
  cudaStream_t& stream = streams[{device, index}];
  if (!stream) {
    set_device(device);
    // Non-blocking: a side stream must not serialize with the legacy default stream, or
    // replicas on one GPU could not overlap.
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  return stream;
}

namespace {

// Streams handed back by threads that ended, per device; never freed (see side_stream).
struct OwnStreamPool {
  std::mutex mutex;
  std::map<int, std::vector<cudaStream_t>> idle;
};
OwnStreamPool& own_stream_pool() {
  static OwnStreamPool* pool = new OwnStreamPool();
  return *pool;
}

// One thread's own streams, back to the pool when the thread ends. Work still queued on
// them is harmless to the next owner: a stream runs in order.
struct ThreadOwnStreams {
  std::map<int, cudaStream_t> by_device;
  ~ThreadOwnStreams() {
    OwnStreamPool& pool = own_stream_pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    for (const auto& [device, stream] : by_device) pool.idle[device].push_back(stream);
  }
};

}  // namespace

cudaStream_t own_stream(int device) {
  check_device(device);
  thread_local ThreadOwnStreams mine;
  cudaStream_t& stream = mine.by_device[device];
  if (stream) return stream;
  OwnStreamPool& pool = own_stream_pool();
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    std::vector<cudaStream_t>& idle = pool.idle[device];
    if (!idle.empty()) {
      stream = idle.back();
      idle.pop_back();
      return stream;
    }
  }
  set_device(device);
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

void wait_stream(int waiting_device, cudaStream_t waiting, int producer_device, cudaStream_t producer) {
  // A null stream means "the legacy stream of the current device", so the current device
  // must be the producer's while recording and the waiter's while waiting.
  set_device(producer_device);
  cudaEvent_t event;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(event, producer));
  set_device(waiting_device);
  CUDA_CHECK(cudaStreamWaitEvent(waiting, event, 0));
  // Destroying a recorded event is safe: its resources are released once it completes.
  CUDA_CHECK(cudaEventDestroy(event));
}

bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t error = cudaStreamIsCapturing(stream, &status);
  // Asking about the legacy stream while a blocking stream of the device captures is
  // itself refused; that still means a capture is going on.
  if (error == cudaErrorStreamCaptureImplicit) {
    cudaGetLastError();
    return true;
  }
  CUDA_CHECK(error);
  return status != cudaStreamCaptureStatusNone;
}

RelaxedCaptureMode::RelaxedCaptureMode() : previous_(cudaStreamCaptureModeRelaxed) {
  CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&previous_));
}

RelaxedCaptureMode::~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&previous_); }

}  // namespace dpcore::kernels::cuda_runtime
