#include "kernels/cpu/blas_core.h"

#include <cblas.h>

#include <cstdlib>

namespace dpcore::kernels::cpu {

std::string blas_core() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string better_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";  // the user's choice (tests set it on purpose)
  const std::string core = blas_core();
  if (core != "Prescott") return "";
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

}  // namespace dpcore::kernels::cpu
