// Timelines of a run: what each thread did and when, written in the Chrome trace-event
// format (the JSON that ui.perfetto.dev and chrome://tracing open; docs/data-parallel.md,
// "Watching a step").
//
// Process-wide and off by default. While off, a Span costs one relaxed atomic load and a
// branch: no allocation, no clock read, and its description is never built (it is a
// callable, called only while recording). While on, each thread appends complete events
// ("ph":"X") to a buffer of its own, without a lock: a thread's buffer is registered once,
// under a mutex, at its first event, and write() reads only what its owner has published.
//
// Lanes. An event's tid is its thread's lane. The code that owns a thread names its lane
// (set_lane): "replica 2", "comm 2" (replica 2's communication thread), "main", "loader";
// the sort index puts the lanes in that order in the viewer (replicas first). pid is the
// process (set_process; 0 unless set): an mpirun job's ranks, each with its own pid, go
// into one file through take() and write_merged() (train/observe/job_trace.h). Times are
// microseconds of the host's monotonic clock (steady_clock), the same clock in every
// process of one host.
//
// Embedding programs: start(), run the steps to watch, stop(), write(path)
// (docs/embedding.md).
//
// Two hooks, each filled by the CUDA build's own file when it is linked in (as backends
// register themselves), so that nothing here tests for CUDA: a SpanListener that sees every
// span open and close on its thread (NVTX ranges, engine/nvtx_ranges.cpp, while listen() is
// on), and a DeviceTimer that marks the thread's device stream at a span's ends, which
// write() turns into the same span on a lane of that stream, in device time converted to
// this clock (engine/cuda_span_timer.cu).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace dpcore::trace {

// An event's arguments: a small list of named values, shown by the viewer when a span is
// selected. Lists of numbers are per replica (rows of a scatter).
using Value = std::variant<int64_t, double, std::string, std::vector<int64_t>>;
struct Arg {
  std::string key;
  Value value;
};
using Args = std::vector<Arg>;
// A span's name and arguments, built only while recording.
struct Label {
  std::string name;
  Args args;
};

// Lane order in the viewer (thread_sort_index): replica r at kReplicaLanes + r, a pipeline's
// stage threads from kStageLanes, the communication threads from kCommLanes (replica r's at
// kCommLanes + r; a pipeline's stages' from kStageCommLanes, the groups of a stage's
// replicas from kStageGroupCommLanes), then the main thread and the loader. A device
// stream's lane sorts after every thread's, at kDeviceLanes + its thread's index.
constexpr int kReplicaLanes = 0, kStageLanes = 500, kCommLanes = 1000, kStageCommLanes = 1500,
              kStageGroupCommLanes = 1750, kMainLane = 2000, kLoaderLane = 3000, kDeviceLanes = 10000;

namespace detail {
extern std::atomic<bool> recording;  // spans go somewhere: to a file (start) or a listener (listen)
}
// Whether spans are being made now: recorded for a file, given to the listener, or both.
inline bool recording() noexcept { return detail::recording.load(std::memory_order_relaxed); }

// Starts / stops recording for write() (both may be called repeatedly; spans open at
// stop() still end and are kept).
void start();
void stop();
// Writes the events recorded since the previous write() (all of them, the first time) to
// `path` as {"traceEvents": [...]}, through a temporary file in the same directory renamed
// over `path`, so that a run killed while writing leaves no file or a complete one.
// Returns the number of span events written (the lane and process names are not counted).
// Fails with an Error naming the path.
size_t write(const std::string& path);

// ---- the processes of one job in one file (train/observe/job_trace.h gathers them) ----
// The events write() would write, as the text of {"traceEvents": [...], "otherData": {...}},
// taken: a later take() or write() starts after them. Each rank of an mpirun job takes its
// own and sends the text to the one that writes.
std::string take();
// A process's take() and how far to move its times (nanoseconds added to each timestamp,
// to put them on the writing process's clock).
struct Part {
  std::string events;
  int64_t shift_ns = 0;
};
// Writes every part's events into one file at `path` (atomically, as write() does), each
// process keeping its pid and lanes; otherData records the shifts. Returns the number of
// span events written. Fails with an Error naming the path, or the part that is not a
// take().
size_t write_merged(const std::string& path, const std::vector<Part>& parts);
// Fails with an Error naming `flag` and `path` unless a trace can be written there: the
// directory exists and is writable and the path is not a directory. For checking a path
// before a long run rather than after it.
void check_writable(const std::string& path, const std::string& flag);

