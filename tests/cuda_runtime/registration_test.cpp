// What must hold on every machine, GPU or not (these run in CI): the CUDA backend is
// registered, counts devices without throwing or printing (0 without a GPU, whatever the
// driver says), and the engine flags parse or fail naming the flag; in a build without the
// library engines (DPCORE_CUDA=HOST), auto runs the hand kernels and choosing a library
// fails naming the op.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "engine/backend.h"
#include "engine/runtime.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda_libraries/dispatch.h"
#include "kernels/cuda_libraries/engine_config.h"
#include "kernels/cuda_libraries/library_engines.h"
#include "support/cuda_test_util.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

TEST(CudaRegistration, BackendIsRegistered) {
  Backend* backend = find_backend(Device::Type::CUDA);
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->name(), "cuda");
}

// On the CI machines cudaGetDeviceCount fails ("CUDA driver version is insufficient"):
// that must read as 0 devices, not as an exception.
TEST(CudaRegistration, DeviceCountAgreesWithTheDriverAndNeverThrows) {
  int driver_count = 0;
  if (cudaGetDeviceCount(&driver_count) != cudaSuccess) driver_count = 0;
  cudaGetLastError();
  int count = -1;
  ASSERT_NO_THROW(count = find_backend(Device::Type::CUDA)->device_count());
  EXPECT_EQ(count, driver_count);
  EXPECT_EQ(runtime::cuda_device_count(), driver_count);
  EXPECT_EQ(cuda_available(), driver_count > 0);
}

TEST(CudaRegistration, WithoutAGpuTheDeviceIsRefusedClearly) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a GPU: the no-GPU error path cannot be exercised";
  EXPECT_EQ(runtime::best_device(), Device::cpu());
  try {
    backend_for(Device::cuda(0));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only 0 CUDA device(s)"), std::string::npos) << e.what();
  }
}

TEST(EngineSelect, ParsesEveryEngineName) {
  EXPECT_EQ(kernels::cuda_libraries::parse_conv_engine("hand"), kernels::cuda_libraries::ConvEngine::Hand);
  EXPECT_EQ(kernels::cuda_libraries::parse_conv_engine("cudnn"), kernels::cuda_libraries::ConvEngine::Cudnn);
  EXPECT_EQ(kernels::cuda_libraries::parse_conv_engine("auto"), kernels::cuda_libraries::ConvEngine::Auto);
  EXPECT_EQ(kernels::cuda_libraries::parse_gemm_engine("hand"), kernels::cuda_libraries::GemmEngine::Hand);
  EXPECT_EQ(kernels::cuda_libraries::parse_gemm_engine("cublas"), kernels::cuda_libraries::GemmEngine::Cublas);
  EXPECT_EQ(kernels::cuda_libraries::parse_gemm_engine("auto"), kernels::cuda_libraries::GemmEngine::Auto);
  for (auto engine : {kernels::cuda_libraries::ConvEngine::Hand, kernels::cuda_libraries::ConvEngine::Cudnn, kernels::cuda_libraries::ConvEngine::Auto})
    EXPECT_EQ(kernels::cuda_libraries::parse_conv_engine(kernels::cuda_libraries::engine_name(engine)), engine);
  for (auto engine : {kernels::cuda_libraries::GemmEngine::Hand, kernels::cuda_libraries::GemmEngine::Cublas, kernels::cuda_libraries::GemmEngine::Auto})
    EXPECT_EQ(kernels::cuda_libraries::parse_gemm_engine(kernels::cuda_libraries::engine_name(engine)), engine);
}

TEST(EngineSelect, BadNamesFailNamingTheFlag) {
  try {
    kernels::cuda_libraries::parse_conv_engine("cuDNN", "--conv-engine");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--conv-engine: unknown convolution engine 'cuDNN' (expected hand, cudnn or auto)");
  }
  try {
    kernels::cuda_libraries::parse_gemm_engine("", "--gemm-engine");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--gemm-engine: unknown GEMM engine '' (expected hand, cublas or auto)");
  }
}

// Whether /proc/self/maps lists a file whose name contains `name`.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

// cuBLAS and cuDNN come with their engines' module, loaded by the first library_engines()
// and not before: a program that never chooses a library engine (every CPU run, every test
// without a GPU) does not pay cuBLASLt's initialisation at its start (library_engines.h).
// No other test of this executable asks for the engines, so whatever order the tests run
// in, the module is not there before this one loads it.
TEST(EngineSelect, TheLibrariesAreLoadedOnFirstUseOnly) {
  namespace libs = kernels::cuda_libraries;
  if (!libs::library_engines_in_build()) GTEST_SKIP() << "this build has no cuDNN and cuBLAS (DPCORE_CUDA=HOST)";
  EXPECT_FALSE(mapped("libdpcore_cuda_libraries")) << "the engines' module was loaded before it was asked for";
  EXPECT_FALSE(mapped("libcublasLt")) << "cuBLAS was loaded before the engines were asked for";
  EXPECT_FALSE(mapped("libcudnn")) << "cuDNN was loaded before the engines were asked for";
  const libs::LibraryEngines* engines = libs::library_engines();
  ASSERT_NE(engines, nullptr);
  EXPECT_EQ(engines, libs::library_engines()) << "loaded once, the same engines on every call";
  EXPECT_NE(engines->conv.forward, nullptr);
  EXPECT_NE(engines->gemm_fp16_f32, nullptr);
  EXPECT_NE(engines->prepare_handles, nullptr);
  EXPECT_TRUE(mapped("libdpcore_cuda_libraries"));
  EXPECT_TRUE(mapped("libcublasLt"));
}

