#include "kernels/cuda_runtime/graph.h"

#include <map>
#include <mutex>
#include <vector>

#include "kernels/error.h"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_runtime/library_preparation.h"
#include "kernels/cuda_runtime/stream.h"
#include "kernels/cuda_runtime/target_check.h"

namespace dpcore::kernels::cuda_runtime {

namespace {

// Capture streams are reused by later graphs: the cuDNN and cuBLAS handles (with their
// workspaces) that belong to a stream then serve every graph captured on it.
std::mutex idle_mutex;
std::map<int, std::vector<cudaStream_t>> idle_streams;

cudaStream_t acquire_capture_stream(int device) {
  {
    std::lock_guard<std::mutex> lock(idle_mutex);
    std::vector<cudaStream_t>& idle = idle_streams[device];
    if (!idle.empty()) {
      cudaStream_t stream = idle.back();
      idle.pop_back();
      return stream;
    }
  }
  // Capture needs a stream other than the legacy default stream; non-blocking so that it
  // does not implicitly synchronize with (and thereby invalidate the capture through) it.
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

void release_capture_stream(int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(idle_mutex);
  idle_streams[device].push_back(stream);
}

}  // namespace

CudaGraph::CudaGraph(int device) : device_(device) {
  DPCORE_CHECK(device >= 0 && device < device_count(), "CudaGraph: cuda:", device, " does not exist (", device_count(),
               " CUDA device(s) usable)");
}

CudaGraph::~CudaGraph() {
  if (!stream_) return;
  // The pool's memory may only change hands once no replay can still be using it.
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (pool_) device_allocator(device_).release_private_pool(pool_);  // null when capture() failed before making it
  release_capture_stream(device_, stream_);
}

cudaStream_t CudaGraph::stream() {
  set_device(device_);
  if (!stream_) {
    stream_ = acquire_capture_stream(device_);
    // What the body's ops would otherwise create on first use, and which a capture forbids
    // (they allocate and synchronize): the target-error record and the library handles.
    prepare_target_checks(device_);
    prepare_library_handles(device_, stream_);
  }
  return stream_;
}

void CudaGraph::warm_up(const std::function<void()>& body) {
  DPCORE_CHECK(!pool_, "CudaGraph: warm_up() after capture()");
  cudaStream_t capture_stream = stream();
  // The body reads what earlier work on the caller's stream produced (parameters, inputs).
  wait_stream(device_, capture_stream, device_, current_stream(device_));
  {
    StreamGuard guard(device_, capture_stream);
    body();
  }
  // Waiting here keeps the caller's later work (on its own stream) from overtaking the
  // step, and reports a failure of the warm-up as the warm-up's.
  CUDA_CHECK(cudaStreamSynchronize(capture_stream));
}

void CudaGraph::capture(const std::function<void()>& body) {
  DPCORE_CHECK(!pool_, "CudaGraph: capture() may be called once per graph");
  stream();
  pool_ = std::make_shared<PrivatePool>();
  CachingAllocator& allocator = device_allocator(device_);
  allocator.begin_private_pool(stream_, pool_);
  {
    StreamGuard guard(device_, stream_);
    // Thread-local mode: only this thread is barred from unsafe calls (other threads,
    // e.g. other replicas, keep working).
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      body();
    } catch (const std::exception& e) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream_, &partial);
      if (partial) cudaGraphDestroy(partial);
      cudaGetLastError();
      allocator.end_private_pool(stream_);
      fail("CudaGraph capture on cuda:", device_, " failed: ", e.what());
    }
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph_);
    allocator.end_private_pool(stream_);
    if (ended != cudaSuccess) {
      cudaGetLastError();
      fail("CudaGraph capture on cuda:", device_, " failed: ", cudaGetErrorString(ended),
           " (the body did something a capture forbids: a host synchronization, a device-to-host copy, or work on "
           "another stream that was not joined back)");
    }
  }
  CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::replay() {
  DPCORE_CHECK(exec_, "CudaGraph: replay() before capture()");
  set_device(device_);
  CUDA_CHECK(cudaGraphLaunch(exec_, current_stream(device_)));
}

}  // namespace dpcore::kernels::cuda_runtime
