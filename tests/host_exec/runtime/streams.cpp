// Streams: ordered queues of tasks, each run by a worker thread of its own, and the
// legacy default stream's rules (CUDA's "implicit synchronization" of the NULL stream):
// work on the legacy stream waits for all earlier work of the device's blocking streams,
// and work on a blocking stream waits for all earlier legacy work. Non-blocking streams
// (cudaStreamNonBlocking) are ordered with nothing but their own work and the events they
// wait for. A task's completion is published under its stream's mutex and a waiter reads
// it under the same mutex, so ThreadSanitizer sees exactly the orderings CUDA promises:
// two tasks with no event or rule between them are concurrent, and a conflicting access
// between them is reported as a race.
#include <atomic>
#include <map>
#include <thread>

#include "host_exec/runtime/runtime.h"

namespace host_runtime {
namespace {

// Every live stream by handle; the legacy streams are never destroyed. Leaked on purpose:
// worker threads may still be waiting when static destructors run.
struct Registry {
  std::mutex mutex;
  std::map<const void*, std::shared_ptr<Stream>> streams;
  std::shared_ptr<Stream> legacy[kDevices];
  std::atomic<unsigned long long> next_id{1};
};
Registry& registry() {
  static Registry* r = [] {
    auto* made = new Registry;
    for (int d = 0; d < kDevices; ++d)
      made->legacy[d] = std::make_shared<Stream>(d, Stream::Kind::Legacy, made->next_id++);
    return made;
  }();
  return *r;
}

// Enqueues read other streams' counts (the legacy rules), so they are made one at a time:
// two host threads queueing at once are ordered by this lock, as by the driver's.
std::mutex enqueue_mutex;

}  // namespace

bool Point::reached() const {
  if (!stream || count == 0) return true;
  {
    std::lock_guard<std::mutex> lock(stream->mutex_);
    if (stream->completed_ < count) return false;
  }
  acquire_edge(stream->done_token(count));
  return true;
}

void Point::wait() const {
  if (!stream || count == 0) return;
  {
    std::unique_lock<std::mutex> lock(stream->mutex_);
    stream->changed_.wait(lock, [&] { return stream->completed_ >= count; });
  }
  acquire_edge(stream->done_token(count));
}

Stream::Stream(int device, Kind kind, unsigned long long id) : device_(device), kind_(kind), id_(id) {}

Point Stream::last() {
  std::lock_guard<std::mutex> lock(mutex_);
  return Point{shared_from_this(), enqueued_};
}

Point Stream::enqueue(const char* what, std::function<void()> work, std::vector<Point> after) {
  std::lock_guard<std::mutex> order(enqueue_mutex);
  if (kind_ == Kind::Blocking) {
    after.push_back(registry().legacy[device_]->last());
  } else if (kind_ == Kind::Legacy) {
    for (const std::shared_ptr<Stream>& other : streams_of(device_))
      if (other->kind_ == Kind::Blocking) after.push_back(other->last());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  release_edge(enqueue_token(enqueued_ + 1));  // what the caller did before queueing, the task sees
  queue_.push_back(Task{what, std::move(work), std::move(after)});
  ++enqueued_;
  if (!worker_started_) {
    worker_started_ = true;
    Visible start;  // a thread started while ThreadSanitizer is told to ignore sync would not be ordered after its start
    std::thread([self = shared_from_this()] { self->run(); }).detach();
  }
  changed_.notify_all();
  return Point{shared_from_this(), enqueued_};
}

void Stream::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  changed_.notify_all();
}

void Stream::run() {
  Bookkeeping hide;  // all but the work itself and the edges
  cudaSetDevice(device_);  // what the work asks of the runtime is about this stream's device
  for (uint64_t n = 1;; ++n) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) return;  // closed, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    acquire_edge(enqueue_token(n));
    for (const Point& point : task.after) point.wait();
    // After a fault the GPU runs nothing more on the device; the work still "completes",
    // so that waiters wake up and see the error.
    if (device_error(device_) == cudaSuccess) {
      try {
        Visible work;
        task.work();
      } catch (const std::exception& e) {
        fail_device(device_, cudaErrorLaunchFailure, e.what());  // a kernel's error names the kernel
      }
    }
    task = Task{};  // the work's captures go before its completion is published
    release_edge(done_token(n));
    std::lock_guard<std::mutex> lock(mutex_);
    ++completed_;
    changed_.notify_all();
  }
}

std::shared_ptr<Stream> stream_for(cudaStream_t handle) {
  Registry& r = registry();
  if (handle == nullptr || handle == cudaStreamLegacy) return r.legacy[current_device()];
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.streams.find(handle);
  return it == r.streams.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Stream>> streams_of(int device) {
  Registry& r = registry();
  std::vector<std::shared_ptr<Stream>> out{r.legacy[device]};
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& entry : r.streams)
    if (entry.second->device() == device) out.push_back(entry.second);
  return out;
}

void drain(int device) {
  for (const std::shared_ptr<Stream>& s : streams_of(device)) s->last().wait();
}

}  // namespace host_runtime

using host_runtime::record_error;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  host_runtime::Bookkeeping hide;
  if (flags & ~cudaStreamNonBlocking) return record_error(cudaErrorInvalidValue);
  host_runtime::Registry& r = host_runtime::registry();
  auto s = std::make_shared<host_runtime::Stream>(
      host_runtime::current_device(),
      flags & cudaStreamNonBlocking ? host_runtime::Stream::Kind::NonBlocking : host_runtime::Stream::Kind::Blocking,
      r.next_id++);
  *stream = reinterpret_cast<cudaStream_t>(s.get());
  std::lock_guard<std::mutex> lock(r.mutex);
  r.streams[s.get()] = std::move(s);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  host_runtime::Registry& r = host_runtime::registry();
  std::shared_ptr<host_runtime::Stream> s;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.streams.find(stream);
    if (it == r.streams.end()) return record_error(cudaErrorInvalidResourceHandle);
    s = std::move(it->second);
    r.streams.erase(it);
  }
  s->close();  // its worker finishes what is queued, then lets go of it
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = host_runtime::refuse_if_capturing(*s)) return error;
  s->last().wait();
  return record_error(host_runtime::device_error(s->device()));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = host_runtime::refuse_if_capturing(*s)) return error;
  if (const cudaError_t error = host_runtime::device_error(s->device())) return record_error(error);
  return s->last().reached() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetId(cudaStream_t stream, unsigned long long* id) {
  host_runtime::Bookkeeping hide;
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  *id = s->id();
  return cudaSuccess;
}
