#include "comm/work.h"

namespace dpcore::comm {

void Completion::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  finished_.notify_all();
}

bool Completion::done() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Completion::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

}  // namespace dpcore::comm
