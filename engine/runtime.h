// Facts about the machine the engine runs on, asked through the registered backends so
// that callers never need to know whether CUDA was compiled in.
#pragma once

#include <cstddef>
#include <string>

#include "engine/device.h"
#include "engine/storage.h"

namespace dpcore::runtime {

// CUDA devices usable now: 0 when CUDA is not compiled in, or there is no GPU or driver.
int cuda_device_count();
// "cuda:0" when a GPU is usable, else "cpu".
Device best_device();
// Waits for all queued work on the device.
void synchronize(Device device);
// Waits for the work the calling thread queued on its current stream of the device
// (Backend::synchronize_stream).
void synchronize_stream(Device device);
// The allocator new tensors on `device` take their storage from: the backend's own unless
// one was plugged in with set_allocator.
Allocator& allocator_for(Device device);
// Plugs in an allocator for a device (null restores the backend's own). It must outlive
// every tensor allocated through it. Not for use while other threads allocate.
void set_allocator(Device device, Allocator* allocator);
// Allocator statistics for a device.
size_t bytes_in_use(Device device);
size_t peak_bytes(Device device);
void reset_peak_bytes(Device device);

}  // namespace dpcore::runtime

namespace dpcore::runtime {
// For programs (the CLI, the benchmarks), called first thing in main: when OpenBLAS fell
// back to its generic kernels on a CPU that supports faster ones (kernels/cpu/blas_core.h)
// and OPENBLAS_CORETYPE is unset, runs the program again from the start (execv of
// /proc/self/exe with the same arguments) with OPENBLAS_CORETYPE naming the faster
// kernels, since OpenBLAS reads it only when it loads. Returns when nothing needs doing
// (or the exec failed: the program then goes on with the generic kernels).
void use_native_blas_kernels(char** argv);
// "OpenBLAS SkylakeX": for run headers and benchmark reports.
std::string blas_description();
// Threads for the CPU kernels (OpenMP and OpenBLAS); 0 keeps the libraries' defaults.
void set_cpu_threads(int threads);
int cpu_threads();
}  // namespace dpcore::runtime
