// The CUDA backend through the engine's tensors and ops: float64 is refused with a clear
// message, a bad class target is reported later (at synchronize or on reading a result
// back) naming the op, copies between host and device round-trip, ops follow the current
// stream, and the backend's options reach the engine selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "support/cuda_test_util.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/runtime.h"
#include "engine/tensor.h"
#include "kernels/cuda_libraries/engine_config.h"
#include "kernels/cuda_libraries/library_engines.h"
#include "kernels/cuda_runtime/pinned.h"
#include "kernels/cuda_runtime/stream.h"

namespace dpcore::testing {
namespace {

const Device kGpu = Device::cuda(0);

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CudaBackend, Float64ConvFailsClearly) {
  SKIP_WITHOUT_CUDA();
  Tensor x = Tensor::zeros({1, 1, 4, 4}, DType::Float64, Device::cpu()).to(kGpu);
  Tensor w = Tensor::zeros({1, 1, 3, 3}, DType::Float64, Device::cpu()).to(kGpu);
  EXPECT_EQ(message_of([&] { ops::conv2d(x, w, Tensor(), ops::Conv2dOptions{}); }),
            "conv2d: float64 is not supported on cuda; the CUDA kernels are float32");
}

// ops::to on the device (the cast kernel of kernels/cuda/cast.cu through the backend):
// the CPU's bits each way, and the gradient cast back to the input's dtype.
TEST(CudaBackend, ToGivesTheCpusBitsBothWaysAndCastsTheGradientBack) {
  SKIP_WITHOUT_CUDA();
  const std::vector<float> values = random_floats(1000, 7);
  Tensor x = Tensor::from_vector(values, {1000});
  for (DType half : {DType::BFloat16, DType::Float16}) {
    Tensor on_cpu = ops::to(x, half), on_gpu = ops::to(x.to(kGpu), half);
    EXPECT_EQ(on_gpu.dtype(), half);
    Tensor back = on_gpu.to(Device::cpu());
    EXPECT_EQ(std::memcmp(back.raw_data(), on_cpu.raw_data(), on_cpu.nbytes()), 0) << dtype_name(half);
    Tensor wide = ops::to(on_gpu, DType::Float32).to(Device::cpu()), wide_cpu = ops::to(on_cpu, DType::Float32);
    EXPECT_EQ(std::memcmp(wide.raw_data(), wide_cpu.raw_data(), wide.nbytes()), 0) << dtype_name(half);
  }
  Tensor w = Tensor::from_vector(std::vector<float>{0.5f, -1.25f}, {2}, kGpu);
  w.set_requires_grad(true);
  ops::sum(ops::scale(ops::to(ops::to(w, DType::BFloat16), DType::Float32), 1.0 / 3)).backward();
  for (float g : w.grad().to(Device::cpu()).to_vector<float>()) EXPECT_EQ(g, 0.333984375f);  // bfloat16(1/3)
}

// The add of two 16-bit tensors on the device (kernels/cuda/elementwise.cu's add, the reduction step
// of a 16-bit allreduce): the CPU's bits, into an output that starts as NaN and in place.
TEST(CudaBackend, SixteenBitAddGivesTheCpusBits) {
  SKIP_WITHOUT_CUDA();
  Tensor a32 = Tensor::from_vector(random_floats(1001, 11), {1001}), b32 = Tensor::from_vector(random_floats(1001, 12), {1001});
  for (DType half : {DType::BFloat16, DType::Float16}) {
    Tensor a = ops::to(a32, half), b = ops::to(b32, half), want = Tensor::empty({1001}, half);
    backend_for(Device::cpu()).add(a, b, want);
    Tensor ga = a.to(kGpu), gb = b.to(kGpu), got = Tensor::full({1001}, NAN, half).to(kGpu);
    backend_for(kGpu).add(ga, gb, got);
    backend_for(kGpu).add(ga, gb, ga);
    for (const Tensor& t : {got, ga}) {
      Tensor back = t.to(Device::cpu());
      EXPECT_EQ(std::memcmp(back.raw_data(), want.raw_data(), want.nbytes()), 0) << dtype_name(half);
    }
  }
}

TEST(CudaBackend, BadTargetIsReportedAtSynchronizeNamingTheOp) {
  SKIP_WITHOUT_CUDA();
  Tensor logp = Tensor::from_vector(random_floats(5 * 10, 1), {5, 10}, kGpu);
  Tensor target = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 12, 4}, {5}, kGpu);
  // Queued without waiting: the op itself returns normally.
  Tensor loss = ops::nll_loss(logp, target);
  EXPECT_EQ(message_of([] { runtime::synchronize(kGpu); }), "nll_loss: target 12 at row 3 is outside [0, 10)");
  // Reported once: the device is usable again.
  EXPECT_NO_THROW(runtime::synchronize(kGpu));
}

