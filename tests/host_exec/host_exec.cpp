// The block runner of the host execution layer (host_exec.h). The threads of a block are
// fibers (a stack each, switched by switch_stacks below) on the launching OS thread, run round-robin: a fiber runs until it
// waits (barrier, shuffle) or exits, then the next runnable one goes on. Switching costs
// a fraction of a microsecond where OS threads cost a system call per wake-up, which is
// what lets every hand kernel run through here in CI. The sanitizers are told about every
// switch, so that they treat each fiber as a thread of its own:
//   * AddressSanitizer: __sanitizer_start/finish_switch_fiber keep its stack bookkeeping
//     right on the fibers' stacks;
//   * ThreadSanitizer: each fiber is a TSan fiber, switched to WITHOUT synchronisation, so
//     two fibers are ordered only by what a GPU would order them by: a barrier all of them
//     passed (__tsan_release on arrival, __tsan_acquire on leaving), a completed warp
//     exchange, the end of the previous block, and the launch itself. Two threads touching
//     one word between barriers, one writing, is then reported as a race, as
//     compute-sanitizer's racecheck would. The scheduler's own bookkeeping is excluded from
//     instrumentation (kNotInstrumented), or every switch would look like a race.
#include "host_exec/host_exec.h"
#include "host_exec/runtime/bookkeeping.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bitset>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define HOST_EXEC_ASAN 1
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(DPCORE_SANITIZE_UNDEFINED)
#include <sanitizer/common_interface_defs.h>
#define HOST_EXEC_SANITIZER 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define HOST_EXEC_TSAN 1
#endif

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace host_exec {
namespace {

#define kNotInstrumented __attribute__((no_sanitize("thread")))

constexpr int kMaxThreads = 1024;
// A fiber's stack: the deepest any test reached under ASan, UBSan and the unwinding of a
// failed launch was about 5 KiB (measured by filling the stacks with a pattern), so 64 KiB
// leaves a margin of 12; a guard page below each turns an overflow into a crash at once.
constexpr size_t kStackBytes = 64 * 1024, kGuardBytes = 4096;

// Thrown inside a fiber that must stop because the launch has failed: it unwinds the
// kernel's frames and is caught at the fiber's entry.
struct Stop {};

std::string triple(unsigned x, unsigned y, unsigned z) {
  std::ostringstream os;
  os << "(" << x << "," << y << "," << z << ")";
  return os.str();
}
std::string hex(unsigned mask) {
  std::ostringstream os;
  os << "0x" << std::hex << mask;
  return os.str();
}
std::string lanes(unsigned mask) {
  std::string out;
  for (int l = 0; l < 32; ++l)
    if (mask >> l & 1u) out += (out.empty() ? "" : ",") + std::to_string(l);
  return out;
}

// switch_stacks(save, to): the running code's callee-saved registers (rbp, rbx, r12-r15,
// and the SSE and x87 control words) pushed on its own stack, that stack pointer stored in
// *save, `to` loaded, and what a switch away from there pushed popped, so that it returns
// into the code that made that switch. The System V ABI has the caller keep every other
// register, so a switch costs about a function call: 22 ns a round trip here, where
// glibc's swapcontext, which also saves the signal mask with a system call and the whole
// floating-point environment, took 650 ns. The host build runs on x86-64 only.
#if !defined(__x86_64__)
#error "host_exec switches fiber stacks with x86-64 instructions (switch_stacks)"
#endif
extern "C" void host_exec_switch_stacks(void** save, void* to);
asm(R"(
  .text
  .globl host_exec_switch_stacks
  .type host_exec_switch_stacks, @function
host_exec_switch_stacks:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size host_exec_switch_stacks, .-host_exec_switch_stacks
)");

// The stack pointer a first switch to a fresh stack takes: the frame switch_stacks pops
// (the calling thread's control words, zeroed registers), then `start` to return into,
// whose own return address is 0 (where a backtrace ends). `start` begins as a called
// function does, its stack pointer 8 bytes below a 16-byte boundary, and never returns.
void* first_frame(void* stack, size_t bytes, void (*start)()) {
  void** sp = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15));
  *--sp = nullptr;
  *--sp = reinterpret_cast<void*>(start);
  for (int r = 0; r < 6; ++r) *--sp = nullptr;
  uint32_t control[2] = {};
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  std::memcpy(--sp, control, sizeof control);
  return sp;
}

