// The CUDA backend: binds the Backend interface (engine/backend.h) to the hand kernels
// and the cuDNN/cuBLAS engines of this folder, for Device::Type::CUDA.
//
// Every op runs on the current device's current stream (kernels/cuda_runtime/stream.h) and
// returns without waiting, so consecutive ops pipeline on the GPU and a whole step can be
// captured as a CUDA graph. Failures that only the GPU can see (a class target out of
// range) are recorded on the device and raised at the next synchronize() or
// device-to-host copy (kernels/cuda_runtime/target_check.h).
//
// The CUDA kernels are float32 only: float64 tensors on a GPU fail with a clear message
// (float64 exists for the CPU's finite-difference gradient checks).
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "kernels/error.h"
#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_libraries/engine_config.h"
#include "kernels/cuda_libraries/dispatch.h"
#include "kernels/cuda_runtime/graph.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda_runtime/pinned.h"
#include "kernels/cuda_runtime/stream.h"
#include "kernels/cuda_runtime/target_check.h"

namespace dpcore {
namespace {

namespace k = kernels::cuda;
namespace cuda_runtime = kernels::cuda_runtime;
namespace cuda_libraries = kernels::cuda_libraries;

// Checks that every given float tensor is float32, switches to the device of the first
// one and returns that device's current stream.
cudaStream_t begin_op(const char* op, std::initializer_list<const Tensor*> floats) {
  const Tensor* first = nullptr;
  for (const Tensor* t : floats) {
    if (!t || !t->defined()) continue;
    if (t->dtype() == DType::Float64) fail(op, ": float64 is not supported on cuda; the CUDA kernels are float32");
    DPCORE_CHECK(t->dtype() == DType::Float32, op, ": expected a float32 tensor, got ", t->str());
    if (!first) first = t;
  }
  DPCORE_CHECK(first, op, ": no tensor to run on");
  cuda_runtime::set_device(first->device().index);
  return cuda_runtime::current_stream(first->device().index);
}

// The kernels with 16-bit tensors (the op has checked that all share the dtype): runs
// f(H{}, stream) on the 16-bit kernels (the tensor-core products, attention, add,
// transpose) and returns true when t is bfloat16 or float16; false for float32 and
// float64, which take the op's float32 path.
template <class F>
bool on_half(const Tensor& t, F&& f) {
  if (!is_half_precision(t.dtype())) return false;
  cuda_runtime::set_device(t.device().index);
  cudaStream_t stream = cuda_runtime::current_stream(t.device().index);
  if (t.dtype() == DType::BFloat16) f(kernels::BFloat16{}, stream);
  else f(kernels::Float16{}, stream);
  return true;
}
// An elementwise op on 16-bit tensors: every operand of the first one's dtype.
void check_same_half(const char* op, const Tensor& first, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    DPCORE_CHECK(t->dtype() == first.dtype(), op, ": ", t->str(), " is not of ", first.str(), "'s dtype");
}

// The kernels written once over their activations' type (batch norm's steps, pooling,
// dropout, and the elementwise ops through map.cuh: add, scale, relu, gelu, tanh):
// `first` and `others` all float32 (checked as begin_op checks, float64 refused by name)
// or all of one 16-bit dtype; runs f(X{}, stream), X the element type (float,
// kernels::BFloat16 or kernels::Float16), on first's device's current stream.
template <class F>
void on_activations(const char* op, const Tensor& first, std::initializer_list<const Tensor*> others, F&& f) {
  if (on_half(first, [&](auto h, cudaStream_t stream) {
        check_same_half(op, first, others);
        f(h, stream);
      }))
    return;
  cudaStream_t stream = begin_op(op, {&first});
  if (others.size() > 0) begin_op(op, others);
  f(float{}, stream);
}

template <class H>
H* half_ptr(const Tensor* t) {
  return t && t->defined() ? t->data<H>() : nullptr;
}

float* f32(const Tensor& t) { return t.data<float>(); }
float* f32(const Tensor* t) { return t && t->defined() ? t->data<float>() : nullptr; }

// A batch upload from pinned memory goes on the compute stream, NOT on a side copy stream:
// dst may still be read by work queued there (the previous step's graph replay reads its
// fixed input buffer; a fresh tensor may get a block that queued kernels still use), and a
// copy on another stream would overwrite it under them. The host does not wait for the
// copy: an event after it marks when the pinned buffer may be refilled, and the loader
// waits for that (await_host_reads) on its own thread, so the CPU prepares the next batch
// while the GPU computes.
void upload_pinned(void* dst, int device, const void* src, size_t bytes) {
  cuda_runtime::set_device(device);
  cudaStream_t compute = cuda_runtime::current_stream(device);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, compute));
  cuda_runtime::record_pinned_read(src, device, compute);
}

