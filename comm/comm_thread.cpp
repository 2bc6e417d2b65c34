#include "comm/comm_thread.h"

namespace dpcore::comm {

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_one();
  thread_.join();
}

Work CommThread::submit(std::function<void()> task) {
  auto completion = std::make_shared<Completion>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({std::move(task), completion});
  }
  queued_.notify_one();
  return Work(completion);
}

void CommThread::loop() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      item.task();
    } catch (...) {
      error = std::current_exception();
    }
    // Moved: this thread keeps no reference to the exception (comm::Completion says why).
    item.completion->finish(std::move(error));
  }
}

}  // namespace dpcore::comm