// A wait for the calling thread's stream alone (the replicas' finish_device_work) reports
// what that stream's work found, as a wait for the whole device does.
TEST(CudaBackend, BadTargetIsReportedAtAStreamSynchronize) {
  SKIP_WITHOUT_CUDA();
  kernels::cuda_runtime::StreamGuard side(kGpu.index, kernels::cuda_runtime::side_stream(kGpu.index, 1));
  Tensor logp = Tensor::from_vector(random_floats(5 * 10, 2), {5, 10}, kGpu);
  Tensor target = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4, -3}, {5}, kGpu);
  Tensor loss = ops::nll_loss(logp, target);
  EXPECT_EQ(message_of([] { runtime::synchronize_stream(kGpu); }), "nll_loss: target -3 at row 4 is outside [0, 10)");
  EXPECT_NO_THROW(runtime::synchronize_stream(kGpu));
}

TEST(CudaBackend, BadTargetIsReportedOnReadingAResultBack) {
  SKIP_WITHOUT_CUDA();
  Tensor logits = Tensor::from_vector(random_floats(4 * 3, 1), {4, 3}, kGpu);
  Tensor target = Tensor::from_vector(std::vector<int64_t>{0, -1, 2, 7}, {4}, kGpu);
  Tensor loss = ops::cross_entropy(logits, target);
  EXPECT_EQ(message_of([&] { loss.item(); }),
            "cross_entropy: target -1 at row 1 is outside [0, 3) and is not ignore_index -100");
}

TEST(CudaBackend, CopiesRoundTripThroughTheDevice) {
  SKIP_WITHOUT_CUDA();
  const std::vector<float> values = random_floats(1001, 1);
  Tensor host = Tensor::from_vector(values, {1001});
  Tensor device = host.to(kGpu);
  Tensor device_copy = device.clone();
  EXPECT_EQ(device_copy.to(Device::cpu()).to_vector<float>(), values);
}

TEST(CudaBackend, PinnedHostSourceIsCopied) {
  SKIP_WITHOUT_CUDA();
  const std::vector<float> values = random_floats(4096, 2);
  float* pinned = static_cast<float*>(kernels::cuda_runtime::pinned_alloc(values.size() * sizeof(float)));
  std::memcpy(pinned, values.data(), values.size() * sizeof(float));
  Tensor device = Tensor::empty({4096}, DType::Float32, kGpu);
  backend_for(kGpu).copy_bytes(device.raw_data(), kGpu, pinned, Device::cpu(), values.size() * sizeof(float));
  EXPECT_EQ(device.to_vector<float>(), values);  // the read-back is ordered after the copy
  kernels::cuda_runtime::pinned_free(pinned);
}

// An op issued under a StreamGuard goes to the guard's stream. The side stream is captured
// into a graph while the op is issued, so work that reaches it is recorded, not run: y must
// be untouched until the graph is launched, whereas work sent to any other stream would
// already have run (or, on the legacy stream, have broken the capture). No stream is held
// until the host says so, so nothing can deadlock: a host callback must not wait for other
// CUDA work (CUDA forbids it), and a device-side wait on a host flag could hold up the very
// copy the host waits for when two streams share a hardware queue.
TEST(CudaBackend, OpsRunOnTheCurrentStream) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = 1 << 16;
  const std::vector<float> values = random_floats(n, 1);
  Tensor a = Tensor::from_vector(values, {n}, kGpu);
  Tensor y = Tensor::full({n}, -1.0, DType::Float32, kGpu);
  runtime::synchronize(kGpu);
  cudaStream_t side = kernels::cuda_runtime::side_stream(0, 1);
  cudaGraph_t graph = nullptr;
  {
    kernels::cuda_runtime::StreamGuard guard(0, side);
    EXPECT_EQ(kernels::cuda_runtime::current_stream(0), side);
    CUDA_CHECK(cudaStreamBeginCapture(side, cudaStreamCaptureModeThreadLocal));
    const std::string error = message_of([&] { backend_for(kGpu).relu_forward(a, y); });
    // Ended in every case, so that a failure leaves the stream usable for the other tests.
    const cudaError_t ended = cudaStreamEndCapture(side, &graph);
    cudaGetLastError();  // a broken capture's error is not sticky: clear it
    ASSERT_EQ(error, "(no error)");
    ASSERT_EQ(ended, cudaSuccess) << "the capture broke: " << cudaGetErrorString(ended)
                                  << " (did the relu go to the legacy stream?)";
  }
  EXPECT_EQ(kernels::cuda_runtime::current_stream(0), nullptr);
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 1u) << "the relu kernel was not recorded on the side stream";
  runtime::synchronize(kGpu);  // whatever went to another stream has run by now
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(size_t(n), -1.f)) << "the relu ran on another stream";

  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, side));
  CUDA_CHECK(cudaStreamSynchronize(side));
  std::vector<float> want(values.size());
  for (size_t i = 0; i < values.size(); ++i) want[i] = std::max(values[i], 0.f);
  EXPECT_EQ(y.to_vector<float>(), want);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
}

