// What must hold on every machine, GPU or not (these run in CI): the CUDA backend is
// registered, counts devices without throwing or printing (0 without a GPU, whatever the
// driver says), and the engine flags parse or fail naming the flag.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "engine/backend.h"
#include "engine/runtime.h"
#include "kernels/cuda/engine_select.h"
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
  EXPECT_EQ(cuda::parse_conv_engine("hand"), cuda::ConvEngine::Hand);
  EXPECT_EQ(cuda::parse_conv_engine("cudnn"), cuda::ConvEngine::Cudnn);
  EXPECT_EQ(cuda::parse_conv_engine("auto"), cuda::ConvEngine::Auto);
  EXPECT_EQ(cuda::parse_gemm_engine("hand"), cuda::GemmEngine::Hand);
  EXPECT_EQ(cuda::parse_gemm_engine("cublas"), cuda::GemmEngine::Cublas);
  EXPECT_EQ(cuda::parse_gemm_engine("auto"), cuda::GemmEngine::Auto);
  for (auto engine : {cuda::ConvEngine::Hand, cuda::ConvEngine::Cudnn, cuda::ConvEngine::Auto})
    EXPECT_EQ(cuda::parse_conv_engine(cuda::engine_name(engine)), engine);
  for (auto engine : {cuda::GemmEngine::Hand, cuda::GemmEngine::Cublas, cuda::GemmEngine::Auto})
    EXPECT_EQ(cuda::parse_gemm_engine(cuda::engine_name(engine)), engine);
}

TEST(EngineSelect, BadNamesFailNamingTheFlag) {
  try {
    cuda::parse_conv_engine("cuDNN", "--conv-engine");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--conv-engine: unknown convolution engine 'cuDNN' (expected hand, cudnn or auto)");
  }
  try {
    cuda::parse_gemm_engine("", "--gemm-engine");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--gemm-engine: unknown GEMM engine '' (expected hand, cublas or auto)");
  }
}

TEST(EngineSelect, ConfigRoundTripsAndDefaultsToDeterministicLibraries) {
  const cuda::EngineConfig saved = cuda::engine_config();
  const cuda::EngineConfig defaults;
  EXPECT_EQ(defaults.conv, cuda::ConvEngine::Cudnn);
  EXPECT_EQ(defaults.gemm, cuda::GemmEngine::Cublas);
  EXPECT_FALSE(defaults.tf32);
  cuda::set_engine_config(cuda::EngineConfig{cuda::ConvEngine::Auto, cuda::GemmEngine::Hand, true});
  EXPECT_EQ(cuda::engine_config().conv, cuda::ConvEngine::Auto);
  EXPECT_EQ(cuda::engine_config().gemm, cuda::GemmEngine::Hand);
  EXPECT_TRUE(cuda::engine_config().tf32);
  cuda::set_engine_config(saved);
}

}  // namespace
}  // namespace dpcore::testing
