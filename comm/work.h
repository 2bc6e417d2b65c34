// Work: the handle of one asynchronous collective (c10d's Work). The collective runs on a
// communication thread or stream; wait() blocks until it has finished and rethrows its
// error, done() asks without blocking. Dropping a Work does not cancel the collective.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

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
class Completion : public Work::Impl {
 public:
  void finish(std::exception_ptr error);
  bool done() override;
  void wait() override;

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace dpcore::comm