TEST(CudaBackend, OptionsSetTheEngineConfig) {
  Backend* cuda_backend = find_backend(Device::Type::CUDA);
  ASSERT_NE(cuda_backend, nullptr);
  const kernels::cuda_libraries::EngineConfig saved = kernels::cuda_libraries::engine_config();
  cuda_backend->set_option("conv-engine", "hand");
  cuda_backend->set_option("gemm-engine", "auto");
  cuda_backend->set_option("tf32", "on");
  EXPECT_EQ(kernels::cuda_libraries::engine_config().conv, kernels::cuda_libraries::ConvEngine::Hand);
  EXPECT_EQ(kernels::cuda_libraries::engine_config().gemm, kernels::cuda_libraries::GemmEngine::Auto);
  EXPECT_TRUE(kernels::cuda_libraries::engine_config().tf32);
  EXPECT_EQ(message_of([&] { cuda_backend->set_option("conv-engine", "cublas"); }),
            "--conv-engine: unknown convolution engine 'cublas' (expected hand, cudnn or auto)");
  EXPECT_EQ(message_of([&] { cuda_backend->set_option("tf32", "yes"); }), "--tf32: expected on or off, got 'yes'");
  EXPECT_EQ(message_of([&] { cuda_backend->set_option("fast", "on"); }),
            "the cuda backend has no option 'fast' (it has conv-engine, gemm-engine, tf32 and cuda-graph)");
  EXPECT_EQ(message_of([&] { cuda_backend->set_option("cuda-graph", "maybe"); }),
            "--cuda-graph: expected on or off, got 'maybe'");
  kernels::cuda_libraries::set_engine_config(saved);
}

// The same small network step on the CPU and on the GPU with each engine choice: the
// engine selection changes the implementation, never the result.
TEST(CudaBackend, EveryEngineChoiceMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  const kernels::cuda_libraries::EngineConfig saved = kernels::cuda_libraries::engine_config();
  auto gradients = [](Device device) {
    Tensor x = Tensor::from_vector(random_floats(4 * 3 * 12 * 12, 1), {4, 3, 12, 12}, device);
    Tensor w = Tensor::from_vector(random_floats(8 * 3 * 3 * 3, 2), {8, 3, 3, 3}, device).set_requires_grad(true);
    Tensor fw = Tensor::from_vector(random_floats(5 * 8 * 6 * 6, 3), {5, 8 * 6 * 6}, device).set_requires_grad(true);
    Tensor target = Tensor::from_vector(std::vector<int64_t>{0, 4, 2, 1}, {4}, device);
    Tensor h = ops::max_pool2d(ops::relu(ops::conv2d(x, w, Tensor(), ops::Conv2dOptions{1, 1, 1, 1})),
                               ops::Pool2dOptions{});
    ops::cross_entropy(ops::linear(ops::flatten(h), fw, Tensor()), target).backward();
    std::vector<float> all = w.grad().to(Device::cpu()).to_vector<float>();
    std::vector<float> fc = fw.grad().to(Device::cpu()).to_vector<float>();
    all.insert(all.end(), fc.begin(), fc.end());
    return all;
  };
  const std::vector<float> want = gradients(Device::cpu());
  // Without the libraries (DPCORE_CUDA=HOST) cudnn and cublas are refused (registration_test).
  const bool libraries = kernels::cuda_libraries::library_engines_in_build();
  for (kernels::cuda_libraries::ConvEngine conv : {kernels::cuda_libraries::ConvEngine::Hand, kernels::cuda_libraries::ConvEngine::Cudnn, kernels::cuda_libraries::ConvEngine::Auto})
    for (kernels::cuda_libraries::GemmEngine gemm : {kernels::cuda_libraries::GemmEngine::Hand, kernels::cuda_libraries::GemmEngine::Cublas, kernels::cuda_libraries::GemmEngine::Auto}) {
      if (!libraries && (conv == kernels::cuda_libraries::ConvEngine::Cudnn || gemm == kernels::cuda_libraries::GemmEngine::Cublas))
        continue;
      SCOPED_TRACE(std::string(kernels::cuda_libraries::engine_name(conv)) + " + " + kernels::cuda_libraries::engine_name(gemm));
      kernels::cuda_libraries::set_engine_config(kernels::cuda_libraries::EngineConfig{conv, gemm, false});
      EXPECT_LE(scaled_error(gradients(kGpu), want), kFp32Tolerance);
    }
  kernels::cuda_libraries::set_engine_config(saved);
}

