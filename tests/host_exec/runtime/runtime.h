// The inside of the host CUDA runtime (include/cuda_runtime_api.h): devices, streams and
// their worker threads, and the table of allocations, shared by the files of this folder
// and by host_exec.h's kernel launch. Not part of the CUDA API.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime_api.h"
#include "host_exec/runtime/bookkeeping.h"

namespace host_runtime {

constexpr int kDevices = 4;  // enough for the 4-replica runs; each is the host

// ---- devices (devices.cpp) ----
// The calling thread's current device (cudaSetDevice), 0 until it sets one.
int current_device();
bool peer_access(int device, int peer);
// The sticky error a failed kernel or copy leaves on its device: every later call that
// reports device errors returns it, with `detail` (what failed, where) for the message.
void fail_device(int device, cudaError_t error, const std::string& detail);
cudaError_t device_error(int device);
std::string device_error_detail(int device);
void clear_device_error(int device);
// Records `error` as the calling thread's last error (cudaGetLastError) and returns it.
cudaError_t record_error(cudaError_t error);

// ---- streams (streams.cpp) ----
class Stream;
// "After the first `count` tasks of `stream` have completed": what an event records and
// what a task may wait for.
struct Point {
  std::shared_ptr<Stream> stream;
  uint64_t count = 0;
  // Both order the caller after the work before the point when it has run (bookkeeping.h).
  bool reached() const;
  void wait() const;  // blocks the calling thread until reached()
};

// An ordered queue of tasks on one device, run by its own worker thread (started with the
// first task). Tasks run one at a time in order, each after the points it waits for; a
// task that throws fails its device (fail_device) and the device's later tasks are
// skipped, as a GPU stops at a fault.
class Stream : public std::enable_shared_from_this<Stream> {
 public:
  enum class Kind { Legacy, Blocking, NonBlocking };
  Stream(int device, Kind kind, unsigned long long id);
  int device() const { return device_; }
  Kind kind() const { return kind_; }
  unsigned long long id() const { return id_; }

  // Queues `work` (named `what` in errors) after `after` and, by the legacy stream's rules,
  // after the device's earlier legacy work (Blocking) or all its earlier blocking streams'
  // work (Legacy). Returns the point just after it.
  Point enqueue(const char* what, std::function<void()> work, std::vector<Point> after = {});
  Point last();  // the point after everything queued so far
  void close();  // no more tasks; the worker ends once the queue is empty

 private:
  friend struct Point;
  void run();
  const int device_;
  const Kind kind_;
  const unsigned long long id_;
  std::mutex mutex_;
  std::condition_variable changed_;
  struct Task {
    const char* what;
    std::function<void()> work;
    std::vector<Point> after;
  };
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0, completed_ = 0;
  // ThreadSanitizer's objects for the enqueue and completion edges of task n (bookkeeping.h),
  // in rings: a slot is reused after kTokens tasks, which can only add orderings a waiter
  // 4096 tasks late would otherwise lack, never remove one.
  static constexpr uint64_t kTokens = 4096;
  std::unique_ptr<char[]> enqueue_tokens_{new char[kTokens]}, done_tokens_{new char[kTokens]};
  const void* enqueue_token(uint64_t n) const { return &enqueue_tokens_[n % kTokens]; }
  const void* done_token(uint64_t n) const { return &done_tokens_[n % kTokens]; }
  bool worker_started_ = false, closed_ = false;
};

// The stream a handle names: 0 and cudaStreamLegacy are the current device's legacy
// stream. Null for a handle that is not a live stream.
std::shared_ptr<Stream> stream_for(cudaStream_t handle);
// Every live stream of a device (the legacy one included), for device-wide waits.
std::vector<std::shared_ptr<Stream>> streams_of(int device);
// Blocks until everything queued on the device so far has run.
void drain(int device);

// ---- graph capture (graphs.cpp) ----
struct Capture;
// Where an event recorded during a capture stands: after these nodes of that capture.
struct CapturedPoint {
  std::shared_ptr<Capture> capture;  // null: not recorded in a capture
  std::vector<size_t> nodes;
};
// Queues `work` on `s` (*done: the point after it), or, while `s` captures, records it
// as a node of the capture instead (*done: a null point). Fails with the capture error,
// invalidating the capture, for the legacy stream while a blocking stream of its device
// captures (cudaErrorStreamCaptureImplicit); with cudaErrorStreamCaptureInvalidated on a
// stream whose capture is invalidated.
cudaError_t submit(const std::shared_ptr<Stream>& s, const char* what, std::function<void()> work,
                   Point* done = nullptr, std::vector<Point> after = {});
bool capturing(const Stream& s);
// For a call that must not happen while `s` captures (a synchronisation, a copy that
// stages or waits): cudaErrorStreamCaptureUnsupported, and the capture invalidated.
cudaError_t refuse_if_capturing(const Stream& s);
// For a call CUDA deems potentially unsafe during capture (cudaMalloc, cudaFree, cudaHostAlloc,
// a synchronous copy, cudaDeviceSynchronize): cudaErrorStreamCaptureUnsupported when the
// calling thread's capture mode and the captures going on prohibit it (CUDA's rules, at
// cudaThreadExchangeStreamCaptureMode), invalidating those captures. `device` >= 0 also
// refuses the call while any stream of that device captures (it synchronises with all).
cudaError_t check_unsafe_call(int device = -1);
// cudaEventRecord on a capturing `s`: *point = where its capture stands; returns false
// when `s` is not capturing. cudaErrorStreamCaptureInvalidated in *error when its capture is.
bool record_in_capture(const Stream& s, CapturedPoint* point, cudaError_t* error);
// cudaStreamWaitEvent in capture terms; returns false when no capture is involved (an
// ordinary wait): a capturing stream waiting for an event of its capture depends on its
// nodes; a stream that is not capturing joins the event's capture (a fork); waiting for
// an event of another capture (cudaErrorStreamCaptureMerge) or recorded outside any
// (cudaErrorStreamCaptureIsolation) fails and invalidates.
bool wait_in_capture(const std::shared_ptr<Stream>& s, const CapturedPoint& event_point, bool recorded_outside,
                     cudaError_t* error);
// Whether a captured event's capture is still going on (its record then stands for no
// work that can be waited for on the host: cudaErrorCapturedEvent, and it is invalidated).
cudaError_t refuse_captured_event(const CapturedPoint& event_point);

// ---- memory (memory.cpp) ----
enum class Memory { Pageable, Pinned, Device };
struct Region {
  Memory memory = Memory::Pageable;  // Pageable: not an allocation of this runtime
  int device = -1;                   // Device memory: its device
  const char* base = nullptr;        // the allocation holding the address, and its size
  size_t bytes = 0;
  unsigned flags = 0;                // cudaHostAlloc's, for pinned memory
};
Region region_of(const void* ptr);

// ---- kernels (launches.cpp): what host_exec::launch queues ----
// Fails the device (cudaErrorIllegalAddress) when an argument of the kernel points into
// another device's memory without peer access, as the GPU would fault on it.
void check_kernel_pointers(const char* kernel, int device, const std::vector<const void*>& pointers);
// Queues (or, while the stream captures, records) a launch on `stream` (checked: a stream
// of the current device). Throws, as the launch itself fails on a GPU, for a bad handle
// or a launch the capture rules refuse (graphs.cpp).
void enqueue_kernel(const char* kernel, cudaStream_t stream, std::vector<const void*> pointers,
                    std::function<void()> run);

}  // namespace host_runtime