// Names the calling thread's lane, with its place among the lanes (see above).
void set_lane(const std::string& name, int sort_index);
// The process id and name every event carries (an MPI rank: its rank).
void set_process(int pid, const std::string& name);

// The events' clock (steady_clock), in nanoseconds.
int64_t now_ns();

// ---- the hooks (see the top of this file) ----
// Sees every span made while listen() is on, on the span's own thread, in nesting order.
class SpanListener {
 public:
  virtual ~SpanListener() = default;
  virtual void open(const char* category, const std::string& name) = 0;
  virtual void close() = 0;
  // The calling thread's lane was named (set_lane) while listening, for a tool that names
  // threads too.
  virtual void lane_named(const std::string& name) = 0;
};
// Installs `listener` (null: none) and returns the one it replaces. At startup, before
// spans are made: a static object of the file that implements it calls this.
SpanListener* set_listener(SpanListener* listener);
// The installed listener, or null.
SpanListener* listener();
// While on, every span also goes to the listener, whether or not start() is recording
// (--nvtx). Fails with an Error naming `flag` when no listener is installed.
void listen(bool on, const std::string& flag);

// Device-side times of spans. mark() is called on the span's thread when a recorded span
// opens and again when it closes; write() asks where and when the device reached the two
// marks and, when both are on one stream, adds the span to that stream's lane.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  // start() was called: marks from now on are timed against a fresh reference, and the
  // earlier ones are no longer asked about.
  virtual void restart() = 0;
  // A point after the work queued so far on the calling thread's current device stream;
  // -1 when the thread queues no device work (or its stream is being captured into a
  // graph, where nothing runs now).
  virtual int64_t mark() = 0;
  struct Reached {
    std::string stream;  // the stream's lane name, "cuda:0 stream 14"
    int64_t ns = 0;      // when the device got there, on now_ns()'s clock
    // How far `ns` can be off: the device clock is put on the host's through a reference
    // known only this closely. Written into the trace with the stream's lane.
    int64_t uncertainty_ns = 0;
  };
  // Where and when mark `id` was reached, waiting for the device to get there; false when
  // it cannot tell (a mark from before the last restart()).
  virtual bool reached(int64_t id, Reached& out) = 0;
};
// Installs `timer` (null: none) and returns the one it replaces; as for set_listener.
DeviceTimer* set_device_timer(DeviceTimer* timer);

// A complete event on the calling thread's lane, from construction to destruction:
//   trace::Span span("comm", [&] { return trace::Label{"allreduce", {{"bytes", n}}}; });
//   trace::Span span("step", "optimizer step");
// Spans on one thread nest (they are scoped); add() attaches a value known only later.
class Span {
 public:
  Span(const char* category, const char* name) {
    if (recording()) open(category, Label{name, {}});
  }
  template <class Describe, class = std::enable_if_t<std::is_invocable_r_v<Label, Describe&>>>
  Span(const char* category, Describe&& describe) {
    if (recording()) open(category, describe());
  }
  ~Span() {
    if (open_) close();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  template <class V>
  void add(const char* key, V&& value) {
    if (open_) add_arg(key, Value(std::forward<V>(value)));
  }

 private:
  struct Open {
    const char* category;
    Label label;
    int64_t start_ns;
    bool to_file, to_listener;
    int64_t device_mark;  // DeviceTimer::mark() at the opening, or -1
  };
  void open(const char* category, Label label);
  void add_arg(const char* key, Value value);
  void close();
  std::unique_ptr<Open> open_;  // null while not recording: nothing to end
};

// What the collectives issued on this thread while it lives are for ("bucket 3", with its
// arguments): the communicator that runs them on its own thread puts it in the span it
// records there, which the issuing code could not do itself. Built only while recording.
class CollectiveLabel {
 public:
  template <class Describe, class = std::enable_if_t<std::is_invocable_r_v<Label, Describe&>>>
  explicit CollectiveLabel(Describe&& describe) {
    if (recording()) push(describe());
  }
  ~CollectiveLabel() {
    if (pushed_) pop();
  }
  CollectiveLabel(const CollectiveLabel&) = delete;
  CollectiveLabel& operator=(const CollectiveLabel&) = delete;

  // The innermost label alive on the calling thread; empty when there is none.
  static Label current();

 private:
  void push(Label label);
  void pop();
  bool pushed_ = false;
};

}  // namespace dpcore::trace
