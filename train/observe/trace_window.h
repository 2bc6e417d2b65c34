// --trace FILE --trace-steps K: which steps of a training run are recorded into a trace
// (engine/trace.h), and writing the file once they have run.
//
// The window is K steps after kWarmupSteps steps of this run (the first steps allocate
// buffers, fill caches and, on a GPU, record graphs: not what a step usually looks like),
// or the run's last K steps when it is too short to hold both, or all of them.
//
// In a job of several processes every rank records its window (the same steps) and writes
// through `write`, which then gathers the ranks into rank 0's file (train/observe/job_trace.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace dpcore::train {

class TraceWindow {
 public:
  static constexpr int64_t kWarmupSteps = 2;

  // Writes the recorded events to a path; returns how many spans it wrote.
  using Writer = std::function<size_t(const std::string& path)>;

  // A window of `steps` steps in the run's steps [begin, end) (global step numbers, so a
  // resumed run counts from where it resumed). An empty path records nothing. Removes the
  // temporary files a run killed while writing `path` left (engine/io/atomic_file.h).
  TraceWindow(std::string path, int64_t steps, int64_t begin, int64_t end, Writer write);

  // Before step `step`: recording starts at the window's first step.
  void before_step(int64_t step);
  // After step `step`: at the window's last step, recording stops and the file is written.
  // Returns the line that says where and how many events, or "" when nothing was written.
  std::string after_step(int64_t step);

 private:
  std::string path_;
  Writer write_;
  int64_t first_ = 0, last_ = -1;  // the window, inclusive
};

}  // namespace dpcore::train
