#include "kernels/cuda_libraries/dispatch.h"

#include <array>
#include <functional>
#include <map>
#include <mutex>
#include <type_traits>

#include "kernels/cuda_runtime/caching_allocator.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/error.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_libraries/engine_config.h"
#include "kernels/cuda_libraries/library_engines.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda_runtime/stream.h"

namespace dpcore::kernels::cuda_libraries {

namespace {

namespace hand = kernels::cuda;

enum class Impl { Hand, Library };
enum class Mode { Hand, Library, Auto };
enum class Op { ConvForward, ConvBackwardData, ConvBackwardWeight, LinearForward, LinearBackwardData, LinearBackwardWeight,
                BatchedMatmul };

constexpr int kTimedRuns = 3;

Mode mode_of(ConvEngine e) { return e == ConvEngine::Hand ? Mode::Hand : e == ConvEngine::Cudnn ? Mode::Library : Mode::Auto; }
Mode mode_of(GemmEngine e) { return e == GemmEngine::Hand ? Mode::Hand : e == GemmEngine::Cublas ? Mode::Library : Mode::Auto; }
// The settings that choose a library engine, for the error of a build without them.
constexpr const char* kConvLibrary = "--conv-engine cudnn";
constexpr const char* kGemmLibrary = "--gemm-engine cublas";

// The library engines; only asked for once choose() has picked one, so they exist.
const LibraryEngines& libraries() { return *library_engines(); }

// (op, element type, device, tf32, shape): what auto timed and the winner.
using Key = std::array<int64_t, 15>;
template <class T>
constexpr int64_t kTypeCode = std::is_same_v<T, float> ? 0 : std::is_same_v<T, kernels::BFloat16> ? 1 : 2;

template <class T = float>
Key conv_key(Op op, const kernels::Conv2dShape& s) {
  return Key{int64_t(op), kTypeCode<T>, cuda_runtime::current_device(), engine_config().tf32, s.N, s.C, s.H, s.W,
             s.K, s.R, s.S, s.stride_h, s.stride_w, s.pad_h, s.pad_w};
}
template <class T = float>
Key linear_key(Op op, const kernels::LinearShape& s) {
  return Key{int64_t(op), kTypeCode<T>, cuda_runtime::current_device(), engine_config().tf32, s.N, s.in, s.out, 0, 0,
             0, 0, 0, 0, 0, 0};
}

// Mean milliseconds of `runs` calls of `run`, after one untimed call (which also creates
// library handles, picks cuDNN algorithms and fills the allocator's cache).
float time_ms(const std::function<void()>& run, cudaStream_t stream) {
  run();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < kTimedRuns; ++i) run();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms / kTimedRuns;
}

// The engine to run. For auto, the first call of a (op, shape) times both engines on a
// scratch output of `out_floats` (never on the real output: a weight gradient that
// accumulates must be written exactly once) and caches the faster. Timing would
// synchronize, which a graph capture forbids: an untimed shape under capture takes the
// library engine without caching the choice. In a build without the libraries
// (library_engines_in_build() false) auto is the hand kernels and a library engine is an error
// naming `op` and the setting that chose it (`library`).
Impl choose(Mode mode, const char* op, const char* library, const Key& key, size_t out_floats, cudaStream_t stream,
            const std::function<void(Impl, float*)>& trial) {
  if (!library_engines_in_build()) {
    DPCORE_CHECK(mode != Mode::Library, op, ": ", library,
                 ": the library engines (cuDNN, cuBLAS) are not in this build (DPCORE_CUDA=HOST has the hand kernels "
                 "only: use hand or auto)");
    return Impl::Hand;
  }
  if (mode != Mode::Auto) return mode == Mode::Hand ? Impl::Hand : Impl::Library;
  static std::mutex mutex;
  static std::map<Key, Impl> chosen;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = chosen.find(key);
    if (it != chosen.end()) return it->second;
  }
  if (cuda_runtime::is_capturing(stream)) return Impl::Library;
  cuda_runtime::Workspace scratch(out_floats * sizeof(float), stream);
  const float hand_ms = time_ms([&] { trial(Impl::Hand, scratch.floats()); }, stream);
  const float library_ms = time_ms([&] { trial(Impl::Library, scratch.floats()); }, stream);
  const Impl winner = hand_ms < library_ms ? Impl::Hand : Impl::Library;
  std::lock_guard<std::mutex> lock(mutex);
  chosen[key] = winner;
  return winner;
}

