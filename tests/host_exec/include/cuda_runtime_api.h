// The host execution layer's <cuda_runtime_api.h>: the part of the CUDA runtime API that
// dpcore calls, implemented on host threads and host memory by tests/host_exec/runtime
// with CUDA's documented semantics (the host build puts this folder first on the include
// path instead of /usr/local/cuda/include, so the same sources compile unchanged):
//   * several devices (kDevices), the current one per host thread (cudaSetDevice);
//   * streams are ordered queues, each run by a worker thread of its own, so work on two
//     streams really runs concurrently and only events (or the legacy default stream's
//     rules) order it: a missing cudaStreamWaitEvent is a data race ThreadSanitizer sees;
//   * device memory is host memory that AddressSanitizer watches, filled with NaN (every
//     bit set) when allocated and again when freed;
//   * kernels and copies run asynchronously; a kernel that fails (a deadlock, a bad pointer)
//     leaves a sticky error on its device that every later call returns, as on a GPU.
// The values of the enums are CUDA's own.
#pragma once

#include <cstddef>

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaErrorPeerAccessNotEnabled = 705,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureMerge = 902,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorCapturedEvent = 907,
  cudaErrorStreamCaptureWrongThread = 908,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
};

enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
struct CUgraph_st;
using cudaGraph_t = CUgraph_st*;
struct CUgraphNode_st;
using cudaGraphNode_t = CUgraphNode_st*;
struct CUgraphExec_st;
using cudaGraphExec_t = CUgraphExec_st*;

// The legacy default stream, by its handle (0 means the same: the build does not use
// per-thread default streams).
#define cudaStreamLegacy (reinterpret_cast<cudaStream_t>(0x1))
constexpr unsigned cudaStreamDefault = 0x0;      // synchronises with the legacy stream
constexpr unsigned cudaStreamNonBlocking = 0x1;  // does not
constexpr unsigned cudaEventDefault = 0x0;
constexpr unsigned cudaEventBlockingSync = 0x1;
constexpr unsigned cudaEventDisableTiming = 0x2;
constexpr unsigned cudaHostAllocDefault = 0x0;
constexpr unsigned cudaHostAllocPortable = 0x1;
constexpr unsigned cudaHostAllocMapped = 0x2;
constexpr unsigned cudaHostAllocWriteCombined = 0x4;

// Launch shapes and the vector types the kernels load and store with.
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
// 16-byte aligned like CUDA's: a float4 access at an address that is not is undefined
// behaviour here too, which UndefinedBehaviorSanitizer reports (on a GPU: a misaligned
// address fault).
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

// ---- errors (runtime/errors.cpp) ----
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
// The last error of the calling thread, cleared by the call, or its device's sticky error
// (never cleared: only cudaDeviceReset clears it).
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

// ---- devices (runtime/devices.cpp) ----
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);
cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device);
// Lets kernels of the current device read and write peer_device's memory.
cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned flags);
// Waits for all work of the current device; returns its sticky error, if any.
cudaError_t cudaDeviceSynchronize();
// Waits for the device's work, then frees its memory and clears its sticky error.
cudaError_t cudaDeviceReset();

// ---- streams (runtime/streams.cpp) ----
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
// Returns at once; the stream's queued work still runs, then its resources go.
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);  // cudaSuccess when idle, else cudaErrorNotReady
cudaError_t cudaStreamGetId(cudaStream_t stream, unsigned long long* id);
// Work queued on `stream` from now on waits for the event's latest record.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

// ---- events (runtime/events.cpp) ----
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// ---- memory (runtime/memory.cpp, runtime/copies.cpp) ----
// 256-byte aligned, like cudaMalloc.
cudaError_t cudaMalloc(void** ptr, size_t bytes);
// Waits for the device to finish its work first, as CUDA's does.
cudaError_t cudaFree(void* ptr);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);
// CUDA's synchronisation rules (runtime/copies.cpp): a copy into pageable host memory
// returns once done; out of pageable memory, once the source has been staged.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream = nullptr);

// ---- graph capture (runtime/graphs.cpp) ----
// While a stream captures, the work queued on it (launches, async copies, memsets) and on
// the streams it forks into through events is recorded into a graph instead of run. What
// CUDA forbids during a capture fails with CUDA's error and invalidates the capture:
// synchronising with a capturing stream or a captured event, calls CUDA deems
// "potentially unsafe" (cudaMalloc, cudaFree, cudaHostAlloc, synchronous copies and
// memsets, cudaDeviceSynchronize) from a thread the capture modes prohibit them in, the
// legacy stream while a blocking stream of its device captures, waiting on an event
// recorded outside the capture. cudaStreamEndCapture then returns
// cudaErrorStreamCaptureInvalidated.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
// Swaps the calling thread's capture interaction mode (cudaStreamCaptureModeGlobal at first).
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode);
// The graph's nodes (the recorded launches, copies and memsets); `nodes` may be null.
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
// Queues the graph's nodes, in the order they were recorded, on `stream`.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
