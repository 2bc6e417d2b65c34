// What must hold on every machine, GPU or not (these run in CI): the CUDA backend is
// registered, counts devices without throwing or printing (0 without a GPU, whatever the
// driver says), and the engine flags parse or fail naming the flag.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "engine/backend.h"
#include "engine/runtime.h"
#include "kernels/cuda_libraries/engine_config.h"
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

TEST(EngineSelect, ConfigRoundTripsAndDefaultsToDeterministicLibraries) {
  const kernels::cuda_libraries::EngineConfig saved = kernels::cuda_libraries::engine_config();
  const kernels::cuda_libraries::EngineConfig defaults;
  EXPECT_EQ(defaults.conv, kernels::cuda_libraries::ConvEngine::Cudnn);
  EXPECT_EQ(defaults.gemm, kernels::cuda_libraries::GemmEngine::Cublas);
  EXPECT_FALSE(defaults.tf32);
  kernels::cuda_libraries::set_engine_config(kernels::cuda_libraries::EngineConfig{kernels::cuda_libraries::ConvEngine::Auto, kernels::cuda_libraries::GemmEngine::Hand, true});
  EXPECT_EQ(kernels::cuda_libraries::engine_config().conv, kernels::cuda_libraries::ConvEngine::Auto);
  EXPECT_EQ(kernels::cuda_libraries::engine_config().gemm, kernels::cuda_libraries::GemmEngine::Hand);
  EXPECT_TRUE(kernels::cuda_libraries::engine_config().tf32);
  kernels::cuda_libraries::set_engine_config(saved);
}

}  // namespace
}  // namespace dpcore::testing