// A CUDA graph with what its recording baked in besides the work itself: the engine
// configuration the dispatch read while recording (conv / GEMM engine, TF32), and the
// --cuda-graph switch, which may have been turned off since.
class Graph : public Backend::Captured {
 public:
  Graph(int device, const bool& graphs_enabled) : graph_(device), graphs_enabled_(graphs_enabled) {}
  void warm_up(const std::function<void()>& body) override { graph_.warm_up(body); }
  void record(const std::function<void()>& body) override {
    recorded_with_ = cuda_libraries::engine_config();
    graph_.capture(body);
  }
  void replay() override { graph_.replay(); }
  bool stale() const override {
    const cuda_libraries::EngineConfig now = cuda_libraries::engine_config();
    return !graphs_enabled_ || now.conv != recorded_with_.conv || now.gemm != recorded_with_.gemm ||
           now.tf32 != recorded_with_.tf32;
  }

 private:
  cuda_runtime::CudaGraph graph_;
  const bool& graphs_enabled_;  // the backend's, which outlives every graph
  cuda_libraries::EngineConfig recorded_with_;
};

class CudaEvent : public Backend::Event {
 public:
  CudaEvent() { CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~CudaEvent() override { cudaEventDestroy(event_); }  // safe while pending: released once it fires
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  void synchronize() override { CUDA_CHECK(cudaEventSynchronize(event_)); }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// The engine's Allocator over one GPU's caching allocator (kernels/cuda_runtime).
class CudaDeviceAllocator : public Allocator {
 public:
  explicit CudaDeviceAllocator(cuda_runtime::CachingAllocator& cache) : cache_(cache) {}
  void* allocate(size_t bytes) override { return cache_.allocate(bytes); }
  void deallocate(void* ptr, size_t bytes) override { cache_.deallocate(ptr, bytes); }
  size_t bytes_in_use() const override { return cache_.bytes_in_use(); }
  size_t peak_bytes() const override { return cache_.peak_bytes(); }
  void reset_peak() override { cache_.reset_peak(); }

 private:
  cuda_runtime::CachingAllocator& cache_;
};

class CudaBackend : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  int device_count() const override { return cuda_runtime::device_count(); }
  Allocator& allocator(int device_index) override {
    // One adapter per device, built with the caching allocators on first use (a static,
    // so no lock on this per-tensor path) and kept for the life of the process, as they are.
    static const std::vector<std::unique_ptr<CudaDeviceAllocator>> adapters = [] {
      std::vector<std::unique_ptr<CudaDeviceAllocator>> all;
      for (int d = 0; d < cuda_runtime::device_count(); ++d)
        all.push_back(std::make_unique<CudaDeviceAllocator>(cuda_runtime::device_allocator(d)));
      return all;
    }();
    // device_allocator names a device that does not exist; the adapters exist for every other.
    if (device_index < 0 || device_index >= int(adapters.size())) cuda_runtime::device_allocator(device_index);
    return *adapters[size_t(device_index)];
  }

  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override {
    if (bytes == 0) return;
    if (dst_device.is_cuda() && src_device.is_cuda()) {
      copy_device_to_device(dst, dst_device.index, src, src_device.index, bytes);
    } else if (dst_device.is_cuda() && cuda_runtime::is_pinned(src)) {
      upload_pinned(dst, dst_device.index, src, bytes);
    } else if (dst_device.is_cuda()) {
      // Pageable sources are staged by the driver before cudaMemcpyAsync returns, so the
      // caller may reuse them at once.
      const int device = dst_device.index;
      cuda_runtime::set_device(device);
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_runtime::current_stream(device)));
    } else if (src_device.is_cuda()) {
      const int device = src_device.index;
      cuda_runtime::set_device(device);
      cudaStream_t stream = cuda_runtime::current_stream(device);
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
      synchronize_stream(device);  // reading results back means the queued work ran
    } else {
      std::memmove(dst, src, bytes);
    }
  }

  void synchronize(int device_index) override {
    cuda_runtime::set_device(device_index);
    CUDA_CHECK(cudaDeviceSynchronize());
    cuda_runtime::raise_pending_target_error(device_index);
  }
  void synchronize_stream(int device_index) override {
    cuda_runtime::set_device(device_index);
    CUDA_CHECK(cudaStreamSynchronize(cuda_runtime::current_stream(device_index)));
    // The queued work ran: a bad target its checks found is reported now.
    cuda_runtime::raise_pending_target_error(device_index);
  }

  // conv-engine = hand|cudnn|auto, gemm-engine = hand|cublas|auto, tf32 = on|off
  // (kernels/cuda_libraries/engine_config.h), cuda-graph = on|off; the CLI's flags of those names.
  void set_option(const std::string& name, const std::string& value) override {
    cuda_libraries::EngineConfig config = cuda_libraries::engine_config();
    if (name == "cuda-graph") {
      DPCORE_CHECK(value == "on" || value == "off", "--cuda-graph: expected on or off, got '", value, "'");
      graphs_enabled_ = value == "on";
      return;
    }
    if (name == "conv-engine") {
      config.conv = cuda_libraries::parse_conv_engine(value, "--" + name);
    } else if (name == "gemm-engine") {
      config.gemm = cuda_libraries::parse_gemm_engine(value, "--" + name);
    } else if (name == "tf32") {
      DPCORE_CHECK(value == "on" || value == "off", "--tf32: expected on or off, got '", value, "'");
      config.tf32 = value == "on";
    } else {
      fail("the cuda backend has no option '", name, "' (it has conv-engine, gemm-engine, tf32 and cuda-graph)");
    }
    cuda_libraries::set_engine_config(config);
  }

  // ---- graphs, streams, events, pinned host memory ----
  std::unique_ptr<Captured> make_graph(int device_index) override {
    if (!graphs_enabled_) return nullptr;
    return std::make_unique<Graph>(device_index, graphs_enabled_);
  }
  void use_thread_stream(int device_index, int index) override {
    cuda_runtime::set_current_stream(device_index, cuda_runtime::side_stream(device_index, index));
  }
  void use_own_stream(int device_index) override {
    cuda_runtime::set_current_stream(device_index, cuda_runtime::own_stream(device_index));
  }
  std::shared_ptr<Event> record_event(int device_index) override {
    cuda_runtime::set_device(device_index);  // an event belongs to the device current at its creation
    auto event = std::make_shared<CudaEvent>();
    CUDA_CHECK(cudaEventRecord(event->get(), cuda_runtime::current_stream(device_index)));
    return event;
  }
  void wait_event(int device_index, const std::shared_ptr<Event>& event) override {
    if (!event) return;
    cuda_runtime::set_device(device_index);
    CUDA_CHECK(cudaStreamWaitEvent(cuda_runtime::current_stream(device_index),
                                   static_cast<const CudaEvent&>(*event).get(), 0));
  }
  void* alloc_host(size_t bytes) override { return cuda_runtime::pinned_alloc(bytes); }
  void free_host(void* ptr) override { cuda_runtime::pinned_free(ptr); }
  void await_host_reads(const void* host) override { cuda_runtime::await_pinned_reads(host); }

  // ---- conv2d and linear: through the engine selection, float32 and 16-bit alike ----
  void conv2d_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& y) override {
    if (on_half(x, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          cuda_libraries::dispatch_conv2d_forward(s, x.data<H>(), w.data<H>(), half_ptr<H>(bias), y.data<H>(), stream);
        }))
      return;
    cudaStream_t stream = begin_op("conv2d", {&x, &w, bias, &y});
    cuda_libraries::dispatch_conv2d_forward(s, f32(x), f32(w), f32(bias), false, f32(y), stream);
  }
  void conv2d_relu_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                           Tensor& y) override {
    cudaStream_t stream = begin_op("conv2d", {&x, &w, bias, &y});
    cuda_libraries::dispatch_conv2d_forward(s, f32(x), f32(w), f32(bias), true, f32(y), stream);
  }
  void conv2d_backward_data(const kernels::Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) override {
    if (on_half(dy, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          cuda_libraries::dispatch_conv2d_backward_data(s, dy.data<H>(), w.data<H>(), dx.data<H>(), stream);
        }))
      return;
    cudaStream_t stream = begin_op("conv2d backward", {&dy, &w, &dx});
    cuda_libraries::dispatch_conv2d_backward_data(s, f32(dy), f32(w), f32(dx), stream);
  }
  void conv2d_backward_weight(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                              Tensor* dbias, bool accumulate) override {
    if (on_half(x, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          cuda_libraries::dispatch_conv2d_backward_weight(s, x.data<H>(), dy.data<H>(), dw.data<H>(),
                                                          half_ptr<H>(dbias), accumulate, stream);
        }))
      return;
    cudaStream_t stream = begin_op("conv2d backward", {&x, &dy, &dw, dbias});
    cuda_libraries::dispatch_conv2d_backward_weight(s, f32(x), f32(dy), f32(dw), f32(dbias), accumulate, stream);
  }

  void linear_forward(const kernels::LinearShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& y) override {
    if (on_half(x, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          cuda_libraries::dispatch_linear_forward(s, x.data<H>(), w.data<H>(), half_ptr<H>(bias), y.data<H>(),
                                                  stream);
        }))
      return;
    cudaStream_t stream = begin_op("linear", {&x, &w, bias, &y});
    cuda_libraries::dispatch_linear_forward(s, f32(x), f32(w), f32(bias), f32(y), stream);
  }
  void linear_backward_data(const kernels::LinearShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) override {
    if (on_half(dy, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          cuda_libraries::dispatch_linear_backward_data(s, dy.data<H>(), w.data<H>(), dx.data<H>(), stream);
        }))
      return;
    cudaStream_t stream = begin_op("linear backward", {&dy, &w, &dx});
    cuda_libraries::dispatch_linear_backward_data(s, f32(dy), f32(w), f32(dx), stream);
  }
  void linear_backward_weight(const kernels::LinearShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                              Tensor* dbias, bool accumulate) override {
    if (on_half(x, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          cuda_libraries::dispatch_linear_backward_weight(s, x.data<H>(), dy.data<H>(), dw.data<H>(),
                                                          half_ptr<H>(dbias), accumulate, stream);
        }))
      return;
    cudaStream_t stream = begin_op("linear backward", {&x, &dy, &dw, dbias});
    cuda_libraries::dispatch_linear_backward_weight(s, f32(x), f32(dy), f32(dw), f32(dbias), accumulate, stream);
  }

  // ---- the rest: hand kernels ----
  void max_pool2d_forward(const kernels::Pool2dShape& s, const Tensor& x, Tensor& y, Tensor& argmax) override {
    on_activations("max_pool2d", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::max_pool2d_forward(s, x.data<X>(), y.data<X>(), argmax.data<int32_t>(), stream);
    });
  }
  void max_pool2d_relu_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                                const Tensor& relu_y, Tensor& dx) override {
    cudaStream_t stream = begin_op("max_pool2d backward", {&dy, &relu_y, &dx});
    k::max_pool2d_relu_backward(s, f32(dy), argmax.data<int32_t>(), f32(relu_y), f32(dx), stream);
  }
  void max_pool2d_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                           Tensor& dx) override {
    on_activations("max_pool2d backward", dy, {&dx}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::max_pool2d_backward(s, dy.data<X>(), argmax.data<int32_t>(), dx.data<X>(), stream);
    });
  }

  // The steps over activations take them float32 or 16-bit (on_activations), beside float32
  // statistics and parameters (begin_op checks those).
  void batch_norm2d_stats(const kernels::BatchNorm2dShape& s, const Tensor& x, Tensor& mean, Tensor& var) override {
    begin_op("batch_norm2d", {&mean, &var});
    on_activations("batch_norm2d", x, {}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::batch_norm2d_stats(s, x.data<X>(), f32(mean), f32(var), stream);
    });
  }
  void batch_norm2d_combine_stats(const kernels::BatchNorm2dShape& s, int64_t replicas, const Tensor& gathered,
                                  Tensor& mean, Tensor& var) override {
    cudaStream_t stream = begin_op("batch_norm2d combine_stats", {&gathered, &mean, &var});
    k::batch_norm2d_combine_stats(s, replicas, f32(gathered), f32(mean), f32(var), stream);
  }
  void batch_norm2d_finalize(const kernels::BatchNorm2dShape& s, const Tensor& mean, const Tensor& var, double eps,
                             double momentum, Tensor& invstd, Tensor* running_mean, Tensor* running_var) override {
    cudaStream_t stream = begin_op("batch_norm2d", {&mean, &var, &invstd, running_mean, running_var});
    k::batch_norm2d_finalize(s, f32(mean), f32(var), float(eps), float(momentum), f32(invstd), f32(running_mean),
                             f32(running_var), stream);
  }
  void batch_norm2d_apply(const kernels::BatchNorm2dShape& s, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                          const Tensor* weight, const Tensor* bias, Tensor& y) override {
    begin_op("batch_norm2d", {&mean, &invstd, weight, bias});
    on_activations("batch_norm2d", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::batch_norm2d_apply(s, x.data<X>(), f32(mean), f32(invstd), f32(weight), f32(bias), y.data<X>(), stream);
    });
  }
  void batch_norm2d_backward_reduce(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                    const Tensor& mean, const Tensor& invstd, Tensor* sum_dy, Tensor* sum_dy_xhat,
                                    Tensor* dweight, Tensor* dbias, bool accumulate) override {
    begin_op("batch_norm2d backward", {&mean, &invstd, sum_dy, sum_dy_xhat, dweight, dbias});
    on_activations("batch_norm2d backward", dy, {&x}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::batch_norm2d_backward_reduce(s, dy.data<X>(), x.data<X>(), f32(mean), f32(invstd), f32(sum_dy),
                                      f32(sum_dy_xhat), f32(dweight), f32(dbias), accumulate, stream);
    });
  }
  void batch_norm2d_backward_apply(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                   const Tensor& mean, const Tensor& invstd, const Tensor* weight, const Tensor* sum_dy,
                                   const Tensor* sum_dy_xhat, Tensor& dx) override {
    begin_op("batch_norm2d backward", {&mean, &invstd, weight, sum_dy, sum_dy_xhat});
    on_activations("batch_norm2d backward", dy, {&x, &dx}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::batch_norm2d_backward_apply(s, dy.data<X>(), x.data<X>(), f32(mean), f32(invstd), f32(weight), f32(sum_dy),
                                     f32(sum_dy_xhat), dx.data<X>(), stream);
    });
  }

  void relu_forward(const Tensor& x, Tensor& y) override {
    on_activations("relu", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::relu_forward(x.numel(), x.data<X>(), y.data<X>(), stream);
    });
  }
  void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    on_activations("relu backward", dy, {&y, &dx}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::relu_backward(dy.numel(), dy.data<X>(), y.data<X>(), dx.data<X>(), stream);
    });
  }

  void avg_pool2d_forward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& x,
                          Tensor& y) override {
    on_activations("avg_pool2d", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::avg_pool2d_forward(s, count_include_pad, x.data<X>(), y.data<X>(), stream);
    });
  }
  void avg_pool2d_backward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& dy,
                           Tensor& dx) override {
    on_activations("avg_pool2d backward", dy, {&dx}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::avg_pool2d_backward(s, count_include_pad, dy.data<X>(), dx.data<X>(), stream);
    });
  }
  void global_avg_pool2d_forward(const Tensor& x, Tensor& y) override {
    on_activations("global_avg_pool2d", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::global_avg_pool2d_forward(x.size(0) * x.size(1), x.size(2) * x.size(3), x.data<X>(), y.data<X>(), stream);
    });
  }
  void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx) override {
    on_activations("global_avg_pool2d backward", dy, {&dx}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::global_avg_pool2d_backward(dx.size(0) * dx.size(1), dx.size(2) * dx.size(3), dy.data<X>(), dx.data<X>(),
                                    stream);
    });
  }

  void log_softmax_forward(const Tensor& x, Tensor& y) override {
    cudaStream_t stream = begin_op("log_softmax", {&x, &y});
    k::log_softmax_forward(x.size(0), x.size(1), f32(x), f32(y), stream);
  }
  void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    cudaStream_t stream = begin_op("log_softmax backward", {&dy, &y, &dx});
    k::log_softmax_backward(dy.size(0), dy.size(1), f32(dy), f32(y), f32(dx), stream);
  }
  void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss_sum) override {
    cudaStream_t stream = begin_op("nll_loss", {&logp, &loss_sum});
    k::nll_loss_forward(logp.size(0), logp.size(1), f32(logp), target.data<int64_t>(), f32(loss_sum), stream);
  }
  void nll_loss_backward(const Tensor& grad_per_row, const Tensor& target, Tensor& dlogp) override {
    cudaStream_t stream = begin_op("nll_loss backward", {&grad_per_row, &dlogp});
    k::nll_loss_backward(dlogp.size(0), dlogp.size(1), f32(grad_per_row), target.data<int64_t>(), f32(dlogp), stream);
  }
  void cross_entropy_forward_backward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                      const Tensor* divisor, Tensor& loss, Tensor& dlogits) override {
    cudaStream_t stream = begin_op("cross_entropy", {&logits, &loss, &dlogits});  // target, divisor: int64
    k::cross_entropy_forward_backward(target.numel(), logits.size(-1), f32(logits), target.data<int64_t>(),
                                      ignore_index, 1.f, divisor ? divisor->data<int64_t>() : nullptr, f32(loss),
                                      f32(dlogits), stream);
  }
  void check_indices(const kernels::IndexCheck& check, const Tensor& indices) override {
    const int device = indices.device().index;
    cuda_runtime::set_device(device);
    cuda_runtime::check_indices_async(device, check, indices.data<int64_t>(), indices.numel(),
                                      cuda_runtime::current_stream(device));
  }

  void fill(Tensor& y, double value) override {
    const int device = y.device().index;
    cuda_runtime::set_device(device);
    cudaStream_t stream = cuda_runtime::current_stream(device);
    switch (y.dtype()) {
      case DType::Float32: k::fill<float>(y.numel(), float(value), y.data<float>(), stream); return;
      case DType::Int32: k::fill<int32_t>(y.numel(), int32_t(value), y.data<int32_t>(), stream); return;
      case DType::Int64: k::fill<int64_t>(y.numel(), int64_t(value), y.data<int64_t>(), stream); return;
      case DType::Float64: fail("fill: float64 is not supported on cuda; the CUDA kernels are float32");
      case DType::BFloat16:
      case DType::Float16: fail("fill: ", dtype_name(y.dtype()), " has no CUDA kernel yet (the CUDA kernels are float32)");
    }
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    // 16-bit: the sum rounded once from float32 (the reduction step of a 16-bit allreduce).
    on_activations("add", a, {&b, &y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::add(a.numel(), a.data<X>(), b.data<X>(), y.data<X>(), stream);
    });
  }
  void axpy(double alpha, const Tensor& x, Tensor& y) override {
    cudaStream_t stream = begin_op("axpy", {&x, &y});
    k::axpy(x.numel(), float(alpha), f32(x), f32(y), stream);
  }
  void scale(double alpha, const Tensor& x, Tensor& y) override {
    on_activations("scale", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::scale(x.numel(), float(alpha), x.data<X>(), y.data<X>(), stream);
    });
  }
  void scale_by(const Tensor& s, const Tensor& x, Tensor& y) override {
    cudaStream_t stream = begin_op("scale", {&s, &x, &y});
    k::scale_by(x.numel(), f32(s), f32(x), f32(y), stream);
  }
  void unscale_and_check_finite(float inv_scale, Tensor& x, Tensor& found_inf) override {
    cudaStream_t stream = begin_op("unscale_and_check_finite", {&x, &found_inf});
    k::unscale_and_check_finite(x.numel(), inv_scale, f32(x), f32(found_inf), stream);
  }
  void sum(const Tensor& x, Tensor& out) override {
    cudaStream_t stream = begin_op("sum", {&x, &out});
    k::sum(x.numel(), f32(x), f32(out), stream);
  }
  void sum_of_squares(const Tensor& x, Tensor& out) override {
    cudaStream_t stream = begin_op("sum_of_squares", {&x, &out});
    k::sum_of_squares(x.numel(), f32(x), f32(out), stream);
  }
  void sgd_step(const kernels::SgdConfig& cfg, bool first_step, Tensor& param, const Tensor& grad,
                Tensor& momentum) override {
    cudaStream_t stream = begin_op("sgd", {&param, &grad, &momentum});
    k::sgd_step(param.numel(), cfg, first_step, f32(param), f32(grad), f32(&momentum), stream);  // no momentum: undefined
  }
  void adam_step(const kernels::AdamConfig& cfg, int64_t step, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                 Tensor& exp_avg_sq, const Tensor& decay_mask) override {
    cudaStream_t stream = begin_op("adam", {&param, &grad, &exp_avg, &exp_avg_sq});  // decay_mask: int32
    const auto* mask = decay_mask.defined() ? reinterpret_cast<const uint32_t*>(decay_mask.data<int32_t>()) : nullptr;
    k::adam_step(param.numel(), cfg, step, f32(param), f32(grad), f32(exp_avg), f32(exp_avg_sq), mask, stream);
  }
  // ---- scaled_dot_product_attention ----
  void attention_forward(const kernels::AttentionShape& s, const Tensor& query, const Tensor& key, const Tensor& value,
                         const Tensor& key_mask, Tensor& o, Tensor& lse) override {
    if (on_half(query, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          check_same_half("scaled_dot_product_attention", query, {&key, &value, &o});
          k::attention_forward<H>(s, query.data<H>(), key.data<H>(), value.data<H>(), half_ptr<H>(&key_mask),
                                  o.data<H>(), f32(lse), stream);
        }))
      return;
    cudaStream_t stream = begin_op("scaled_dot_product_attention", {&query, &key, &value, &key_mask, &o, &lse});
    k::attention_forward(s, f32(query), f32(key), f32(value), f32(&key_mask), f32(o), f32(lse), stream);
  }
  void attention_backward(const kernels::AttentionShape& s, const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& key_mask, const Tensor& o, const Tensor& lse, const Tensor& dout, Tensor& dq,
                          Tensor& dk, Tensor& dv) override {
    Tensor row_dot = Tensor::empty({s.rows()}, DType::Float32, query.device());  // D = rowsum(dout * o), O(T)
    if (on_half(query, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          check_same_half("scaled_dot_product_attention backward", query, {&key, &value, &o, &dout, &dq, &dk, &dv});
          k::attention_backward<H>(s, query.data<H>(), key.data<H>(), value.data<H>(), half_ptr<H>(&key_mask),
                                   o.data<H>(), f32(lse), dout.data<H>(), f32(row_dot), dq.data<H>(), dk.data<H>(),
                                   dv.data<H>(), stream);
        }))
      return;
    cudaStream_t stream =
        begin_op("scaled_dot_product_attention backward", {&query, &key, &value, &key_mask, &o, &lse, &dout, &dq, &dk, &dv});
    k::attention_backward(s, f32(query), f32(key), f32(value), f32(&key_mask), f32(o), f32(lse), f32(dout), f32(row_dot),
                          f32(dq), f32(dk), f32(dv), stream);
  }

  // ---- gelu, tanh, dropout (issue 24) ----
  void gelu_forward(kernels::GeluApproximate form, const Tensor& x, Tensor& y) override {
    on_activations("gelu", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::gelu_forward(form, x.numel(), x.data<X>(), y.data<X>(), stream);
    });
  }
  void gelu_backward(kernels::GeluApproximate form, const Tensor& dy, const Tensor& x, Tensor& dx) override {
    on_activations("gelu backward", dy, {&x, &dx}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::gelu_backward(form, dy.numel(), dy.data<X>(), x.data<X>(), dx.data<X>(), stream);
    });
  }
  void tanh_forward(const Tensor& x, Tensor& y) override {
    on_activations("tanh", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::tanh_forward(x.numel(), x.data<X>(), y.data<X>(), stream);
    });
  }
  void tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    on_activations("tanh backward", dy, {&y, &dx}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::tanh_backward(dy.numel(), dy.data<X>(), y.data<X>(), dx.data<X>(), stream);
    });
  }
  void dropout(const kernels::DropoutConfig& cfg, const Tensor& x, Tensor& y) override {
    const int64_t samples = x.size(0), sample_size = samples ? x.numel() / samples : 0;
    on_activations("dropout", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      k::dropout(cfg, samples, sample_size, x.data<X>(), y.data<X>(), stream);
    });
  }

  // ---- batched_matmul: through the GEMM engine selection ----
  void batched_matmul(const kernels::BatchedMatmulShape& s, const Tensor& a, const Tensor& b, Tensor& c) override {
    if (on_half(a, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          cuda_libraries::dispatch_batched_matmul(s, a.data<H>(), b.data<H>(), c.data<H>(), stream);
        }))
      return;
    cudaStream_t stream = begin_op("batched_matmul", {&a, &b, &c});
    cuda_libraries::dispatch_batched_matmul(s, f32(a), f32(b), f32(c), stream);
  }

  // embedding
  void embedding_forward(const Tensor& ids, const Tensor& weight, Tensor& y) override {
    cudaStream_t stream = begin_op("embedding", {&weight, &y});  // ids: int64
    k::embedding_forward(ids.numel(), weight.size(0), weight.size(1), ids.data<int64_t>(), f32(weight), f32(y),
                         stream);
  }
  void embedding_backward(const Tensor& ids, const Tensor& dy, int64_t padding_idx, Tensor& dweight,
                          bool accumulate) override {
    cudaStream_t stream = begin_op("embedding backward", {&dy, &dweight});  // ids: int64
    k::embedding_backward(ids.numel(), dweight.size(0), dweight.size(1), ids.data<int64_t>(), f32(dy), padding_idx,
                          f32(dweight), accumulate, stream);
  }

  // cross_entropy's count of tokens
  void count_targets(const Tensor& target, int64_t ignore_index, Tensor& counted) override {
    const int device = target.device().index;
    cuda_runtime::set_device(device);
    k::count_targets(target.numel(), target.data<int64_t>(), ignore_index, counted.data<int64_t>(),
                     cuda_runtime::current_stream(device));
  }
  // layer_norm
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                          Tensor& mean, Tensor& rstd) override {
    // x and y float32 or 16-bit (on_activations), beside float32 weight, bias and statistics.
    begin_op("layer_norm", {&weight, &bias, &mean, &rstd});
    on_activations("layer_norm", x, {&y}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      const int64_t cols = x.size(x.dim() - 1);
      k::layer_norm_forward(x.numel() / cols, cols, x.data<X>(), f32(&weight), f32(&bias), float(eps), y.data<X>(),
                            f32(mean), f32(rstd), stream);
    });
  }
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate) override {
    begin_op("layer_norm backward", {&weight, &mean, &rstd, &dweight, &dbias});
    on_activations("layer_norm backward", x, {&dy}, [&](auto t, cudaStream_t stream) {
      using X = decltype(t);
      DPCORE_CHECK(!dx.defined() || dx.dtype() == x.dtype(), "layer_norm backward: ", dx.str(), " is not of ",
                   x.str(), "'s dtype");
      const int64_t cols = x.size(x.dim() - 1);
      k::layer_norm_backward(x.numel() / cols, cols, dy.data<X>(), x.data<X>(), f32(&weight), f32(mean), f32(rstd),
                             dx.defined() ? dx.data<X>() : nullptr, f32(&dweight), f32(&dbias), accumulate, stream);
    });
  }
  // softmax
  void softmax_forward(const kernels::SoftmaxShape& s, const Tensor& x, const Tensor& mask, Tensor& y) override {
    cudaStream_t stream = begin_op("softmax", {&x, &mask, &y});
    k::softmax_forward(s, f32(x), f32(&mask), f32(y), stream);
  }
  void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    cudaStream_t stream = begin_op("softmax backward", {&dy, &y, &dx});
    const int64_t cols = y.size(y.dim() - 1);
    k::softmax_backward(y.numel() / cols, cols, f32(dy), f32(y), f32(dx), stream);
  }
  // ---- cast ----
  void cast(const Tensor& x, Tensor& y) override {
    const Tensor& wide = x.dtype() == DType::Float32 ? x : y;  // the float32 side
    cudaStream_t stream = begin_op("cast", {&wide});
    const DType from = x.dtype(), to = y.dtype();
    const int64_t n = x.numel();
    using kernels::BFloat16;
    using kernels::Float16;
    if (from == DType::Float32 && to == DType::BFloat16) k::cast(n, f32(x), y.data<BFloat16>(), stream);
    else if (from == DType::Float32 && to == DType::Float16) k::cast(n, f32(x), y.data<Float16>(), stream);
    else if (from == DType::BFloat16 && to == DType::Float32) k::cast(n, x.data<BFloat16>(), f32(y), stream);
    else if (from == DType::Float16 && to == DType::Float32) k::cast(n, x.data<Float16>(), f32(y), stream);
    else fail("cast: ", dtype_name(from), " to ", dtype_name(to), " is not a conversion the kernels have");
  }
  // ---- transpose ----
  void transpose(const kernels::TransposeShape& s, const Tensor& x, Tensor& y) override {
    if (on_half(x, [&](auto h, cudaStream_t stream) {
          using H = decltype(h);
          check_same_half("transpose", x, {&y});
          k::transpose(s, x.data<H>(), y.data<H>(), stream);
        }))
      return;
    cudaStream_t stream = begin_op("transpose", {&x, &y});
    k::transpose(s, f32(x), f32(y), stream);
  }

 private:
  bool graphs_enabled_ = true;  // --cuda-graph

  // On the source device's stream, ordered after the work queued on the destination's
  // stream (which may still use dst) and before anything queued there afterwards.
  static void copy_device_to_device(void* dst, int dst_index, const void* src, int src_index, size_t bytes) {
    if (dst_index == src_index) {
      cuda_runtime::set_device(src_index);
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_runtime::current_stream(src_index)));
      return;
    }
    cudaStream_t src_stream = cuda_runtime::current_stream(src_index), dst_stream = cuda_runtime::current_stream(dst_index);
    cuda_runtime::wait_stream(src_index, src_stream, dst_index, dst_stream);
    cuda_runtime::set_device(src_index);
    CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_index, src, src_index, bytes, src_stream));
    cuda_runtime::wait_stream(dst_index, dst_stream, src_index, src_stream);
  }
};

CudaBackend cuda_backend;
const bool registered = (register_backend(Device::Type::CUDA, &cuda_backend), true);

}  // namespace
}  // namespace dpcore
