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
// process (set_process; 0 unless set), so the files of the ranks of one job can be opened
// together. Times are microseconds of the host's monotonic clock (steady_clock), the same
// clock in every process of one host.
//
// Embedding programs: start(), run the steps to watch, stop(), write(path)
// (docs/embedding.md).
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

// Lane order in the viewer (thread_sort_index): replica r at kReplicaLanes + r, its
// communication thread at kCommLanes + r, then the main thread and the loader.
constexpr int kReplicaLanes = 0, kCommLanes = 1000, kMainLane = 2000, kLoaderLane = 3000;

namespace detail {
extern std::atomic<bool> recording;
}
// Whether spans are being recorded now.
inline bool recording() noexcept { return detail::recording.load(std::memory_order_relaxed); }

// Starts / stops recording (both may be called repeatedly; spans open at stop() still end
// and are kept).
void start();
void stop();
// Writes the events recorded since the previous write() (all of them, the first time) to
// `path` as {"traceEvents": [...]}, through a temporary file in the same directory renamed
// over `path`, so that a run killed while writing leaves no file or a complete one.
// Returns the number of span events written (the lane and process names are not counted).
// Fails with an Error naming the path.
size_t write(const std::string& path);
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