// A fiber's stack and sanitizer identity, kept from launch to launch.
struct Fiber {
  void* sp = nullptr;  // where its stack stopped at its last switch away
  void* stack = nullptr;
#ifdef HOST_EXEC_TSAN
  void* tsan = nullptr;
#endif
};

enum class State : char { Runnable, AtBarrier, InExchange, Exited };

// One exchange in progress among the lanes of a warp.
struct Warp {
  unsigned arrived = 0;  // lanes waiting in it
  unsigned mask = 0;     // the mask they gave
  const char* intrinsic = "";
  uint64_t offered[32] = {};
  int source[32] = {};
  uint64_t result[32] = {};
  uint64_t generation = 0;  // completed exchanges
  char sync[2] = {};        // TSan's objects for exchanges of even and odd generation
};

class Launch;
thread_local Launch* running = nullptr;  // the launch in progress on this thread
Launch* running_launch(const char* call);

class Launch {
 public:
  Launch(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& body, const std::vector<Fiber*>& fibers)
      : kernel_(kernel), grid_(grid), block_(block), body_(body), threads_(int(block.x * block.y * block.z)),
        fibers_(fibers) {}

  // Every block in turn; returns the error, or an empty string.
  kNotInstrumented std::string run() {
    blockDim = block_;
    gridDim = grid_;
#ifdef HOST_EXEC_TSAN
    main_tsan_ = __tsan_get_current_fiber();
    __tsan_release(&launch_sync_);  // the caller's writes (inputs, outputs) come before every thread
#endif
    const uint64_t blocks = uint64_t(grid_.x) * grid_.y * grid_.z;
    for (uint64_t b = 0; b < blocks && !failed_; ++b) {
      block_index_ = b;
      blockIdx = uint3{unsigned(b % grid_.x), unsigned(b / grid_.x % grid_.y), unsigned(b / (uint64_t(grid_.x) * grid_.y))};
      run_block();
    }
#ifdef HOST_EXEC_TSAN
    __tsan_acquire(&block_sync_[0]);  // every thread's writes come before the caller goes on
    __tsan_acquire(&block_sync_[1]);
#endif
    return failed_ ? error_ : std::string();
  }

  kNotInstrumented void sync_threads() {
    stop_if_failed();
#ifdef HOST_EXEC_TSAN
    const uint64_t generation = barrier_generation_;
    __tsan_release(&barrier_sync_[generation % 2]);
#endif
    state_[current_] = State::AtBarrier;
    if (++at_barrier_ == threads_) {  // the last one in opens the barrier for all
      at_barrier_ = 0;
      ++barrier_generation_;
      for (int t = 0; t < threads_; ++t)
        if (state_[t] == State::AtBarrier) state_[t] = State::Runnable;
    } else {
      switch_to_scheduler();
    }
    stop_if_failed();
#ifdef HOST_EXEC_TSAN
    __tsan_acquire(&barrier_sync_[generation % 2]);
#endif
  }

  kNotInstrumented uint64_t exchange(unsigned mask, uint64_t value, int source, const char* intrinsic) {
    stop_if_failed();
    const int me = current_, lane = me % 32, first = me - lane;
    Warp& warp = warps_[me / 32];
    if (!(mask >> lane & 1u))
      fail(std::string(intrinsic) + " with mask " + hex(mask) + " that leaves out the calling lane " + std::to_string(lane));
    if (warp.arrived && (warp.mask != mask || std::strcmp(warp.intrinsic, intrinsic) != 0))
      fail(std::string(intrinsic) + " with mask " + hex(mask) + " while lanes " + lanes(warp.arrived) +
           " of the warp wait in " + warp.intrinsic + " with mask " + hex(warp.mask));
    for (int l = 0; l < 32; ++l)
      if ((mask >> l & 1u) && (first + l >= threads_ || state_[first + l] == State::Exited))
        fail(std::string(intrinsic) + " with mask " + hex(mask) + " names lane " + std::to_string(l) +
             (first + l >= threads_ ? ", which does not exist (the block has " + std::to_string(threads_) + " threads)"
                                    : ", which has exited"));
    if (source < 0 || source > 31 || !(mask >> source & 1u))
      fail(std::string(intrinsic) + " reads lane " + std::to_string(source) + ", outside the mask " + hex(mask));
#ifdef HOST_EXEC_TSAN
    const uint64_t generation = warp.generation;
    __tsan_release(&warp.sync[generation % 2]);
#endif
    warp.offered[lane] = value;
    warp.source[lane] = source;
    warp.mask = mask;
    warp.intrinsic = intrinsic;
    warp.arrived |= 1u << lane;
    if (warp.arrived == mask) {  // the last lane in completes the exchange for all
      for (int l = 0; l < 32; ++l)
        if (mask >> l & 1u) {
          warp.result[l] = warp.offered[warp.source[l]];
          if (first + l != me) state_[first + l] = State::Runnable;
        }
      warp.arrived = 0;
      ++warp.generation;
    } else {
      state_[me] = State::InExchange;
      switch_to_scheduler();
    }
    stop_if_failed();
#ifdef HOST_EXEC_TSAN
    __tsan_acquire(&warp.sync[generation % 2]);
#endif
    return warp.result[lane];
  }

