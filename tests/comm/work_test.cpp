// Work and Completion: a collective's error reaches the thread that waits for it, and dies
// there. The exception object must not be destroyed back on the thread that threw it after
// the waiter has used it: exception_ptr counts its references inside the uninstrumented C++
// runtime, so ThreadSanitizer cannot see that ordering and reports the destroy as a race
// (it did, in CI, in a replica-timeout test).
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "comm/comm_thread.h"
#include "comm/work.h"
#include "kernels/error.h"

namespace dpcore::comm {
namespace {

// An error that notes the thread its destructor runs on.
class NotesWhereItDies : public Error {
 public:
  NotesWhereItDies(const std::string& what, std::thread::id* died_on) : Error(what), died_on_(died_on) {}
  ~NotesWhereItDies() override { *died_on_ = std::this_thread::get_id(); }

 private:
  std::thread::id* died_on_;
};

TEST(Completion, TheErrorDiesOnTheThreadThatWaitedForIt) {
  std::thread::id died_on;
  auto completion = std::make_shared<Completion>();
  std::promise<void> waiter_done;
  // The thread that ran the work finishes it, then keeps its reference until the waiter has
  // handled the error and let go of its own: the order in which a comm thread outlives the
  // Work it returned.
  std::thread worker([&, mine = completion]() mutable {
    // As CommThread::loop: the exception caught, then handed over once the handler is left
    // (inside it, the handler's own reference would outlive the waiter's).
    std::exception_ptr error;
    try {
      throw NotesWhereItDies("allreduce: replica 1 did not arrive", &died_on);
    } catch (...) {
      error = std::current_exception();
    }
    mine->finish(std::move(error));
    waiter_done.get_future().wait();
    mine.reset();
  });
  {
    Work work(std::move(completion));
    try {
      work.wait();
      ADD_FAILURE() << "wait() returned although the work failed";
    } catch (const NotesWhereItDies& e) {
      EXPECT_STREQ(e.what(), "allreduce: replica 1 did not arrive");
    }
  }
  waiter_done.set_value();
  worker.join();
  EXPECT_EQ(died_on, std::this_thread::get_id()) << "the error was destroyed on the thread that threw it";
}

TEST(Completion, EveryWaitAfterTheFirstThrowsTheSameMessage) {
  CommThread thread;
  std::thread::id died_on;
  Work work = thread.submit([&] { throw NotesWhereItDies("broadcast: root 3 out of range", &died_on); });
  EXPECT_THROW(work.wait(), NotesWhereItDies);  // the first wait gets the exception itself
  for (int i = 0; i < 2; ++i) {
    try {
      work.wait();
      ADD_FAILURE() << "wait() " << i + 2 << " returned although the work failed";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "broadcast: root 3 out of range");
    }
  }
  EXPECT_TRUE(work.done());
}

TEST(Completion, WorkThatSucceedsWaitsWithoutThrowing) {
  CommThread thread;
  int ran = 0;
  Work work = thread.submit([&] { ++ran; });
  work.wait();
  work.wait();
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace dpcore::comm
