// Which OpenBLAS kernels run the CPU GEMMs, and which the CPU could run.
//
// Debian's OpenBLAS is built for every x86 core (DYNAMIC_ARCH) and picks one when it loads,
// from the CPU's model number, or from the environment variable OPENBLAS_CORETYPE when it
// is set. A hypervisor that hides the model (the CPU reports itself as a plain
// "Intel(R) Xeon(R) Processor") makes it fall back to its generic SSE3 kernels, "Prescott",
// which run the GEMMs 2-3x slower than the AVX-512 or AVX2 kernels the CPU supports.
#pragma once

#include <string>

namespace dpcore::kernels::cpu {

// The kernels OpenBLAS uses in this process, e.g. "SkylakeX", "Haswell", "Prescott".
std::string blas_core();
// The kernels the CPU's instruction set supports ("SkylakeX" with AVX-512 F/BW/DQ/VL,
// "Haswell" with AVX2 and FMA), when OpenBLAS took its generic ones and
// OPENBLAS_CORETYPE was not set by the user; empty otherwise.
std::string better_blas_core();

}  // namespace dpcore::kernels::cpu