  // The fiber's entry: thread `current_` of the current block.
  // "host kernel K: block B thread T", for a sanitizer report that ends the process.
  kNotInstrumented std::string running_thread() const { return where(current_); }

  static void entry() {
    Launch& launch = *running_launch("a kernel thread");
#ifdef HOST_EXEC_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &launch.main_stack_bottom_, &launch.main_stack_size_);
#endif
#ifdef HOST_EXEC_TSAN
    __tsan_acquire(&launch.launch_sync_);
    __tsan_acquire(&launch.block_sync_[(launch.block_index_ + 1) % 2]);  // the previous block's threads
#endif
    if (!launch.failed_) {
      try {
        launch.body_();
      } catch (const Stop&) {
      } catch (const std::exception& e) {
        launch.record(std::string("the kernel threw: ") + e.what(), launch.current_);
      }
    }
    launch.exit_current();
  }

 private:
  std::string where(int t) const {
    return "host kernel " + std::string(kernel_) + ": block " + triple(blockIdx.x, blockIdx.y, blockIdx.z) +
           " thread " + triple(unsigned(t) % block_.x, unsigned(t) / block_.x % block_.y, unsigned(t) / (block_.x * block_.y));
  }

  kNotInstrumented void stop_if_failed() const {
    if (failed_) throw Stop{};
  }
  // Records the first error (naming `culprit`, by default the running thread); every
  // waiting thread is then resumed to unwind. Throws Stop when called from a fiber.
  kNotInstrumented void record(const std::string& what, int culprit) {
    if (failed_) return;
    failed_ = true;
    error_ = where(culprit) + ": " + what;
  }
  [[noreturn]] void fail(const std::string& what) {
    record(what, current_);
    throw Stop{};
  }

  // Thread `current_` has returned from the kernel: it stays exited until the block ends.
  kNotInstrumented void exit_current() {
    const int me = current_;
    state_[me] = State::Exited;
    if (first_exited_ < 0) first_exited_ = me;
    const Warp& warp = warps_[me / 32];
    if (!failed_ && warp.arrived && (warp.mask >> (me % 32) & 1u))
      record("exited while lanes " + lanes(warp.arrived) + " wait for it in " + warp.intrinsic + " (mask " +
                 hex(warp.mask) + ")",
             me);
#ifdef HOST_EXEC_TSAN
    __tsan_release(&block_sync_[block_index_ % 2]);  // all its work, the error message included, before the next block
#endif
    final_switch_to_scheduler();
  }

  kNotInstrumented void run_block() {
    for (int t = 0; t < threads_; ++t) {
      start_afresh(*fibers_[t]);
      state_[t] = State::Runnable;
    }
    for (Warp& w : warps_) w.arrived = 0;
    at_barrier_ = 0;
    first_exited_ = -1;
    for (;;) {
      bool ran = false, all_exited = true;
      for (int t = 0; t < threads_; ++t) {
        if (state_[t] == State::Runnable) {
          resume(t);
          ran = true;
        }
        all_exited = all_exited && state_[t] == State::Exited;
      }
      if (all_exited) return;
      if (ran) continue;
      // Nobody can run: a barrier opens only when every thread arrives, an exchange
      // completes when its last lane arrives. Record why, then let the waiting unwind.
      if (!failed_) {
        int at_barrier = 0, in_exchange = 0, exited = 0;
        for (int t = 0; t < threads_; ++t) {
          at_barrier += state_[t] == State::AtBarrier;
          in_exchange += state_[t] == State::InExchange;
          exited += state_[t] == State::Exited;
        }
        if (exited > 0 && at_barrier > 0 && in_exchange == 0)
          record("exited while " + std::to_string(at_barrier) + " threads of the block wait at __syncthreads()",
                 first_exited_);
        else
          record("deadlock: " + std::to_string(at_barrier) + " threads wait at __syncthreads(), " +
                     std::to_string(in_exchange) + " in a warp shuffle, " + std::to_string(exited) + " have exited",
                 first_waiting());
      }
      for (int t = 0; t < threads_; ++t)
        if (state_[t] != State::Exited) state_[t] = State::Runnable;
    }
  }

