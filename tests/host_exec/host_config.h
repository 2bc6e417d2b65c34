// Settings of the host execution layer that tests may change.
#pragma once

namespace host_exec {

// The SM count the kernels plan their grids with (kernels/cuda/gemm_plan.h): the H200's
// 132 unless DPCORE_HOST_SMS says otherwise. With 1, every GEMM-shaped kernel whose output
// has a 128 x 128 tile takes the large tiles and none splits K; with 132, small outputs
// split K as on the GPU. ctest runs the host tests with both.
int multiprocessors();

}  // namespace host_exec
