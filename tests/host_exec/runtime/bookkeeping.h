// What ThreadSanitizer may see of the runtime. The runtime's own bookkeeping (its locks,
// queues, reference counts and lookups) would order every thread that calls it after
// every other, hiding the races it exists to show: two host threads that both queue work
// would look synchronised through its mutex, and so would a worker and a host thread that
// merely waited on the same stream. So the bookkeeping runs hidden (no accesses, no
// synchronisation recorded), and the runtime states the orderings CUDA promises as
// explicit edges, release on one side and acquire on the other:
//   * queueing a task happens before the task runs (enqueue edge);
//   * a task's completion happens before whatever waited for it and saw it done: a
//     stream or event wait, a synchronising call, a successful query (completion edge);
//   * tasks of one stream run in order on one worker thread (program order).
// The user-visible work itself (a kernel's grid, a copy's memcpy) runs visible.
#pragma once

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
extern "C" void AnnotateIgnoreSyncBegin(const char* file, int line);
extern "C" void AnnotateIgnoreSyncEnd(const char* file, int line);
#endif

namespace host_runtime {

#if defined(__SANITIZE_THREAD__)
namespace detail {
inline thread_local int hidden_depth = 0;
inline void hide() {
  __tsan_ignore_thread_begin();
  AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
}
inline void show() {
  AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
  __tsan_ignore_thread_end();
}
}  // namespace detail

// Hides the calling thread from ThreadSanitizer while it lives (nests).
class Bookkeeping {
 public:
  Bookkeeping() {
    if (detail::hidden_depth++ == 0) detail::hide();
  }
  ~Bookkeeping() {
    if (--detail::hidden_depth == 0) detail::show();
  }
  Bookkeeping(const Bookkeeping&) = delete;
  Bookkeeping& operator=(const Bookkeeping&) = delete;
};

// Shows the calling thread again while it lives, inside a Bookkeeping (the user's work).
class Visible {
 public:
  Visible() : depth_(detail::hidden_depth) {
    if (depth_ > 0) detail::show();
    detail::hidden_depth = 0;
  }
  ~Visible() {
    detail::hidden_depth = depth_;
    if (depth_ > 0) detail::hide();
  }
  Visible(const Visible&) = delete;
  Visible& operator=(const Visible&) = delete;

 private:
  int depth_;
};

inline void release_edge(const void* token) {
  Visible v;
  __tsan_release(const_cast<void*>(token));
}
inline void acquire_edge(const void* token) {
  Visible v;
  __tsan_acquire(const_cast<void*>(token));
}
#else
class Bookkeeping {
 public:
  Bookkeeping() {}  // user-provided: no unused-variable warnings where it is declared
};
class Visible {
 public:
  Visible() {}
};
inline void release_edge(const void*) {}
inline void acquire_edge(const void*) {}
#endif

}  // namespace host_runtime