  // A fiber that will start at entry() on its own stack.
  kNotInstrumented static void start_afresh(Fiber& f) {
#ifdef HOST_EXEC_ASAN
    // The frames of the fiber's last run, which ended in a switch rather than a return,
    // left their redzones poisoned: cleared once here, as the fiber starts afresh (between
    // its own switches the stack is as the fiber left it).
    __asan_unpoison_memory_region(f.stack, kStackBytes);
#endif
    f.sp = first_frame(f.stack, kStackBytes, &Launch::entry);
  }

  kNotInstrumented int first_waiting() const {
    for (int t = 0; t < threads_; ++t)
      if (state_[t] != State::Exited) return t;
    return 0;
  }

  // Scheduler -> fiber t, until it waits or exits.
  kNotInstrumented void resume(int t) {
    current_ = t;
    threadIdx = uint3{unsigned(t) % block_.x, unsigned(t) / block_.x % block_.y, unsigned(t) / (block_.x * block_.y)};
    Fiber& f = *fibers_[t];
#ifdef HOST_EXEC_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, f.stack, kStackBytes);
#endif
#ifdef HOST_EXEC_TSAN
    __tsan_switch_to_fiber(f.tsan, __tsan_switch_to_fiber_no_sync);
#endif
    host_exec_switch_stacks(&scheduler_sp_, f.sp);
#ifdef HOST_EXEC_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  }

  // Fiber -> scheduler; returns when the scheduler resumes this fiber.
  kNotInstrumented void switch_to_scheduler() {
    Fiber& f = *fibers_[current_];
#ifdef HOST_EXEC_ASAN
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, main_stack_bottom_, main_stack_size_);
#endif
#ifdef HOST_EXEC_TSAN
    __tsan_switch_to_fiber(main_tsan_, __tsan_switch_to_fiber_no_sync);
#endif
    host_exec_switch_stacks(&f.sp, scheduler_sp_);
#ifdef HOST_EXEC_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, &main_stack_bottom_, &main_stack_size_);
#endif
  }

  // The last switch of a fiber's run: its stack starts afresh for the next block.
  kNotInstrumented void final_switch_to_scheduler() {
    Fiber& f = *fibers_[current_];
#ifdef HOST_EXEC_ASAN
    __sanitizer_start_switch_fiber(nullptr, main_stack_bottom_, main_stack_size_);
#endif
#ifdef HOST_EXEC_TSAN
    __tsan_switch_to_fiber(main_tsan_, __tsan_switch_to_fiber_no_sync);
#endif
    host_exec_switch_stacks(&f.sp, scheduler_sp_);
    __builtin_unreachable();
  }

  const char* kernel_;
  const dim3 grid_, block_;
  const std::function<void()>& body_;
  const int threads_;
  const std::vector<Fiber*>& fibers_;

  void* scheduler_sp_ = nullptr;  // where the launching thread's stack stopped
  int current_ = -1;
  State state_[kMaxThreads] = {};
  Warp warps_[kMaxThreads / 32];
  int at_barrier_ = 0;
  int first_exited_ = -1;
  bool failed_ = false;
  std::string error_;
  const void* main_stack_bottom_ = nullptr;
  size_t main_stack_size_ = 0;
#ifdef HOST_EXEC_TSAN
  void* main_tsan_ = nullptr;
#endif
  // Addresses for TSan's happens-before edges (their contents are never used).
  // Barriers and blocks alternate between two objects: the thread that opens barrier g
  // runs on and may arrive at barrier g + 1 before the others have left g, and they must
  // not acquire what it did in between (nor the threads of block b what block b did).
  char launch_sync_ = 0, block_sync_[2] = {}, barrier_sync_[2] = {};
  uint64_t barrier_generation_ = 0, block_index_ = 0;
};

