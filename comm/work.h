// Work: the handle of one asynchronous collective (c10d's Work). The collective runs on a
// communication thread or stream; wait() blocks until it has finished and rethrows its
// error, done() asks without blocking. Dropping a Work does not cancel the collective.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace dpcore::comm {

class Work {
 public:
  // What a transport implements: a thread's completion flag, a CUDA event.
  class Impl {
   public:
    virtual ~Impl() = default;
    virtual bool done() = 0;
    virtual void wait() = 0;  // rethrows the collective's error
  };

  Work() = default;  // an empty handle: already done
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  void wait() const {
    if (impl_) impl_->wait();
  }
  bool done() const { return !impl_ || impl_->done(); }

 private:
  std::shared_ptr<Impl> impl_;
};

// Completion of work done on a host thread: the thread calls finish() once, with the
// exception it caught or null.
//
// The first wait() rethrows that exception itself and the Completion lets go of it, so the
// exception object dies on the waiting side, never back on the thread that threw it: an
// exception_ptr's count lives in the uninstrumented C++ runtime, so a last release on the
// throwing thread after the waiter has read what() looks to ThreadSanitizer like an
// unordered destroy (and the waiter is the one that owns the error). Later waits throw an
// Error with the same message.
class Completion : public Work::Impl {
 public:
  void finish(std::exception_ptr error);
  bool done() override;
  void wait() override;

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::exception_ptr error_;  // until the first wait() takes it
  bool failed_ = false;
  std::string message_;  // its what(), for the waits after that
};

}  // namespace dpcore::comm
