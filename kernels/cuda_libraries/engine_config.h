// Which implementation runs each conv2d and linear op on CUDA, settable at run time (the
// CLI's --conv-engine, --gemm-engine and --tf32 flags call set_engine_config).
//
//   hand    the kernels of this folder (always FP32, whatever tf32 says)
//   cudnn / cublas  the NVIDIA libraries, FP32 unless tf32 is on
//   auto    times both once per op and shape (CUDA events, after a warm-up run) and keeps
//           the faster one. Timing noise can pick differently on another run, and the two
//           engines round differently: use a fixed engine for bit-reproducible runs.
//
// The defaults are the libraries in FP32: deterministic (only deterministic cuDNN
// algorithms are used) and fast. tf32 = true lets cuDNN and cuBLAS use TF32 tensor cores
// (10-bit mantissa inputs; expect relative errors around 1e-3 instead of 1e-6). A build
// without the libraries (DPCORE_CUDA=HOST: the host CUDA runtime) defaults to the hand
// kernels, and a library engine fails when an op would run on it (dispatch.cu).
#pragma once

#include <string>

namespace dpcore::kernels::cuda_libraries {

enum class ConvEngine { Hand, Cudnn, Auto };
enum class GemmEngine { Hand, Cublas, Auto };

// The libraries where the build has them (library_engines.h), else the hand kernels.
ConvEngine default_conv_engine();
GemmEngine default_gemm_engine();

struct EngineConfig {
  ConvEngine conv = default_conv_engine();
  GemmEngine gemm = default_gemm_engine();
  bool tf32 = false;
};

void set_engine_config(const EngineConfig& config);
EngineConfig engine_config();

// "hand", "cudnn" or "auto" (conv); "hand", "cublas" or "auto" (gemm). Anything else fails
// with a message naming `flag` and the accepted values.
ConvEngine parse_conv_engine(const std::string& value, const std::string& flag = "--conv-engine");
GemmEngine parse_gemm_engine(const std::string& value, const std::string& flag = "--gemm-engine");

const char* engine_name(ConvEngine engine);
const char* engine_name(GemmEngine engine);

}  // namespace dpcore::kernels::cuda_libraries
