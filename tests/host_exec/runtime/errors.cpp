// Error names and strings (CUDA's wording), and the calling thread's last error.
#include <string>

#include "host_exec/runtime/runtime.h"

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorPeerAccessNotEnabled: return "cudaErrorPeerAccessNotEnabled";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureMerge: return "cudaErrorStreamCaptureMerge";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
  }
  return "unknown cudaError_t";
}

namespace {

const char* cuda_wording(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorPeerAccessNotEnabled: return "peer access has not been enabled";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
  }
  return "unknown error";
}

}  // namespace

// CUDA's wording; for the current device's sticky error, followed by what the host runtime
// knows of its cause (the kernel, block and thread, or the collective), which a GPU cannot
// say: every error check of the library (kernels/cuda_runtime/check.cu) then reports it.
const char* cudaGetErrorString(cudaError_t error) {
  host_runtime::Bookkeeping hide;
  const int device = host_runtime::current_device();
  if (error == cudaSuccess || host_runtime::device_error(device) != error) return cuda_wording(error);
  thread_local std::string text;
  text = std::string(cuda_wording(error)) + " (" + host_runtime::device_error_detail(device) + ")";
  return text.c_str();
}

namespace host_runtime {
namespace {
thread_local cudaError_t last_error = cudaSuccess;
}

cudaError_t record_error(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

}  // namespace host_runtime

cudaError_t cudaGetLastError() {
  host_runtime::Bookkeeping hide;
  const cudaError_t sticky = host_runtime::device_error(host_runtime::current_device());
  const cudaError_t error = host_runtime::last_error;
  host_runtime::last_error = cudaSuccess;
  return sticky != cudaSuccess ? sticky : error;
}

cudaError_t cudaPeekAtLastError() {
  host_runtime::Bookkeeping hide;
  const cudaError_t sticky = host_runtime::device_error(host_runtime::current_device());
  return sticky != cudaSuccess ? sticky : host_runtime::last_error;
}
