// Device-side times of trace spans on a GPU (engine/trace.h's DeviceTimer), compiled with
// the CUDA backend.
//
// A mark is a CUDA event recorded on the calling thread's current stream of the device it
// works on (kernels/cuda_runtime: the device of its last op). Its host time comes from a
// reference: at the first mark on a device after trace::start(), an event is recorded on
// an idle stream of that device between two reads of the host clock and waited for, three
// times; the reference is the middle of the shortest try, off by at most half of it (the
// microseconds a device takes to reach an event on an idle stream). A mark's host time is
// the reference's plus cudaEventElapsedTime from the reference to the mark (resolution
// about half a microsecond, in float milliseconds: about a microsecond 10 s after the
// reference, far longer than a window of steps).
//
// Events are kept for the process and reused after each restart(); marks are taken under a
// mutex, which the replica threads share only while a trace records.
#include <cuda_runtime_api.h>

#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/trace.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_runtime/stream.h"

namespace dpcore {
namespace {

namespace cuda_runtime = kernels::cuda_runtime;

class CudaSpanTimer : public trace::DeviceTimer {
 public:
  void restart() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Mark& m : marks_) spare_[m.device].push_back(m.event);
    marks_.clear();
    for (auto& [device, reference] : references_) reference.taken = false;
    ++generation_;
  }

  int64_t mark() override {
    const int device = cuda_runtime::thread_device();
    if (device < 0) return -1;
    cudaStream_t stream = cuda_runtime::current_stream(device);
    if (cuda_runtime::is_capturing(stream)) return -1;  // recorded into a graph, not run now
    std::lock_guard<std::mutex> lock(mutex_);
    cuda_runtime::set_device(device);
    take_reference(device);
    cudaEvent_t event = spare_event(device);
    CUDA_CHECK(cudaEventRecord(event, stream));
    marks_.push_back({event, device, stream_name(device, stream)});
    return (generation_ << 32) | int64_t(marks_.size() - 1);
  }

  bool reached(int64_t id, Reached& out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t index = size_t(id & 0xffffffff);
    if ((id >> 32) != generation_ || index >= marks_.size()) return false;
    const Mark& m = marks_[index];
    const Reference& reference = references_.at(m.device);
    CUDA_CHECK(cudaEventSynchronize(m.event));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, reference.event, m.event));
    out.stream = m.stream;
    out.ns = reference.host_ns + int64_t(double(ms) * 1e6);
    out.uncertainty_ns = reference.uncertainty_ns;
    return true;
  }

 private:
  struct Mark {
    cudaEvent_t event;
    int device;
    std::string stream;
  };
  struct Reference {
    bool taken = false;
    cudaStream_t stream = nullptr;  // idle: nothing but the reference runs on it
    cudaEvent_t tries[3] = {};
    cudaEvent_t event = nullptr;    // the try kept
    int64_t host_ns = 0;
    int64_t uncertainty_ns = 0;     // half the kept try: the event ran somewhere inside it
  };

  void take_reference(int device) {
    Reference& r = references_[device];
    if (r.taken) return;
    if (!r.stream) {
      CUDA_CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
      for (cudaEvent_t& e : r.tries) CUDA_CHECK(cudaEventCreate(&e));
    }
    int64_t shortest = INT64_MAX;
    for (cudaEvent_t e : r.tries) {
      const int64_t before = trace::now_ns();
      CUDA_CHECK(cudaEventRecord(e, r.stream));
      CUDA_CHECK(cudaEventSynchronize(e));
      const int64_t after = trace::now_ns();
      if (after - before < shortest) shortest = after - before, r.event = e, r.host_ns = before + (after - before) / 2;
    }
    // On a loaded machine (or the host execution layer under a sanitizer) even the shortest
    // try can take a few hundred microseconds; the trace says so rather than hide it.
    r.uncertainty_ns = (shortest + 1) / 2;
    r.taken = true;
  }

  cudaEvent_t spare_event(int device) {
    std::vector<cudaEvent_t>& spare = spare_[device];
    if (spare.empty()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));  // with timing: a mark is measured
      return e;
    }
    cudaEvent_t e = spare.back();
    spare.pop_back();
    return e;
  }

  // "cuda:0 stream 14", by the id Nsight Systems shows too; "cuda:0 default stream" for the
  // legacy default stream.
  const std::string& stream_name(int device, cudaStream_t stream) {
    std::string& name = stream_names_[{device, stream}];
    if (name.empty()) {
      unsigned long long id = 0;
      CUDA_CHECK(cudaStreamGetId(stream, &id));
      name = "cuda:" + std::to_string(device) + (stream ? " stream " + std::to_string(id) : " default stream");
    }
    return name;
  }

  std::mutex mutex_;
  int64_t generation_ = 0;  // restarts; a mark's id is its generation and its index
  std::vector<Mark> marks_;
  std::map<int, std::vector<cudaEvent_t>> spare_;
  std::map<int, Reference> references_;
  std::map<std::pair<int, cudaStream_t>, std::string> stream_names_;
};

CudaSpanTimer cuda_span_timer;
const bool installed = (trace::set_device_timer(&cuda_span_timer), true);

}  // namespace
}  // namespace dpcore
