// Seconds on the steady clock since `start`: how the trainer, the runners and their tests
// time a span (the breakdown of a step, timeouts, rates).
#pragma once

#include <chrono>

namespace dpcore {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace dpcore