// Fiber stacks and sanitizer identities, shared by every launching thread: a launch takes
// one fiber per thread of its block and gives them back when it ends. Shared, because
// ThreadSanitizer's vector clocks have an entry per thread and fiber alive and every
// barrier costs each fiber of the block a pass over its clock: with a set of fibers kept
// per launching thread (every stream's worker), a test of pipeline stages on four emulated
// GPUs made 2,816 fibers and spent half its time in those passes.
//
// A fiber goes on running the launches of the thread that last gave it back. Taken by
// another thread, it is made over first: a fresh stack and a fresh TSan fiber, which knows
// only what its new thread knows. Reused as it was, it would bring along what it learned
// in the other thread's kernels (their barriers), and a race between two streams' kernels
// would go unreported; its old stack's accesses would look like another fiber's. Making
// over costs about what making costs, so a launch takes, in order: the calling thread's
// own idle fibers, those of threads that have ended, new ones while the pool holds fewer
// than a bound (1024, a block's most), the idle fibers of the threads that launched least recently, and new
// ones past that bound when every fiber is busy. The pool's own bookkeeping is hidden from
// ThreadSanitizer (host_runtime::Bookkeeping): its lock would order every launching thread
// after every other, which no GPU does.
class FiberPool;
FiberPool& fiber_pool();

class FiberPool {
 public:
  // The calling thread's launch takes n fibers (its busy list, until give_back).
  kNotInstrumented const std::vector<Fiber*>& take(size_t n) {
    host_runtime::Bookkeeping hide;
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Fiber*>& fibers = threads_[this_thread().id].busy;
    move_idle(threads_[this_thread().id].idle, fibers, n);
    make_over(ended_, fibers, n);
    while (fibers.size() < n && made_ < bound_) add_new(fibers);
    if (fibers.size() < n) {
      std::vector<ThreadFibers*> by_last_launch;
      for (auto& entry : threads_) by_last_launch.push_back(&entry.second);
      std::sort(by_last_launch.begin(), by_last_launch.end(),
                [](const ThreadFibers* a, const ThreadFibers* b) { return a->last_launch < b->last_launch; });
      for (ThreadFibers* other : by_last_launch) make_over(other->idle, fibers, n);
    }
    while (fibers.size() < n) add_new(fibers);
    for (Fiber* f : fibers)
      if (!f->stack) make(*f);
    return fibers;
  }

  kNotInstrumented void give_back() {
    host_runtime::Bookkeeping hide;
    std::lock_guard<std::mutex> lock(mutex_);
    ThreadFibers& mine = threads_[this_thread().id];
    mine.idle.insert(mine.idle.end(), mine.busy.begin(), mine.busy.end());
    mine.busy.clear();
    mine.last_launch = ++launches_;
  }

  kNotInstrumented size_t set_bound(size_t fibers) {
    host_runtime::Bookkeeping hide;
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(bound_, fibers);
  }

 private:
  // A launching thread's fibers. The running launch's are here rather than in a vector on
  // the thread's stack: while the thread runs a fiber, LeakSanitizer scans the fiber's
  // stack, not the thread's, and would report that vector as leaked at an exit that finds
  // a launch in progress.
  struct ThreadFibers {
    std::vector<Fiber*> idle, busy;
    uint64_t last_launch = 0;
  };

  // A launching thread, by a number of its own (std::thread::id may name a thread that has
  // ended): as it ends, its idle fibers go to the ended threads' list.
  struct Thread {
    uint64_t id;
    Thread() {
      static std::atomic<uint64_t> next{1};
      id = next++;
    }
    kNotInstrumented ~Thread() { fiber_pool().thread_ended(id); }
  };
  static Thread& this_thread() {
    thread_local Thread me;
    return me;
  }

  kNotInstrumented void thread_ended(uint64_t id) {
    host_runtime::Bookkeeping hide;
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = threads_.find(id);
    if (it == threads_.end()) return;
    ended_.insert(ended_.end(), it->second.idle.begin(), it->second.idle.end());
    threads_.erase(it);
  }

  static void move_idle(std::vector<Fiber*>& from, std::vector<Fiber*>& to, size_t n) {
    const size_t moved = std::min(n - std::min(n, to.size()), from.size());
    to.insert(to.end(), from.end() - moved, from.end());
    from.resize(from.size() - moved);
  }
  kNotInstrumented static void make_over(std::vector<Fiber*>& from, std::vector<Fiber*>& to, size_t n) {
    const size_t first = to.size();
    move_idle(from, to, n);
    for (size_t i = first; i < to.size(); ++i) release(*to[i]);
  }
  void add_new(std::vector<Fiber*>& to) {
    to.push_back(new Fiber);
    ++made_;
  }

