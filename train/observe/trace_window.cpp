#include "train/observe/trace_window.h"

#include <algorithm>

#include "engine/io/atomic_file.h"
#include "engine/trace.h"

namespace dpcore::train {

TraceWindow::TraceWindow(std::string path, int64_t steps, int64_t begin, int64_t end, Writer write)
    : path_(std::move(path)), write_(std::move(write)) {
  if (path_.empty()) return;
  io::remove_stale_temps(path_);
  if (end <= begin) return;
  first_ = begin + std::clamp<int64_t>(end - begin - steps, 0, kWarmupSteps);
  last_ = std::min(first_ + steps, end) - 1;
}

void TraceWindow::before_step(int64_t step) {
  if (step == first_ && last_ >= first_) trace::start();
}

std::string TraceWindow::after_step(int64_t step) {
  if (step != last_) return "";
  trace::stop();
  const size_t events = write_(path_);
  const std::string steps = first_ == last_ ? "step " + std::to_string(first_ + 1)
                                            : "steps " + std::to_string(first_ + 1) + "-" + std::to_string(last_ + 1);
  return "trace: " + std::to_string(events) + " events of " + steps + " written to " + path_ +
         " (open it in ui.perfetto.dev)";
}

}  // namespace dpcore::train
