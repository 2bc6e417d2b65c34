#include "comm/work.h"

#include <utility>

#include "kernels/error.h"

namespace dpcore::comm {

namespace {

// The message of `error`, read on the thread that caught it.
std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

void Completion::finish(std::exception_ptr error) {
  std::string message = error ? message_of(error) : std::string();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
    failed_ = bool(error_);
    message_ = std::move(message);
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
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  if (failed_) throw Error(message_);
}

}  // namespace dpcore::comm
