#include "engine/trace.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "engine/io/atomic_file.h"
#include "kernels/error.h"

namespace dpcore::trace {

namespace detail {
std::atomic<bool> recording{false};
}

namespace {
// Who takes spans; `recording` is their union. Changed under their mutex, read relaxed.
std::mutex consumers_mutex;
std::atomic<bool> to_file{false}, to_listener{false};
// The hooks: set at static initialisation by the files that implement them.
std::atomic<SpanListener*> installed_listener{nullptr};
std::atomic<DeviceTimer*> installed_timer{nullptr};

void set_consumer(std::atomic<bool>& which, bool on) {
  std::lock_guard<std::mutex> lock(consumers_mutex);
  which.store(on, std::memory_order_relaxed);
  detail::recording.store(to_file.load(std::memory_order_relaxed) || to_listener.load(std::memory_order_relaxed),
                          std::memory_order_relaxed);
}

struct Event {
  std::string name;
  const char* category = "";
  int64_t start_ns = 0, dur_ns = 0;
  Args args;
  int64_t device_begin = -1, device_end = -1;  // DeviceTimer marks, -1: none
};

// One thread's events. Only the owning thread appends; write() reads the prefix the owner
// has published (its count, stored with release after the event is complete), so neither
// side locks. Events sit in blocks that never move, reached through a directory of fixed
// size, so that appending never relocates what a reader may be reading.
class Lane {
 public:
  static constexpr size_t kBlock = 1024, kMaxBlocks = 1024;  // a million events per lane

