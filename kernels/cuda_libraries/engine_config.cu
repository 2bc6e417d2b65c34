#include "kernels/cuda_libraries/engine_config.h"

#include <mutex>

#include "kernels/error.h"
#include "kernels/cuda_libraries/library_engines.h"

namespace dpcore::kernels::cuda_libraries {

namespace {

std::mutex config_mutex;
// Made on first use: its defaults ask library_engines_in_build().
EngineConfig& current_config() {
  static EngineConfig config;
  return config;
}

}  // namespace

ConvEngine default_conv_engine() { return library_engines_in_build() ? ConvEngine::Cudnn : ConvEngine::Hand; }
GemmEngine default_gemm_engine() { return library_engines_in_build() ? GemmEngine::Cublas : GemmEngine::Hand; }

void set_engine_config(const EngineConfig& config) {
  std::lock_guard<std::mutex> lock(config_mutex);
  current_config() = config;
}

EngineConfig engine_config() {
  std::lock_guard<std::mutex> lock(config_mutex);
  return current_config();
}

ConvEngine parse_conv_engine(const std::string& value, const std::string& flag) {
  if (value == "hand") return ConvEngine::Hand;
  if (value == "cudnn") return ConvEngine::Cudnn;
  if (value == "auto") return ConvEngine::Auto;
  fail(flag, ": unknown convolution engine '", value, "' (expected hand, cudnn or auto)");
}

GemmEngine parse_gemm_engine(const std::string& value, const std::string& flag) {
  if (value == "hand") return GemmEngine::Hand;
  if (value == "cublas") return GemmEngine::Cublas;
  if (value == "auto") return GemmEngine::Auto;
  fail(flag, ": unknown GEMM engine '", value, "' (expected hand, cublas or auto)");
}

const char* engine_name(ConvEngine engine) {
  switch (engine) {
    case ConvEngine::Hand: return "hand";
    case ConvEngine::Cudnn: return "cudnn";
    case ConvEngine::Auto: return "auto";
  }
  return "?";
}

const char* engine_name(GemmEngine engine) {
  switch (engine) {
    case GemmEngine::Hand: return "hand";
    case GemmEngine::Cublas: return "cublas";
    case GemmEngine::Auto: return "auto";
  }
  return "?";
}

}  // namespace dpcore::kernels::cuda_libraries