  // A stack mmap'd (ASan treats it as a stack, not as a heap block) above its guard page.
  kNotInstrumented static void make(Fiber& f) {
    void* mapped =
        mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (mapped == MAP_FAILED || mprotect(mapped, kGuardBytes, PROT_NONE) != 0)
      throw std::runtime_error("host_exec: cannot map a fiber stack");
    f.stack = static_cast<char*>(mapped) + kGuardBytes;
#ifdef HOST_EXEC_TSAN
    f.tsan = __tsan_create_fiber(0);  // knows nothing yet: its entry acquires the launch
    __tsan_set_fiber_name(f.tsan, "kernel thread");
#endif
  }
  // Unmapping also clears ThreadSanitizer's record of the stack's accesses; AddressSanitizer's
  // is cleared first (it keeps the poisoned redzones of the fiber's last frames otherwise,
  // and whatever is mapped there next, a thread's stack and TLS among others, would
  // inherit them).
  kNotInstrumented static void release(Fiber& f) {
#ifdef HOST_EXEC_ASAN
    __asan_unpoison_memory_region(f.stack, kStackBytes);
#endif
    munmap(static_cast<char*>(f.stack) - kGuardBytes, kGuardBytes + kStackBytes);
    f.stack = nullptr;
#ifdef HOST_EXEC_TSAN
    __tsan_destroy_fiber(f.tsan);
    f.tsan = nullptr;
#endif
  }

  std::mutex mutex_;
  std::map<uint64_t, ThreadFibers> threads_;  // by launching thread
  std::vector<Fiber*> ended_;      // given back by threads that have ended
  size_t made_ = 0, bound_ = 1024;
  uint64_t launches_ = 0;
};

// Leaked on purpose, as its fibers: a thread may launch while static destructors run.
FiberPool& fiber_pool() {
  static FiberPool* pool = new FiberPool;
  return *pool;
}

// A launch's fibers, given back when it ends, however it ends.
class TakenFibers {
 public:
  explicit TakenFibers(size_t n) : fibers_(fiber_pool().take(n)) {}
  ~TakenFibers() { fiber_pool().give_back(); }
  TakenFibers(const TakenFibers&) = delete;
  TakenFibers& operator=(const TakenFibers&) = delete;
  const std::vector<Fiber*>& fibers() const { return fibers_; }

 private:
  const std::vector<Fiber*>& fibers_;
};

// The scheduler's side of `running`, not instrumented like the rest of the bookkeeping
// (the fibers read it; TSan must not take that for a race).
kNotInstrumented void set_running(Launch* launch) { running = launch; }
kNotInstrumented Launch* running_launch(const char* call) {
  if (!running) throw std::logic_error(std::string(call) + " called outside a kernel launch");
  return running;
}

#ifdef HOST_EXEC_SANITIZER
// A sanitizer report names the source line; this names the CUDA thread it came from.
kNotInstrumented void name_the_running_thread() {
  if (running) std::fprintf(stderr, "%s was running\n", running->running_thread().c_str());
}
#endif

}  // namespace

void check_configuration(const char* kernel, dim3 grid, dim3 block) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  std::string problem;
  if (threads == 0 || threads > kMaxThreads || block.z > 64)
    problem = "block " + triple(block.x, block.y, block.z) + " (at most 1024 threads, z at most 64, none empty)";
  else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    problem = "grid " + triple(grid.x, grid.y, grid.z) + " (x at most 2^31-1, y and z at most 65535, none empty)";
  if (!problem.empty())
    throw std::runtime_error("host kernel " + std::string(kernel) + ": invalid configuration argument: " + problem);
}

void run_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& body) {
#ifdef HOST_EXEC_SANITIZER
  static const bool named = (__sanitizer_set_death_callback(name_the_running_thread), true);
  (void)named;
#endif
  check_configuration(kernel, grid, block);
  const TakenFibers taken(size_t(block.x) * block.y * block.z);
  Launch launch(kernel, grid, block, body, taken.fibers());
  set_running(&launch);
  const std::string error = launch.run();
  set_running(nullptr);
  if (!error.empty()) throw std::runtime_error(error);
}

size_t set_fiber_pool_bound(size_t fibers) { return fiber_pool().set_bound(fibers); }

void sync_threads() { running_launch("__syncthreads()")->sync_threads(); }

uint64_t exchange(unsigned mask, uint64_t value, int source, const char* intrinsic) {
  return running_launch(intrinsic)->exchange(mask, value, source, intrinsic);
}

}  // namespace host_exec