kernels::cuda::SgemmFn gemm_of(Impl impl) { return impl == Impl::Hand ? hand::sgemm : libraries().sgemm; }

// batched_matmul
template <class T = float>
Key batched_matmul_key(const kernels::BatchedMatmulShape& s) {
  return Key{int64_t(Op::BatchedMatmul), kTypeCode<T>, cuda_runtime::current_device(), engine_config().tf32, s.batch,
             s.M, s.N, s.K, s.trans_a, s.trans_b, 0, 0, 0, 0, 0};
}
kernels::cuda::BatchedSgemmFn batched_gemm_of(Impl impl) {
  return impl == Impl::Hand ? hand::sgemm_strided_batched : libraries().sgemm_strided_batched;
}

// The 16-bit GEMM of each engine.
template <class H>
kernels::cuda::HalfGemmFn<H, H> half_gemm_of(Impl impl) {
  if (impl == Impl::Hand) return hand::gemm_half_strided_batched<H, H>;
  if constexpr (std::is_same_v<H, kernels::BFloat16>) return libraries().gemm_bf16;
  else return libraries().gemm_fp16;
}
// choose() for an output of `out_elements` values of T (float, or 16-bit): auto's
// trial(impl, scratch) writes choose()'s float scratch, read as T.
template <class T, class Trial>
Impl choose_typed(Mode mode, const char* op, const char* library, const Key& key, int64_t out_elements,
                  cudaStream_t stream, Trial trial) {
  const size_t scratch_floats = (size_t(out_elements) * sizeof(T) + sizeof(float) - 1) / sizeof(float);
  return choose(mode, op, library, key, scratch_floats, stream,
                [&](Impl impl, float* scratch) { trial(impl, reinterpret_cast<T*>(scratch)); });
}
// The GEMM engine (--gemm-engine) and the convolution engine (--conv-engine) for `op`.
template <class T, class Trial>
Impl choose_gemm_engine(const char* op, const Key& key, int64_t out_elements, cudaStream_t stream, Trial trial) {
  return choose_typed<T>(mode_of(engine_config().gemm), op, kGemmLibrary, key, out_elements, stream, trial);
}
template <class T, class Trial>
Impl choose_conv_engine(const char* op, const Key& key, int64_t out_elements, cudaStream_t stream, Trial trial) {
  return choose_typed<T>(mode_of(engine_config().conv), op, kConvLibrary, key, out_elements, stream, trial);
}

// cuDNN's convolutions on T.
template <class T>
const LibraryConv<T>& library_conv() {
  if constexpr (std::is_same_v<T, float>) return libraries().conv;
  else if constexpr (std::is_same_v<T, kernels::BFloat16>) return libraries().conv_bf16;
  else return libraries().conv_fp16;
}
// The hand convolutions' two backwards on float32 or 16-bit tensors, without the bias
// gradient (the dispatch adds it for both engines), and that bias gradient.
void hand_conv2d_backward_data(const kernels::Conv2dShape& s, const float* dy, const float* w, float* dx,
                               cudaStream_t stream) {
  hand::conv2d_backward_data(s, dy, w, dx, stream);
}
template <class H>
void hand_conv2d_backward_data(const kernels::Conv2dShape& s, const H* dy, const H* w, H* dx, cudaStream_t stream) {
  hand::conv2d_backward_data_half(s, dy, w, dx, stream);
}
void hand_conv2d_backward_weight(const kernels::Conv2dShape& s, const float* x, const float* dy, float* dw,
                                 bool accumulate, cudaStream_t stream) {
  hand::conv2d_backward_weight(s, x, dy, dw, nullptr, accumulate, stream);
}
template <class H>
void hand_conv2d_backward_weight(const kernels::Conv2dShape& s, const H* x, const H* dy, H* dw, bool accumulate,
                                 cudaStream_t stream) {
  hand::conv2d_backward_weight_half<H>(s, x, dy, dw, nullptr, accumulate, stream);
}
void bias_gradient(const kernels::Conv2dShape& s, const float* dy, float* dbias, bool accumulate, cudaStream_t stream) {
  hand::channel_sum(s.N, s.K, s.P * s.Q, dy, dbias, accumulate, stream);
}
template <class H>
void bias_gradient(const kernels::Conv2dShape& s, const H* dy, H* dbias, bool accumulate, cudaStream_t stream) {
  hand::channel_sum_half(s.N, s.K, s.P * s.Q, dy, dbias, accumulate, stream);
}
// run(impl, out) on that engine, run itself the trial.
template <class T, class Run>
void on_gemm_engine(const char* op, const Key& key, int64_t out_elements, T* out, cudaStream_t stream, Run run) {
  run(choose_gemm_engine<T>(op, key, out_elements, stream, run), out);
}

}  // namespace