// Average pooling through the CUDA backend (shapes, plane counts and count_include_pad
// passed on to the kernels), forward and backward, against the CPU: a ResNet's tail of
// pooled features, global pooling and a classifier.
TEST(CudaBackend, AveragePoolingMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  struct Result {
    std::vector<float> pooled, grad;
  };
  auto run = [](Device device) {
    Tensor x = Tensor::from_vector(random_floats(2 * 3 * 9 * 7, 4), {2, 3, 9, 7}, device).set_requires_grad(true);
    Tensor fw = Tensor::from_vector(random_floats(4 * 3, 5), {4, 3}, device);
    Tensor target = Tensor::from_vector(std::vector<int64_t>{1, 3}, {2}, device);
    const ops::Pool2dOptions pool{3, 3, 2, 2, 1, 1};
    Tensor pooled = ops::global_avg_pool2d(ops::add(ops::avg_pool2d(x, pool), ops::avg_pool2d(x, pool, false)));
    ops::cross_entropy(ops::linear(ops::flatten(pooled), fw, Tensor()), target).backward();
    return Result{pooled.to(Device::cpu()).to_vector<float>(), x.grad().to(Device::cpu()).to_vector<float>()};
  };
  const Result want = run(Device::cpu()), got = run(kGpu);
  EXPECT_LE(scaled_error(got.pooled, want.pooled), kFp32Tolerance);
  EXPECT_LE(scaled_error(got.grad, want.grad), kFp32Tolerance);
}

// batch_norm2d through the CUDA backend against the CPU: a training forward (running
// statistics updated in place) and backward (the weight and bias gradients accumulated into
// their leaves' buffers, as into the flat gradient buffer), then eval with the updated
// statistics.
TEST(CudaBackend, BatchNormMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  struct Result {
    std::vector<float> train_y, eval_y, running_mean, running_var, dx, dweight, dbias;
  };
  auto run = [](Device device) {
    const int64_t N = 4, C = 3, H = 5, W = 6;
    auto host = [](const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); };
    Tensor x = Tensor::from_vector(random_floats(N * C * H * W, 6), {N, C, H, W}, device).set_requires_grad(true);
    Tensor w = Tensor::from_vector(random_floats(C, 7, 0.5, 1.5), {C}, device).set_requires_grad(true);
    Tensor b = Tensor::from_vector(random_floats(C, 8), {C}, device).set_requires_grad(true);
    w.set_grad(Tensor::from_vector(random_floats(C, 9), {C}, device));
    b.set_grad(Tensor::from_vector(random_floats(C, 10), {C}, device));
    Tensor running_mean = Tensor::zeros({C}, DType::Float32, device);
    Tensor running_var = Tensor::full({C}, 1.0, DType::Float32, device);
    Tensor fw = Tensor::from_vector(random_floats(5 * C * H * W, 11), {5, C * H * W}, device);
    Tensor target = Tensor::from_vector(std::vector<int64_t>{1, 3, 0, 4}, {N}, device);
    Tensor y = ops::batch_norm2d(x, w, b, running_mean, running_var, true);
    ops::cross_entropy(ops::linear(ops::flatten(y), fw, Tensor()), target).backward();
    Tensor eval_y = ops::batch_norm2d(x, w, b, running_mean, running_var, false);
    return Result{host(y),           host(eval_y),  host(running_mean), host(running_var),
                  host(x.grad()),    host(w.grad()), host(b.grad())};
  };
  const Result want = run(Device::cpu()), got = run(kGpu);
  EXPECT_LE(scaled_error(got.train_y, want.train_y), kFp32Tolerance);
  EXPECT_LE(scaled_error(got.eval_y, want.eval_y), kFp32Tolerance);
  EXPECT_LE(scaled_error(got.running_mean, want.running_mean), kFp32Tolerance);
  EXPECT_LE(scaled_error(got.running_var, want.running_var), kFp32Tolerance);
  EXPECT_LE(scaled_error(got.dx, want.dx), kFp32Tolerance);
  EXPECT_LE(scaled_error(got.dweight, want.dweight), kFp32Tolerance);
  EXPECT_LE(scaled_error(got.dbias, want.dbias), kFp32Tolerance);
}

}  // namespace
}  // namespace dpcore::testing
