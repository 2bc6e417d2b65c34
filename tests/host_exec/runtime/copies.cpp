// Copies and memsets, queued on a stream and run by its worker, with the host-side
// synchronisation CUDA documents ("API synchronization behavior"):
//   * out of pageable host memory: the source is staged (copied) before the call returns,
//     the copy into the destination runs in stream order; the caller may reuse the source
//     at once;
//   * into pageable host memory, and host to host: the call returns once the copy is done;
//   * cudaMemcpy otherwise returns once done, except device to device (no wait);
//     cudaMemcpyAsync otherwise returns at once;
//   * cudaMemset of device memory is asynchronous, of pinned memory synchronous.
// A direction that contradicts the addresses (cudaMemcpyHostToDevice from device memory),
// and a range that runs past the end of an allocation, fail with cudaErrorInvalidValue.
// Copies between devices need no peer access (the driver stages them), as in CUDA.
#include <cstring>
#include <memory>
#include <vector>

#include "host_exec/runtime/runtime.h"

namespace host_runtime {
namespace {

bool fits(const Region& r, const void* ptr, size_t bytes) {
  return r.memory == Memory::Pageable || static_cast<const char*>(ptr) + bytes <= r.base + r.bytes;
}

cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, Region& to, Region& from) {
  if (bytes == 0) return cudaSuccess;  // nothing to copy: its addresses may be anything (copy() does nothing)
  to = region_of(dst);
  from = region_of(src);
  const bool to_device = to.memory == Memory::Device, from_device = from.memory == Memory::Device;
  bool direction_ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost: direction_ok = !from_device && !to_device; break;
    case cudaMemcpyHostToDevice: direction_ok = !from_device && to_device; break;
    case cudaMemcpyDeviceToHost: direction_ok = from_device && !to_device; break;
    case cudaMemcpyDeviceToDevice: direction_ok = from_device && to_device; break;
    case cudaMemcpyDefault: break;
    default: return cudaErrorInvalidValue;
  }
  if (!direction_ok || !fits(to, dst, bytes) || !fits(from, src, bytes)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// Queues the copy on `s`; waits for it when the rules above say the host does.
cudaError_t copy(void* dst, const void* src, size_t bytes, const Region& to, const Region& from,
                 const std::shared_ptr<Stream>& s, bool synchronous_call) {
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t error = device_error(s->device())) return record_error(error);
  const bool to_pageable = to.memory == Memory::Pageable, from_pageable = from.memory == Memory::Pageable;
  const bool host_to_host = to.memory != Memory::Device && from.memory != Memory::Device;
  const bool device_to_device = to.memory == Memory::Device && from.memory == Memory::Device;
  const bool stages = from_pageable && !host_to_host;
  const bool waits = host_to_host || (to_pageable && !from_pageable) ||
                     (synchronous_call && !device_to_device && !from_pageable);
  // A graph could neither stage the source when replayed nor have the host wait for it.
  if (stages || waits)
    if (const cudaError_t error = refuse_if_capturing(*s)) return error;
  if (synchronous_call && !device_to_device)
    if (const cudaError_t error = check_unsafe_call()) return error;
  Point done;
  cudaError_t queued;
  if (stages) {
    std::shared_ptr<std::vector<char>> staged;
    {
      Visible read;  // the caller's read of its source, as the driver's staging copy is
      staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    }
    queued = submit(s, "a copy out of pageable host memory",
                    [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); }, &done);
  } else {
    queued = submit(s, "cudaMemcpy", [dst, src, bytes] { std::memcpy(dst, src, bytes); }, &done);
  }
  if (queued) return queued;
  if (waits) {
    done.wait();
    return record_error(device_error(s->device()));
  }
  return cudaSuccess;
}

cudaError_t memset_on(void* ptr, int value, size_t bytes, const std::shared_ptr<Stream>& s, bool synchronous_call) {
  if (bytes == 0) return cudaSuccess;
  const Region r = region_of(ptr);
  if (r.memory == Memory::Pageable || !fits(r, ptr, bytes)) return record_error(cudaErrorInvalidValue);
  if (const cudaError_t error = device_error(s->device())) return record_error(error);
  const bool waits = r.memory == Memory::Pinned;
  if (waits) {
    if (const cudaError_t error = refuse_if_capturing(*s)) return error;
    if (synchronous_call)
      if (const cudaError_t error = check_unsafe_call()) return error;
  }
  Point done;
  if (const cudaError_t error = submit(s, "cudaMemset", [ptr, value, bytes] { std::memset(ptr, value, bytes); }, &done))
    return error;
  if (waits) done.wait();
  return cudaSuccess;
}

}  // namespace
}  // namespace host_runtime

using host_runtime::record_error;
using host_runtime::Region;

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  host_runtime::Bookkeeping hide;
  Region to, from;
  if (const cudaError_t error = host_runtime::check_copy(dst, src, bytes, kind, to, from)) return record_error(error);
  return host_runtime::copy(dst, src, bytes, to, from, host_runtime::stream_for(nullptr), true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  Region to, from;
  if (const cudaError_t error = host_runtime::check_copy(dst, src, bytes, kind, to, from)) return record_error(error);
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  return host_runtime::copy(dst, src, bytes, to, from, s, false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  Region to, from;
  if (const cudaError_t error = host_runtime::check_copy(dst, src, bytes, cudaMemcpyDeviceToDevice, to, from))
    return record_error(error);
  if (to.device != dst_device || from.device != src_device) return record_error(cudaErrorInvalidValue);
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  return host_runtime::copy(dst, src, bytes, to, from, s, false);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  host_runtime::Bookkeeping hide;
  return host_runtime::memset_on(ptr, value, bytes, host_runtime::stream_for(nullptr), true);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  return host_runtime::memset_on(ptr, value, bytes, s, false);
}
