// Events: a record is a task on its stream that notes the time it ran; the event then
// stands for the point after that task. Waiting for an event (on the host or from another
// stream) waits for its latest record at the time of the call, as in CUDA; an event never
// recorded counts as complete.
#include <chrono>
#include <map>

#include "host_exec/runtime/runtime.h"

struct CUevent_st {
  unsigned flags = 0;
  std::mutex mutex;
  host_runtime::Point point;  // null stream: never recorded (or last recorded in a capture)
  host_runtime::CapturedPoint captured;  // its last record, when that was in a capture
  // When the record ran, for cudaEventElapsedTime; written by the recording task.
  std::shared_ptr<std::chrono::steady_clock::time_point> time;
};

namespace host_runtime {
namespace {

std::mutex events_mutex;
std::map<const void*, std::unique_ptr<CUevent_st>>& events() {
  static auto* table = new std::map<const void*, std::unique_ptr<CUevent_st>>;
  return *table;
}
CUevent_st* live(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(events_mutex);
  return events().count(event) ? event : nullptr;
}
Point latest(CUevent_st* e) {
  std::lock_guard<std::mutex> lock(e->mutex);
  return e->point;
}
CapturedPoint captured(CUevent_st* e) {
  std::lock_guard<std::mutex> lock(e->mutex);
  return e->captured;
}
std::shared_ptr<std::chrono::steady_clock::time_point> time_of(CUevent_st* e) {
  std::lock_guard<std::mutex> lock(e->mutex);
  return e->time;
}

}  // namespace
}  // namespace host_runtime

using host_runtime::record_error;

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  host_runtime::Bookkeeping hide;
  if (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming)) return record_error(cudaErrorInvalidValue);
  auto e = std::make_unique<CUevent_st>();
  e->flags = flags;
  *event = e.get();
  std::lock_guard<std::mutex> lock(host_runtime::events_mutex);
  host_runtime::events()[e.get()] = std::move(e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  host_runtime::Bookkeeping hide; return cudaEventCreateWithFlags(event, cudaEventDefault); }

// Returns at once; records in flight still complete (their tasks own what they write).
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  host_runtime::Bookkeeping hide;
  std::lock_guard<std::mutex> lock(host_runtime::events_mutex);
  return host_runtime::events().erase(event) ? cudaSuccess : record_error(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  CUevent_st* e = host_runtime::live(event);
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!e || !s) return record_error(cudaErrorInvalidResourceHandle);
  // CUDA: the event and the stream must belong to the same device, the current one.
  if (s->device() != host_runtime::current_device()) return record_error(cudaErrorInvalidResourceHandle);
  host_runtime::CapturedPoint in_capture;
  cudaError_t error = cudaSuccess;
  if (host_runtime::record_in_capture(*s, &in_capture, &error)) {
    if (error) return error;
    std::lock_guard<std::mutex> lock(e->mutex);
    e->point = host_runtime::Point{};
    e->captured = std::move(in_capture);
    e->time = nullptr;
    return cudaSuccess;
  }
  auto time = std::make_shared<std::chrono::steady_clock::time_point>();
  host_runtime::Point point;
  error = host_runtime::submit(s, "cudaEventRecord", [time] { *time = std::chrono::steady_clock::now(); }, &point);
  if (error) return error;
  std::lock_guard<std::mutex> lock(e->mutex);
  e->point = point;
  e->captured = host_runtime::CapturedPoint{};
  e->time = std::move(time);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  host_runtime::Bookkeeping hide;
  CUevent_st* e = host_runtime::live(event);
  if (!e) return record_error(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = host_runtime::refuse_captured_event(host_runtime::captured(e))) return error;
  const host_runtime::Point point = host_runtime::latest(e);
  return point.reached() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  host_runtime::Bookkeeping hide;
  CUevent_st* e = host_runtime::live(event);
  if (!e) return record_error(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = host_runtime::refuse_captured_event(host_runtime::captured(e))) return error;
  const host_runtime::Point point = host_runtime::latest(e);
  point.wait();
  return point.stream ? record_error(host_runtime::device_error(point.stream->device())) : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  host_runtime::Bookkeeping hide;
  CUevent_st* a = host_runtime::live(start);
  CUevent_st* b = host_runtime::live(end);
  if (!a || !b) return record_error(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return record_error(cudaErrorInvalidResourceHandle);
  for (CUevent_st* e : {a, b})
    if (const cudaError_t error = host_runtime::refuse_captured_event(host_runtime::captured(e))) return error;
  const host_runtime::Point pa = host_runtime::latest(a), pb = host_runtime::latest(b);
  if (!pa.stream || !pb.stream) return record_error(cudaErrorInvalidResourceHandle);  // never recorded
  if (!pa.reached() || !pb.reached()) return record_error(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(*host_runtime::time_of(b) - *host_runtime::time_of(a)).count();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  host_runtime::Bookkeeping hide;
  CUevent_st* e = host_runtime::live(event);
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!e || !s) return record_error(cudaErrorInvalidResourceHandle);
  if (flags != 0) return record_error(cudaErrorInvalidValue);
  const host_runtime::Point point = host_runtime::latest(e);
  cudaError_t error = cudaSuccess;
  if (host_runtime::wait_in_capture(s, host_runtime::captured(e), point.stream != nullptr, &error)) return error;
  return host_runtime::submit(s, "cudaStreamWaitEvent", [] {}, nullptr, {point});
}