// The libraries by default where the build has them, else the hand kernels.
TEST(EngineSelect, ConfigRoundTripsAndDefaultsToDeterministicLibraries) {
  const kernels::cuda_libraries::EngineConfig saved = kernels::cuda_libraries::engine_config();
  const kernels::cuda_libraries::EngineConfig defaults;
  const bool libraries = kernels::cuda_libraries::library_engines_in_build();
  EXPECT_EQ(defaults.conv, libraries ? kernels::cuda_libraries::ConvEngine::Cudnn : kernels::cuda_libraries::ConvEngine::Hand);
  EXPECT_EQ(defaults.gemm, libraries ? kernels::cuda_libraries::GemmEngine::Cublas : kernels::cuda_libraries::GemmEngine::Hand);
  EXPECT_FALSE(defaults.tf32);
  kernels::cuda_libraries::set_engine_config(kernels::cuda_libraries::EngineConfig{kernels::cuda_libraries::ConvEngine::Auto, kernels::cuda_libraries::GemmEngine::Hand, true});
  EXPECT_EQ(kernels::cuda_libraries::engine_config().conv, kernels::cuda_libraries::ConvEngine::Auto);
  EXPECT_EQ(kernels::cuda_libraries::engine_config().gemm, kernels::cuda_libraries::GemmEngine::Hand);
  EXPECT_TRUE(kernels::cuda_libraries::engine_config().tf32);
  kernels::cuda_libraries::set_engine_config(saved);
}

// Without the libraries, auto is the hand kernels (the same bits) and a library engine is
// an error naming the op and the setting, not a crash and not a silent substitute.
TEST(EngineSelect, WithoutTheLibrariesAutoRunsTheHandKernelsAndALibraryEngineFailsNamingTheOp) {
  if (kernels::cuda_libraries::library_engines_in_build()) GTEST_SKIP() << "this build has cuDNN and cuBLAS";
  SKIP_WITHOUT_CUDA();
  namespace libs = kernels::cuda_libraries;
  const libs::EngineConfig saved = libs::engine_config();
  const kernels::LinearShape s{4, 8, 3};
  DeviceArray<float> x(random_floats(s.N * s.in, 1)), w(random_floats(s.out * s.in, 2)), hand(s.N * s.out),
      chosen(s.N * s.out);
  kernels::cuda::linear_forward(s, x.get(), w.get(), nullptr, hand.get(), nullptr);
  libs::set_engine_config(libs::EngineConfig{libs::ConvEngine::Auto, libs::GemmEngine::Auto, false});
  libs::dispatch_linear_forward(s, x.get(), w.get(), nullptr, chosen.get(), nullptr);
  EXPECT_EQ(chosen.download(), hand.download());
  libs::set_engine_config(libs::EngineConfig{libs::ConvEngine::Hand, libs::GemmEngine::Cublas, false});
  try {
    libs::dispatch_linear_forward(s, x.get(), w.get(), nullptr, chosen.get(), nullptr);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "linear forward: --gemm-engine cublas: the library engines (cuDNN, cuBLAS) are not in this build "
                 "(DPCORE_CUDA=HOST has the hand kernels only: use hand or auto)");
  }
  libs::set_engine_config(libs::EngineConfig{libs::ConvEngine::Cudnn, libs::GemmEngine::Hand, false});
  kernels::Conv2dShape conv;  // 1x1x4x4 input, one 3x3 filter, no padding: 2x2 output
  conv.N = 1, conv.C = 1, conv.H = 4, conv.W = 4, conv.K = 1, conv.R = 3, conv.S = 3, conv.P = 2, conv.Q = 2;
  DeviceArray<float> image(random_floats(conv.x_size(), 3)), filter(random_floats(conv.w_size(), 4)), y(conv.y_size());
  try {
    libs::dispatch_conv2d_forward(conv, image.get(), filter.get(), nullptr, false, y.get(), nullptr);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d forward: --conv-engine cudnn: the library engines"), std::string::npos)
        << e.what();
  }
  libs::set_engine_config(saved);
}

}  // namespace
}  // namespace dpcore::testing