void dispatch_conv2d_forward(const kernels::Conv2dShape& s, const float* x, const float* w, const float* bias, bool relu,
                    float* y, cudaStream_t stream) {
  auto run = [&](Impl impl, float* out) {
    if (impl == Impl::Hand) {
      if (relu) {
        hand::conv2d_relu_forward(s, x, w, bias, out, stream);
      } else {
        hand::conv2d_forward(s, x, w, bias, out, stream);
      }
    } else {
      libraries().conv.forward(s, x, w, out, false, stream);
      hand::bias_activation(s.N, s.K, s.P * s.Q, bias, relu, out, stream);
    }
  };
  run(choose_conv_engine<float>("conv2d forward", conv_key(Op::ConvForward, s), s.y_size(), stream, run), y);
}

template <class T>
void dispatch_conv2d_backward_data(const kernels::Conv2dShape& s, const T* dy, const T* w, T* dx, cudaStream_t stream) {
  auto run = [&](Impl impl, T* out) {
    if (impl == Impl::Hand) {
      hand_conv2d_backward_data(s, dy, w, out, stream);
    } else {
      library_conv<T>().backward_data(s, dy, w, out, stream);
    }
  };
  run(choose_conv_engine<T>("conv2d backward (data)", conv_key<T>(Op::ConvBackwardData, s), s.x_size(), stream, run),
      dx);
}

template <class T>
void dispatch_conv2d_backward_weight(const kernels::Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias,
                                     bool accumulate, cudaStream_t stream) {
  auto run = [&](Impl impl, T* out, bool acc) {
    if (impl == Impl::Hand) {
      hand_conv2d_backward_weight(s, x, dy, out, acc, stream);
    } else {
      library_conv<T>().backward_weight(s, x, dy, out, acc, stream);
    }
  };
  const Impl impl = choose_conv_engine<T>("conv2d backward (weight)", conv_key<T>(Op::ConvBackwardWeight, s),
                                          s.w_size(), stream, [&](Impl i, T* out) { run(i, out, false); });
  run(impl, dw, accumulate);
  if (dbias) bias_gradient(s, dy, dbias, accumulate, stream);
}

void dispatch_linear_forward(const kernels::LinearShape& s, const float* x, const float* w, const float* bias, float* y,
                    cudaStream_t stream) {
  on_gemm_engine("linear forward", linear_key(Op::LinearForward, s), s.N * s.out, y, stream,
                 [&](Impl impl, float* out) { hand::linear_forward(s, x, w, bias, out, stream, gemm_of(impl)); });
}

void dispatch_linear_backward_data(const kernels::LinearShape& s, const float* dy, const float* w, float* dx,
                          cudaStream_t stream) {
  on_gemm_engine("linear backward (data)", linear_key(Op::LinearBackwardData, s), s.N * s.in, dx, stream,
                 [&](Impl impl, float* out) { hand::linear_backward_data(s, dy, w, out, stream, gemm_of(impl)); });
}

void dispatch_linear_backward_weight(const kernels::LinearShape& s, const float* x, const float* dy, float* dw, float* dbias,
                            bool accumulate, cudaStream_t stream) {
  auto run = [&](Impl impl, float* out, float* out_bias, bool acc) {
    hand::linear_backward_weight(s, x, dy, out, out_bias, acc, stream, gemm_of(impl));
  };
  const Impl impl = choose_gemm_engine<float>("linear backward (weight)", linear_key(Op::LinearBackwardWeight, s),
                                              s.out * s.in, stream,
                                              [&](Impl i, float* out) { run(i, out, nullptr, false); });
  run(impl, dw, dbias, accumulate);
}

// batched_matmul
void dispatch_batched_matmul(const kernels::BatchedMatmulShape& s, const float* a, const float* b, float* c,
                             cudaStream_t stream) {
  on_gemm_engine("batched_matmul", batched_matmul_key(s), s.c_size(), c, stream,
                 [&](Impl impl, float* out) { hand::batched_matmul(s, a, b, out, stream, batched_gemm_of(impl)); });
}