  void append(Event event) {
    const size_t n = published_.load(std::memory_order_relaxed);
    const size_t b = n / kBlock;
    if (b >= kMaxBlocks) {  // a window far longer than a few steps: keep the beginning
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (!blocks_[b]) blocks_[b] = std::make_unique<Block>();
    (*blocks_[b])[n % kBlock] = std::move(event);
    published_.store(n + 1, std::memory_order_release);
  }
  size_t published() const { return published_.load(std::memory_order_acquire); }
  const Event& at(size_t i) const { return (*blocks_[i / kBlock])[i % kBlock]; }
  size_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  // Guarded by the registry's mutex.
  int tid = 0;
  std::string name;
  int sort_index = 0;
  size_t written = 0;  // events [0, written) went into an earlier file

 private:
  using Block = std::array<Event, kBlock>;
  std::array<std::unique_ptr<Block>, kMaxBlocks> blocks_;
  std::atomic<size_t> published_{0};
  std::atomic<size_t> dropped_{0};
};

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<Lane>> lanes;
  int pid = 0;
  std::string process = "dpcore";
};
Registry& registry() {
  static Registry r;
  return r;
}

// What a thread knows about its lane. The lane itself is registered at the thread's first
// event only, so threads that never record while tracing is on cost the registry nothing.
struct ThreadState {
  std::string name;
  int sort_index = -1;  // < 0: not named
  std::shared_ptr<Lane> lane;
  std::vector<Label> collective_labels;
};
thread_local ThreadState t_state;

Lane& this_lane() {
  ThreadState& t = t_state;
  if (!t.lane) {
    Registry& reg = registry();
    auto lane = std::make_shared<Lane>();
    std::lock_guard<std::mutex> lock(reg.mutex);
    lane->tid = int(reg.lanes.size()) + 1;
    const bool named = t.sort_index >= 0;
    lane->name = named ? t.name : "thread " + std::to_string(lane->tid);
    lane->sort_index = named ? t.sort_index : kLoaderLane + 1000 + lane->tid;
    reg.lanes.push_back(lane);
    t.lane = std::move(lane);
  }
  return *t.lane;
}

nlohmann::json to_json(const Value& v) {
  return std::visit([](const auto& x) { return nlohmann::json(x); }, v);
}

nlohmann::json metadata(const char* what, int pid, int tid, nlohmann::json args) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

nlohmann::json complete_event(const Event& e, int64_t start_ns, int64_t dur_ns, int pid, int tid) {
  nlohmann::json args = nlohmann::json::object();
  for (const Arg& a : e.args) args[a.key] = to_json(a.value);
  // Nanoseconds to the format's microseconds, keeping the fraction: a small layer's
  // backward can take less than a microsecond.
  return {{"name", e.name}, {"cat", e.category},          {"ph", "X"},     {"ts", double(start_ns) / 1000.0},
          {"dur", double(dur_ns) / 1000.0}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

// The lanes of device streams: one per stream and thread that queued work on it, numbered
// after every thread's lane.
class DeviceLanes {
 public:
  static constexpr int kFirstTid = 1000000;

  // The span `e` of lane `host` as the device ran it, when both its marks were reached on
  // one stream.
  void add(DeviceTimer& timer, const Event& e, int pid, const Lane& host, nlohmann::json& events) {
    DeviceTimer::Reached begin, end;
    if (!timer.reached(e.device_begin, begin) || !timer.reached(e.device_end, end)) return;
    if (begin.stream != end.stream) return;  // the thread changed streams inside the span
    const std::string name = begin.stream + " (" + host.name + ")";
    auto [lane, added] = tids_.emplace(name, kFirstTid + int(tids_.size()));
    if (added) {
      events.push_back(metadata("thread_name", pid, lane->second, {{"name", name}}));
      const int sort_index = kDeviceLanes + host.sort_index;
      events.push_back(metadata("thread_sort_index", pid, lane->second, {{"sort_index", sort_index}}));
      // Not a trace-viewer field (viewers skip metadata they do not know): how far this
      // lane's times can be off, for a reader comparing them with the host lanes'.
      events.push_back(metadata("clock_uncertainty", pid, lane->second, {{"us", double(begin.uncertainty_ns) / 1000.0}}));
    }
    events.push_back(complete_event(e, begin.ns, std::max<int64_t>(end.ns - begin.ns, 0), pid, lane->second));
  }

 private:
  std::map<std::string, int> tids_;
};

// What write() and take() put in a file: the events recorded since the previous one, with
// the lanes they need. `taken` is marked written once they are safely out.
struct Collected {
  nlohmann::json events = nlohmann::json::array();
  std::vector<std::pair<Lane*, size_t>> taken;
  size_t spans = 0, dropped = 0;
};

Collected collect() {
  Registry& reg = registry();
  Collected c;
  DeviceTimer* timer = installed_timer.load(std::memory_order_acquire);
  DeviceLanes device_lanes;
  std::lock_guard<std::mutex> lock(reg.mutex);
  c.events.push_back(metadata("process_name", reg.pid, 0, {{"name", reg.process}}));
  for (const auto& lane : reg.lanes) {
    const size_t end = lane->published();
    c.dropped += lane->dropped();
    if (end == lane->written) continue;
    c.events.push_back(metadata("thread_name", reg.pid, lane->tid, {{"name", lane->name}}));
    c.events.push_back(metadata("thread_sort_index", reg.pid, lane->tid, {{"sort_index", lane->sort_index}}));
    for (size_t i = lane->written; i < end; ++i) {
      const Event& e = lane->at(i);
      c.events.push_back(complete_event(e, e.start_ns, e.dur_ns, reg.pid, lane->tid));
      if (timer && e.device_begin >= 0 && e.device_end >= 0) device_lanes.add(*timer, e, reg.pid, *lane, c.events);
    }
    c.taken.emplace_back(lane.get(), end);
  }
  for (const nlohmann::json& e : c.events) c.spans += e["ph"] == "X" ? 1 : 0;
  return c;
}

void mark_written(const Collected& c) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  for (auto& [lane, end] : c.taken) lane->written = end;
}

// {"traceEvents": [...]} to `path`, through a temporary file renamed over it.
void write_document(const std::string& path, nlohmann::json events, nlohmann::json other) {
  other["writer"] = "dpcore";
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
  const std::string text = doc.dump();
  io::AtomicFileWriter file(path, "trace");
  file.write(text.data(), text.size());
  file.commit();
}

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void start() {
  // (Before recording begins, so that no mark predates the timer's new reference.)
  if (DeviceTimer* timer = installed_timer.load(std::memory_order_acquire)) timer->restart();
  set_consumer(to_file, true);
}
void stop() { set_consumer(to_file, false); }

SpanListener* set_listener(SpanListener* l) { return installed_listener.exchange(l, std::memory_order_acq_rel); }
SpanListener* listener() { return installed_listener.load(std::memory_order_acquire); }
DeviceTimer* set_device_timer(DeviceTimer* timer) { return installed_timer.exchange(timer, std::memory_order_acq_rel); }

void listen(bool on, const std::string& flag) {
  DPCORE_CHECK(!on || listener(), flag,
               ": this build has no NVTX ranges to give spans to (they come with the CUDA backend: build where nvcc "
               "is found)");
  set_consumer(to_listener, on);
}

void set_lane(const std::string& name, int sort_index) {
  ThreadState& t = t_state;
  t.name = name;
  t.sort_index = sort_index;
  if (t.lane) {
    std::lock_guard<std::mutex> lock(registry().mutex);
    t.lane->name = name;
    t.lane->sort_index = sort_index;
  }
  if (SpanListener* l = listener(); l && to_listener.load(std::memory_order_relaxed)) l->lane_named(name);
}

void set_process(int pid, const std::string& name) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.pid = pid;
  reg.process = name;
}

void Span::open(const char* category, Label label) {
  SpanListener* l = to_listener.load(std::memory_order_relaxed) ? listener() : nullptr;
  const bool file = to_file.load(std::memory_order_relaxed);
  if (!file && !l) return;  // stopped since recording() was read
  open_ = std::make_unique<Open>(Open{category, std::move(label), 0, file, l != nullptr, -1});
  if (l) l->open(category, open_->label.name);
  open_->start_ns = now_ns();  // after building the label, which is not counted
  // Inside the span: the device cannot reach the mark before the span began.
  DeviceTimer* timer = installed_timer.load(std::memory_order_acquire);
  if (file && timer) open_->device_mark = timer->mark();
}

void Span::add_arg(const char* key, Value value) { open_->label.args.push_back({key, std::move(value)}); }

void Span::close() {
  Open& o = *open_;
  DeviceTimer* timer = installed_timer.load(std::memory_order_acquire);
  const int64_t device_end = o.device_mark >= 0 && timer ? timer->mark() : -1;
  const int64_t end = now_ns();
  if (SpanListener* l = listener(); o.to_listener && l) l->close();
  if (!o.to_file) return;
  this_lane().append({std::move(o.label.name), o.category, o.start_ns, end - o.start_ns, std::move(o.label.args),
                      o.device_mark, device_end});
}

void CollectiveLabel::push(Label label) {
  t_state.collective_labels.push_back(std::move(label));
  pushed_ = true;
}

void CollectiveLabel::pop() { t_state.collective_labels.pop_back(); }

Label CollectiveLabel::current() {
  const std::vector<Label>& labels = t_state.collective_labels;
  return labels.empty() ? Label{} : labels.back();
}

size_t write(const std::string& path) {
  Collected c = collect();
  write_document(path, std::move(c.events), {{"dropped_events", c.dropped}});
  mark_written(c);
  return c.spans;
}

std::string take() {
  Collected c = collect();
  mark_written(c);
  nlohmann::json part = {{"traceEvents", std::move(c.events)}, {"otherData", {{"dropped_events", c.dropped}}}};
  return part.dump();
}

size_t write_merged(const std::string& path, const std::vector<Part>& parts) {
  nlohmann::json events = nlohmann::json::array(), shifts_us = nlohmann::json::array();
  size_t spans = 0, dropped = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    nlohmann::json part = nlohmann::json::parse(parts[i].events, nullptr, /*allow_exceptions=*/false);
    DPCORE_CHECK(part.is_object() && part.contains("traceEvents") && part["traceEvents"].is_array(), "trace ", path,
                 ": part ", i, " of ", parts.size(), " is not the events of one process (trace::take)");
    const double shift_us = double(parts[i].shift_ns) / 1000.0;
    for (nlohmann::json& e : part["traceEvents"]) {
      if (e["ph"] == "X") e["ts"] = e["ts"].get<double>() + shift_us, ++spans;
      events.push_back(std::move(e));
    }
    dropped += part.value("otherData", nlohmann::json::object()).value("dropped_events", size_t(0));
    shifts_us.push_back(shift_us);
  }
  write_document(path, std::move(events),
                 {{"dropped_events", dropped}, {"processes", parts.size()}, {"clock_shift_us", shifts_us}});
  return spans;
}

void check_writable(const std::string& path, const std::string& flag) {
  DPCORE_CHECK(!path.empty(), flag, ": needs a file name");
  struct stat st {};
  DPCORE_CHECK(stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), flag, " ", path,
               ": is a directory; give a file name, such as ", path, "/trace.json");
  const std::string dir = parent_dir(path);
  DPCORE_CHECK(stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), flag, " ", path, ": the directory ", dir,
               " does not exist");
  DPCORE_CHECK(access(dir.c_str(), W_OK) == 0, flag, " ", path, ": cannot write in the directory ", dir, ": ",
               std::strerror(errno));
}

}  // namespace dpcore::trace
