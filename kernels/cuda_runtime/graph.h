// CUDA graph capture of a whole sequence of ops (the trainer captures one full training
// step: forward, backward, SGD) and its replay as a single launch. Replaying removes the
// per-kernel launch overhead (4-6 us per launch against 0.76 us per graph node on an H200).
//
// Rules for the captured body, as for torch.cuda.CUDAGraph:
//   * run it eagerly first (warm-up): that picks cuDNN algorithms, (with --*-engine auto)
//     times the engines and fills the allocator, none of which may happen inside a
//     capture. The last warm-up run goes through warm_up(), on the capture stream itself:
//     cuDNN and cuBLAS handles belong to a stream, and their first call on a fresh handle
//     may do lazy setup (workspaces, kernels loaded on first use) that would invalidate
//     the capture;
//   * no host synchronization inside (no .item(), no device-to-host copy);
//   * tensors the body reads or writes and that live outside it (parameters, gradient
//     buffers, the input batch) must stay alive, at the same addresses, while the graph is
//     replayed: new data goes in by copying into them, not by replacing them;
//   * memory the body allocates comes from a private pool owned by this graph: it stays
//     reserved for the graph until the graph is destroyed.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>

namespace dpcore::kernels::cuda_runtime {

struct PrivatePool;

class CudaGraph {
 public:
  explicit CudaGraph(int device);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Runs `body` eagerly on the capture stream (made current for its duration, and ordered
  // after the work queued so far on the calling thread's current stream) and waits for it.
  // Before capture() only; exceptions from `body` pass through.
  void warm_up(const std::function<void()>& body);
  // Records (does not run) the work `body` queues on the device, on the private capture
  // stream made current for the body's duration, and instantiates the graph. Once per
  // graph; throws a dpcore::Error naming the device and the cause when the capture fails.
  void capture(const std::function<void()>& body);
  // Launches the captured work on the calling thread's current stream of the device.
  void replay();
  bool captured() const { return exec_ != nullptr; }
  int device() const { return device_; }

 private:
  // The capture stream and its cuDNN / cuBLAS handles, acquired by the first warm_up() or capture().
  cudaStream_t stream();

  int device_;
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::shared_ptr<PrivatePool> pool_;
};

}  // namespace dpcore::kernels::cuda_runtime