// ---- the 16-bit ops ----
// The hand forward adds the bias inside its GEMM (beta 1 onto the bias rows); cuDNN's does
// the same (beta 1 onto the rows broadcast_channels_half wrote), so both round once.
template <class H>
void dispatch_conv2d_forward(const kernels::Conv2dShape& s, const H* x, const H* w, const H* bias, H* y,
                             cudaStream_t stream) {
  auto run = [&](Impl impl, H* out) {
    if (impl == Impl::Hand) {
      hand::conv2d_forward_half(s, x, w, bias, out, stream);
      return;
    }
    if (bias) hand::broadcast_channels_half(s.N, s.K, s.P * s.Q, bias, out, stream);
    library_conv<H>().forward(s, x, w, out, bias != nullptr, stream);
  };
  run(choose_conv_engine<H>("conv2d forward", conv_key<H>(Op::ConvForward, s), s.y_size(), stream, run), y);
}

template <class H>
void dispatch_linear_forward(const kernels::LinearShape& s, const H* x, const H* w, const H* bias, H* y,
                             cudaStream_t stream) {
  on_gemm_engine("linear forward", linear_key<H>(Op::LinearForward, s), s.N * s.out, y, stream, [&](Impl impl, H* out) {
    hand::linear_forward_half(s, x, w, bias, out, stream, half_gemm_of<H>(impl));
  });
}

template <class H>
void dispatch_linear_backward_data(const kernels::LinearShape& s, const H* dy, const H* w, H* dx, cudaStream_t stream) {
  on_gemm_engine("linear backward (data)", linear_key<H>(Op::LinearBackwardData, s), s.N * s.in, dx, stream,
                 [&](Impl impl, H* out) {
                   hand::linear_backward_data_half(s, dy, w, out, stream, half_gemm_of<H>(impl));
                 });
}

template <class H>
void dispatch_linear_backward_weight(const kernels::LinearShape& s, const H* x, const H* dy, H* dw, H* dbias,
                                     bool accumulate, cudaStream_t stream) {
  auto run = [&](Impl impl, H* out, H* out_bias, bool acc) {
    hand::linear_backward_weight_half(s, x, dy, out, out_bias, acc, stream, half_gemm_of<H>(impl));
  };
  const Impl impl = choose_gemm_engine<H>("linear backward (weight)", linear_key<H>(Op::LinearBackwardWeight, s),
                                          s.out * s.in, stream, [&](Impl i, H* out) { run(i, out, nullptr, false); });
  run(impl, dw, dbias, accumulate);
}

template <class H>
void dispatch_batched_matmul(const kernels::BatchedMatmulShape& s, const H* a, const H* b, H* c, cudaStream_t stream) {
  on_gemm_engine("batched_matmul", batched_matmul_key<H>(s), s.c_size(), c, stream, [&](Impl impl, H* out) {
    hand::batched_matmul_half(s, a, b, out, stream, half_gemm_of<H>(impl));
  });
}

#define DPCORE_DISPATCH_CONV(T)                                                                                   \
  template void dispatch_conv2d_backward_data<T>(const kernels::Conv2dShape&, const T*, const T*, T*, cudaStream_t); \
  template void dispatch_conv2d_backward_weight<T>(const kernels::Conv2dShape&, const T*, const T*, T*, T*, bool,   \
                                                   cudaStream_t);
DPCORE_DISPATCH_CONV(float)
DPCORE_DISPATCH_CONV(kernels::BFloat16)
DPCORE_DISPATCH_CONV(kernels::Float16)
#undef DPCORE_DISPATCH_CONV

#define DPCORE_DISPATCH_HALF(H)                                                                                     \
  template void dispatch_conv2d_forward<H>(const kernels::Conv2dShape&, const H*, const H*, const H*, H*,          \
                                           cudaStream_t);                                                          \
  template void dispatch_linear_forward<H>(const kernels::LinearShape&, const H*, const H*, const H*, H*,          \
                                           cudaStream_t);                                                          \
  template void dispatch_linear_backward_data<H>(const kernels::LinearShape&, const H*, const H*, H*, cudaStream_t); \
  template void dispatch_linear_backward_weight<H>(const kernels::LinearShape&, const H*, const H*, H*, H*, bool,   \
                                                   cudaStream_t);                                                  \
  template void dispatch_batched_matmul<H>(const kernels::BatchedMatmulShape&, const H*, const H*, H*, cudaStream_t);
DPCORE_DISPATCH_HALF(kernels::BFloat16)
DPCORE_DISPATCH_HALF(kernels::Float16)
#undef DPCORE_DISPATCH_HALF

}  // namespace dpcore::kernels::cuda_libraries
