// Graph capture and replay ("Stream capture" in CUDA's programming guide). While a stream
// captures, what is queued on it becomes a node of the capture's graph instead of a task;
// each capturing stream keeps the nodes its next node will depend on (its tips). An event
// recorded on a capturing stream stands for the stream's tips; a stream that waits for it
// depends on them, and a stream that was not capturing joins the capture that way (a
// fork), so cudaStreamEndCapture on the stream that began it checks that every node
// leads to its tips (the forks were joined back). The rules CUDA enforces, each with its
// error, and each invalidating the capture (cudaStreamEndCapture then fails with
// cudaErrorStreamCaptureInvalidated, and work queued on its streams meanwhile with it):
//   * synchronising with, or querying, a capturing stream or an event recorded in a
//     capture: cudaErrorStreamCaptureUnsupported, cudaErrorCapturedEvent;
//   * a call CUDA deems potentially unsafe (one that may synchronise: cudaMalloc, cudaFree,
//     cudaHostAlloc, cudaFreeHost, synchronous copies, cudaDeviceSynchronize) from a thread
//     whose capture mode, and the modes of the captures going on, prohibit it:
//     cudaErrorStreamCaptureUnsupported. A thread in mode Relaxed may; in ThreadLocal it
//     may not while it has a capture of its own not begun Relaxed; in Global (the default)
//     neither, nor while another thread has a capture begun Global. A device-wide
//     synchronisation is refused while any stream of the device captures, whatever the mode;
//   * the legacy stream while a blocking stream of its device captures (it would depend
//     on the capture): cudaErrorStreamCaptureImplicit;
//   * waiting, on a capturing stream, for an event recorded outside the capture
//     (cudaErrorStreamCaptureIsolation) or in another one (cudaErrorStreamCaptureMerge).
// cudaGraphLaunch queues the nodes on the launch stream in the order they were recorded,
// which respects every dependency of the graph; branches a fork made concurrent are run
// one after the other (a race between two branches of one graph is not reported).
#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <set>
#include <thread>

#include "host_exec/runtime/runtime.h"

struct CUgraphNode_st {
  const char* what;
  std::function<void()> work;
  int device;
  std::vector<size_t> after;  // the nodes it depends on, all recorded before it
};
struct CUgraph_st {
  std::deque<CUgraphNode_st> nodes;  // a deque: cudaGraphGetNodes hands out their addresses
};
struct CUgraphExec_st {
  std::vector<CUgraphNode_st> nodes;
};

