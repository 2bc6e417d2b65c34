#include "engine/trace.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>

#include "engine/io/atomic_file.h"
#include "kernels/error.h"

namespace dpcore::trace {

namespace detail {
std::atomic<bool> recording{false};
}

namespace {

struct Event {
  std::string name;
  const char* category = "";
  int64_t start_ns = 0, dur_ns = 0;
  Args args;
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

nlohmann::json complete_event(const Event& e, int pid, int tid) {
  nlohmann::json args = nlohmann::json::object();
  for (const Arg& a : e.args) args[a.key] = to_json(a.value);
  // Nanoseconds to the format's microseconds, keeping the fraction: a small layer's
  // backward can take less than a microsecond.
  return {{"name", e.name}, {"cat", e.category},          {"ph", "X"},     {"ts", double(e.start_ns) / 1000.0},
          {"dur", double(e.dur_ns) / 1000.0}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
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

void start() { detail::recording.store(true, std::memory_order_relaxed); }
void stop() { detail::recording.store(false, std::memory_order_relaxed); }

void set_lane(const std::string& name, int sort_index) {
  ThreadState& t = t_state;
  t.name = name;
  t.sort_index = sort_index;
  if (t.lane) {
    std::lock_guard<std::mutex> lock(registry().mutex);
    t.lane->name = name;
    t.lane->sort_index = sort_index;
  }
}

void set_process(int pid, const std::string& name) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.pid = pid;
  reg.process = name;
}

void Span::open(const char* category, Label label) {
  open_ = std::make_unique<Open>(Open{category, std::move(label), 0});
  open_->start_ns = now_ns();  // last, so that building the label is not counted
}

void Span::add_arg(const char* key, Value value) { open_->label.args.push_back({key, std::move(value)}); }

void Span::close() {
  const int64_t end = now_ns();
  Open& o = *open_;
  this_lane().append({std::move(o.label.name), o.category, o.start_ns, end - o.start_ns, std::move(o.label.args)});
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
  Registry& reg = registry();
  nlohmann::json events = nlohmann::json::array();
  std::vector<std::pair<Lane*, size_t>> taken;  // marked written once the file is in place
  size_t spans = 0, dropped = 0;
  {
    std::lock_guard<std::mutex> lock(reg.mutex);
    events.push_back(metadata("process_name", reg.pid, 0, {{"name", reg.process}}));
    for (const auto& lane : reg.lanes) {
      const size_t end = lane->published();
      dropped += lane->dropped();
      if (end == lane->written) continue;
      events.push_back(metadata("thread_name", reg.pid, lane->tid, {{"name", lane->name}}));
      events.push_back(metadata("thread_sort_index", reg.pid, lane->tid, {{"sort_index", lane->sort_index}}));
      for (size_t i = lane->written; i < end; ++i) events.push_back(complete_event(lane->at(i), reg.pid, lane->tid));
      spans += end - lane->written;
      taken.emplace_back(lane.get(), end);
    }
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)},
                        {"displayTimeUnit", "ms"},
                        {"otherData", {{"writer", "dpcore"}, {"dropped_events", dropped}}}};
  const std::string text = doc.dump();
  io::AtomicFileWriter file(path, "trace");
  file.write(text.data(), text.size());
  file.commit();
  std::lock_guard<std::mutex> lock(reg.mutex);
  for (auto& [lane, end] : taken) lane->written = end;
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