namespace host_runtime {

struct Capture {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;  // the thread that began it
  const Stream* origin = nullptr;
  std::unique_ptr<CUgraph_st> graph = std::make_unique<CUgraph_st>();
  std::map<const Stream*, std::vector<size_t>> tips;  // its streams, and what their next node follows
  bool invalidated = false;
};

namespace {

struct Member {
  std::shared_ptr<Stream> stream;  // kept alive, so that its address names no other stream meanwhile
  std::shared_ptr<Capture> capture;
};
struct Captures {
  std::mutex mutex;
  std::map<const Stream*, Member> members;  // every stream taking part in a capture
  std::set<std::shared_ptr<Capture>> active;
  std::set<const CUgraph_st*> graphs;
  std::set<const CUgraphExec_st*> execs;
};
Captures& captures() {
  static auto* c = new Captures;  // leaked, like the stream registry
  return *c;
}
thread_local cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;

std::shared_ptr<Capture> capture_of(const Stream& s) {
  const auto it = captures().members.find(&s);
  return it == captures().members.end() ? nullptr : it->second.capture;
}

cudaError_t invalidate(const std::shared_ptr<Capture>& c, cudaError_t error) {
  c->invalidated = true;
  return record_error(error);
}

// The capture no longer has streams: they run what they are given again.
void end(const std::shared_ptr<Capture>& c) {
  for (auto it = captures().members.begin(); it != captures().members.end();)
    it = it->second.capture == c ? captures().members.erase(it) : std::next(it);
  captures().active.erase(c);
}

// Every node leads to the origin's tips: no forked work was left unjoined.
bool joined(const Capture& c) {
  const std::deque<CUgraphNode_st>& nodes = c.graph->nodes;
  std::vector<bool> leads(nodes.size(), false);
  for (size_t tip : c.tips.at(c.origin)) leads[tip] = true;
  for (size_t n = nodes.size(); n-- > 0;)
    if (leads[n])
      for (size_t before : nodes[n].after) leads[before] = true;
  return std::all_of(leads.begin(), leads.end(), [](bool b) { return b; });
}

bool blocking_stream_captures(int device) {
  for (const auto& entry : captures().members)
    if (entry.first->device() == device && entry.first->kind() == Stream::Kind::Blocking) return true;
  return false;
}

}  // namespace

cudaError_t submit(const std::shared_ptr<Stream>& s, const char* what, std::function<void()> work, Point* done,
                   std::vector<Point> after) {
  Point point;
  {
    std::lock_guard<std::mutex> lock(captures().mutex);
    if (const std::shared_ptr<Capture> c = capture_of(*s)) {
      if (c->invalidated) return record_error(cudaErrorStreamCaptureInvalidated);
      std::vector<size_t>& tips = c->tips[s.get()];
      c->graph->nodes.push_back(CUgraphNode_st{what, std::move(work), s->device(), tips});
      tips = {c->graph->nodes.size() - 1};
      if (done) *done = Point{};
      return cudaSuccess;
    }
    if (s->kind() == Stream::Kind::Legacy && blocking_stream_captures(s->device())) {
      for (const auto& entry : captures().members)
        if (entry.first->device() == s->device() && entry.first->kind() == Stream::Kind::Blocking)
          entry.second.capture->invalidated = true;
      return record_error(cudaErrorStreamCaptureImplicit);
    }
  }
  point = s->enqueue(what, std::move(work), std::move(after));
  if (done) *done = point;
  return cudaSuccess;
}

bool capturing(const Stream& s) {
  std::lock_guard<std::mutex> lock(captures().mutex);
  return capture_of(s) != nullptr;
}

cudaError_t refuse_if_capturing(const Stream& s) {
  std::lock_guard<std::mutex> lock(captures().mutex);
  const std::shared_ptr<Capture> c = capture_of(s);
  return c ? invalidate(c, cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t check_unsafe_call(int device) {
  std::lock_guard<std::mutex> lock(captures().mutex);
  const std::thread::id self = std::this_thread::get_id();
  cudaError_t error = cudaSuccess;
  for (const std::shared_ptr<Capture>& c : captures().active) {
    bool prohibits = false;
    if (thread_mode != cudaStreamCaptureModeRelaxed && c->mode != cudaStreamCaptureModeRelaxed)
      prohibits = c->thread == self || (thread_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal);
    if (device >= 0)
      for (const auto& tip : c->tips) prohibits = prohibits || tip.first->device() == device;
    if (prohibits) error = invalidate(c, cudaErrorStreamCaptureUnsupported);
  }
  return error;
}

bool record_in_capture(const Stream& s, CapturedPoint* point, cudaError_t* error) {
  std::lock_guard<std::mutex> lock(captures().mutex);
  const std::shared_ptr<Capture> c = capture_of(s);
  if (!c) return false;
  *error = c->invalidated ? record_error(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
  *point = CapturedPoint{c, c->tips[&s]};
  return true;
}

bool wait_in_capture(const std::shared_ptr<Stream>& s, const CapturedPoint& event_point, bool recorded_outside,
                     cudaError_t* error) {
  std::lock_guard<std::mutex> lock(captures().mutex);
  const std::shared_ptr<Capture> c = capture_of(*s);
  // An event whose capture has ended stands for no work (it was recorded into a graph).
  const std::shared_ptr<Capture> of_event =
      captures().active.count(event_point.capture) ? event_point.capture : nullptr;
  if (!c && !of_event) return false;
  *error = cudaSuccess;
  if (c) {
    if (c->invalidated) {
      *error = record_error(cudaErrorStreamCaptureInvalidated);
    } else if (of_event == c) {
      std::vector<size_t>& tips = c->tips[s.get()];
      for (size_t node : event_point.nodes)
        if (std::find(tips.begin(), tips.end(), node) == tips.end()) tips.push_back(node);
    } else if (of_event) {
      of_event->invalidated = true;
      *error = invalidate(c, cudaErrorStreamCaptureMerge);
    } else if (recorded_outside) {
      *error = invalidate(c, cudaErrorStreamCaptureIsolation);
    }
    return true;
  }
  if (of_event->invalidated) {
    *error = record_error(cudaErrorStreamCaptureInvalidated);
    return true;
  }
  captures().members[s.get()] = Member{s, of_event};  // the fork: s now captures too
  of_event->tips[s.get()] = event_point.nodes;
  return true;
}

cudaError_t refuse_captured_event(const CapturedPoint& event_point) {
  std::lock_guard<std::mutex> lock(captures().mutex);
  if (!event_point.capture || !captures().active.count(event_point.capture)) return cudaSuccess;
  return invalidate(event_point.capture, cudaErrorCapturedEvent);
}

}  // namespace host_runtime

using host_runtime::record_error;

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  host_runtime::Bookkeeping hide;
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return record_error(cudaErrorInvalidValue);
  // The legacy stream synchronises with the whole device: it cannot be captured.
  if (s->kind() == host_runtime::Stream::Kind::Legacy) return record_error(cudaErrorStreamCaptureUnsupported);
  host_runtime::Captures& all = host_runtime::captures();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (host_runtime::capture_of(*s)) return record_error(cudaErrorIllegalState);
  auto c = std::make_shared<host_runtime::Capture>();
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s.get();
  c->tips[s.get()] = {};
  all.members[s.get()] = host_runtime::Member{s, c};
  all.active.insert(c);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  host_runtime::Bookkeeping hide;
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (!graph) return record_error(cudaErrorInvalidValue);
  host_runtime::Captures& all = host_runtime::captures();
  std::lock_guard<std::mutex> lock(all.mutex);
  const std::shared_ptr<host_runtime::Capture> c = host_runtime::capture_of(*s);
  if (!c) return record_error(cudaErrorIllegalState);
  if (c->origin != s.get()) return record_error(cudaErrorStreamCaptureUnmatched);
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return record_error(cudaErrorStreamCaptureWrongThread);
  host_runtime::end(c);
  *graph = nullptr;
  if (c->invalidated) return record_error(cudaErrorStreamCaptureInvalidated);
  if (!host_runtime::joined(*c)) return record_error(cudaErrorStreamCaptureUnjoined);
  *graph = c->graph.release();
  all.graphs.insert(*graph);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  host_runtime::Bookkeeping hide;
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (!status) return record_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(host_runtime::captures().mutex);
  // A question about the legacy stream while a blocking stream captures is refused (it
  // is not a use of the stream: nothing is invalidated).
  if (s->kind() == host_runtime::Stream::Kind::Legacy && host_runtime::blocking_stream_captures(s->device()))
    return record_error(cudaErrorStreamCaptureImplicit);
  const std::shared_ptr<host_runtime::Capture> c = host_runtime::capture_of(*s);
  *status = !c ? cudaStreamCaptureStatusNone
               : c->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  host_runtime::Bookkeeping hide;
  if (!mode || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                *mode != cudaStreamCaptureModeRelaxed))
    return record_error(cudaErrorInvalidValue);
  std::swap(*mode, host_runtime::thread_mode);
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  host_runtime::Bookkeeping hide;
  std::lock_guard<std::mutex> lock(host_runtime::captures().mutex);
  if (!host_runtime::captures().graphs.count(graph) || !count) return record_error(cudaErrorInvalidValue);
  if (nodes) {
    *count = std::min(*count, graph->nodes.size());
    for (size_t i = 0; i < *count; ++i) nodes[i] = &graph->nodes[i];
  } else {
    *count = graph->nodes.size();
  }
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  host_runtime::Bookkeeping hide;
  std::lock_guard<std::mutex> lock(host_runtime::captures().mutex);
  if (!exec || !host_runtime::captures().graphs.count(graph) || flags != 0) return record_error(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{std::vector<CUgraphNode_st>(graph->nodes.begin(), graph->nodes.end())};
  host_runtime::captures().execs.insert(*exec);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  host_runtime::Bookkeeping hide;
  {
    std::lock_guard<std::mutex> lock(host_runtime::captures().mutex);
    if (!host_runtime::captures().execs.count(exec)) return record_error(cudaErrorInvalidValue);
  }
  const std::shared_ptr<host_runtime::Stream> s = host_runtime::stream_for(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = host_runtime::device_error(s->device())) return record_error(error);
  // The graphs captured here hold one device's work; CUDA would run each node on its own
  // device, this runtime only on the launch stream's.
  for (const CUgraphNode_st& node : exec->nodes)
    if (node.device != s->device()) return record_error(cudaErrorInvalidValue);
  for (const CUgraphNode_st& node : exec->nodes)
    if (const cudaError_t error = host_runtime::submit(s, node.what, node.work)) return error;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  host_runtime::Bookkeeping hide;
  std::lock_guard<std::mutex> lock(host_runtime::captures().mutex);
  if (!host_runtime::captures().execs.erase(exec)) return record_error(cudaErrorInvalidValue);
  delete exec;  // launches in flight hold copies of their nodes' work
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  host_runtime::Bookkeeping hide;
  std::lock_guard<std::mutex> lock(host_runtime::captures().mutex);
  if (!host_runtime::captures().graphs.erase(graph)) return record_error(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}
