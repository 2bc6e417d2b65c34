// The host CUDA runtime (include/cuda_runtime_api.h, runtime/): each test states one rule
// of CUDA's documented semantics and checks the runtime keeps it: stream order, streams
// running concurrently, events, the legacy default stream, copies' host synchronisation,
// NaN-filled memory, device affinity, sticky errors, and the caching allocator's stream
// rule on top of it. Kernels that must wait are held at a gate the test opens, so "not
// yet" is observed without timing guesses.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "host_exec/runtime_test_util.h"
#include "kernels/cuda_runtime/caching_allocator.h"

namespace {

using dpcore::kernels::cuda::launch;
using namespace host_runtime_test;
using Clock = std::chrono::steady_clock;

// Holds its stream until the test opens the gate (or 20 s pass: then it records the
// timeout in gate[1], so that a runtime that serialises what should be concurrent fails
// instead of hanging).
__global__ void wait_at_gate(std::atomic<int>* gate) {
  const auto give_up = Clock::now() + std::chrono::seconds(20);
  while (gate[0].load() == 0) {
    if (Clock::now() > give_up) {
      gate[1].store(1);
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}
__global__ void open_gate(std::atomic<int>* gate) { gate[0].store(1); }

struct Gate {
  std::atomic<int> state[2] = {};  // open, timed out
  std::atomic<int>* get() { return state; }
  void open() { state[0].store(1); }
  bool timed_out() const { return state[1].load() != 0; }
};

TEST(HostRuntime, AStreamRunsItsWorkInTheOrderItWasQueued) {
  float* x = device_floats(32);
  cudaStream_t s = non_blocking_stream();
  launch("set_to", set_to, 1, 32, s, x, 0.f);
  for (int i = 0; i < 50; ++i) launch("add_one", add_one, 1, 32, s, x);
  CUDA_CHECK(cudaStreamSynchronize(s));
  for (float v : download(x, 32)) EXPECT_EQ(v, 50.f);
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFree(x));
}

TEST(HostRuntime, TwoStreamsRunConcurrently) {
  // The first stream waits for the second to open its gate: only concurrent streams finish.
  Gate gate;
  cudaStream_t a = non_blocking_stream(), b = non_blocking_stream();
  launch("wait_at_gate", wait_at_gate, 1, 1, a, gate.get());
  launch("open_gate", open_gate, 1, 1, b, gate.get());
  CUDA_CHECK(cudaStreamSynchronize(a));
  EXPECT_FALSE(gate.timed_out()) << "the kernel on stream b did not run while stream a's waited";
  CUDA_CHECK(cudaStreamDestroy(a));
  CUDA_CHECK(cudaStreamDestroy(b));
}

TEST(HostRuntime, AnEventOrdersWorkOnAnotherStreamAndAnswersQueries) {
  Gate gate;
  float* x = device_floats(32);
  float* y = device_floats(32);
  cudaStream_t producer = non_blocking_stream(), consumer = non_blocking_stream();
  cudaEvent_t written;
  CUDA_CHECK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
  EXPECT_EQ(cudaEventQuery(written), cudaSuccess) << "an event never recorded counts as complete";
  launch("wait_at_gate", wait_at_gate, 1, 1, producer, gate.get());
  launch("set_to", set_to, 1, 32, producer, x, 7.f);
  CUDA_CHECK(cudaEventRecord(written, producer));
  CUDA_CHECK(cudaStreamWaitEvent(consumer, written, 0));
  launch("copy_values", copy_values, 1, 32, consumer, x, y);
  EXPECT_EQ(cudaEventQuery(written), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(consumer), cudaErrorNotReady) << "the consumer must wait for the event";
  gate.open();
  CUDA_CHECK(cudaEventSynchronize(written));
  EXPECT_EQ(cudaEventQuery(written), cudaSuccess);
  CUDA_CHECK(cudaStreamSynchronize(consumer));
  for (float v : download(y, 32)) EXPECT_EQ(v, 7.f);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, written, written), cudaErrorInvalidResourceHandle)
      << "an event made with cudaEventDisableTiming has no time";
  for (cudaStream_t s : {producer, consumer}) CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaEventDestroy(written));
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaFree(y));
}

TEST(HostRuntime, ElapsedTimeIsTheTimeBetweenTwoRecords) {
  // start is recorded after the first gate, end after the second, which opens 30 ms after
  // start has run: the elapsed time is at least 30 ms and at most the host's whole wait.
  cudaEvent_t start, end;
  cudaStream_t s = non_blocking_stream();
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&end));
  Gate first, second;
  const auto before = Clock::now();
  launch("wait_at_gate", wait_at_gate, 1, 1, s, first.get());
  CUDA_CHECK(cudaEventRecord(start, s));
  launch("wait_at_gate", wait_at_gate, 1, 1, s, second.get());
  CUDA_CHECK(cudaEventRecord(end, s));
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  first.open();
  CUDA_CHECK(cudaEventSynchronize(start));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  second.open();
  CUDA_CHECK(cudaEventSynchronize(end));
  const double host_ms = std::chrono::duration<double, std::milli>(Clock::now() - before).count();
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 30.f);
  EXPECT_LE(ms, host_ms);
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(end));
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(HostRuntime, TheLegacyStreamWaitsForBlockingStreamsButNotForNonBlockingOnes) {
  float* x = device_floats(32);
  for (const unsigned flags : {cudaStreamDefault, cudaStreamNonBlocking}) {
    SCOPED_TRACE(flags == cudaStreamDefault ? "blocking stream" : "non-blocking stream");
    Gate gate;
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, flags));
    launch("wait_at_gate", wait_at_gate, 1, 1, s, gate.get());
    launch("set_to", set_to, 1, 32, nullptr, x, 3.f);  // the legacy stream
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (flags == cudaStreamDefault) {
      EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);
    } else {
      CUDA_CHECK(cudaStreamSynchronize(nullptr));  // would time out the gate if it waited
      EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    }
    gate.open();
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_FALSE(gate.timed_out());
    CUDA_CHECK(cudaStreamDestroy(s));
  }
  // And work queued on a blocking stream after legacy work waits for it.
  Gate gate;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  launch("wait_at_gate", wait_at_gate, 1, 1, nullptr, gate.get());
  launch("set_to", set_to, 1, 32, s, x, 4.f);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  gate.open();
  CUDA_CHECK(cudaStreamSynchronize(s));
  for (float v : download(x, 32)) EXPECT_EQ(v, 4.f);
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFree(x));
}

TEST(HostRuntime, DeviceMemoryIsNanWhenAllocatedAndAgainWhenFreed) {
  const size_t n = 1000;
  float* x = device_floats(n);
  std::vector<float> fresh = download(x, n);
  EXPECT_TRUE(all_bits_set(fresh.data(), n * sizeof(float))) << "never-written device memory reads as NaN";
  launch("set_to", set_to, 1, 32, nullptr, x, 1.f);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(download(x, 1)[0], 1.f);
  CUDA_CHECK(cudaFree(x));
  // The block waits in the quarantine: what still reads it (here the host) reads NaN.
  EXPECT_TRUE(all_bits_set(x, n * sizeof(float)));
}

TEST(HostRuntime, AKernelThatTouchesAnotherDevicesMemoryFaultsUnlessPeerAccessIsOn) {
  CUDA_CHECK(cudaSetDevice(1));
  float* on_one = device_floats(32);
  CUDA_CHECK(cudaSetDevice(0));
  launch("set_to", set_to, 1, 32, nullptr, on_one, 2.f);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress) << "the error is sticky";
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  try {
    CUDA_CHECK(cudaDeviceSynchronize());
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "kernel set_to: argument 0 points into device 1's memory");
    EXPECT_CONTAINS(e.what(), "runs on device 0, which has no peer access to it");
  }
  CUDA_CHECK(cudaDeviceReset());
  cudaGetLastError();  // the calling thread's last error, left by the failed calls above
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "cudaDeviceReset cleared the sticky error";
  CUDA_CHECK(cudaDeviceEnablePeerAccess(1, 0));
  EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  cudaGetLastError();
  launch("set_to", set_to, 1, 32, nullptr, on_one, 2.f);
  CUDA_CHECK(cudaDeviceSynchronize());
  for (float v : download(on_one, 32)) EXPECT_EQ(v, 2.f);  // a copy between devices needs no peer access
  CUDA_CHECK(cudaFree(on_one));
}

TEST(HostRuntime, TheCurrentDeviceBelongsToEachHostThread) {
  CUDA_CHECK(cudaSetDevice(2));
  int seen_elsewhere = -1;
  std::thread([&] { cudaGetDevice(&seen_elsewhere); }).join();
  int here = -1;
  CUDA_CHECK(cudaGetDevice(&here));
  EXPECT_EQ(here, 2);
  EXPECT_EQ(seen_elsewhere, 0);
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  EXPECT_EQ(cudaSetDevice(count), cudaErrorInvalidDevice);
  cudaGetLastError();
  CUDA_CHECK(cudaSetDevice(0));
}

TEST(HostRuntime, ACopyWhoseDirectionOrLengthContradictsItsAddressesIsInvalid) {
  float* x = device_floats(8);
  std::vector<float> host(16, 1.f);
  EXPECT_EQ(cudaMemcpy(host.data(), x, 8 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(x, host.data(), 8 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(x, host.data(), 9 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue)
      << "one float past the end of the allocation";
  EXPECT_EQ(cudaMemset(host.data(), 0, 4), cudaErrorInvalidValue) << "cudaMemset of pageable memory";
  CUDA_CHECK(cudaMemcpy(x, host.data(), 8 * sizeof(float), cudaMemcpyDefault));
  for (float v : download(x, 8)) EXPECT_EQ(v, 1.f);
  cudaGetLastError();
  CUDA_CHECK(cudaFree(x));
}

TEST(HostRuntime, ACopyOutOfPageableMemoryStagesTheSourceBeforeItReturns) {
  Gate gate;
  float* x = device_floats(32);
  cudaStream_t s = non_blocking_stream();
  launch("wait_at_gate", wait_at_gate, 1, 1, s, gate.get());
  std::vector<float> source(32, 5.f);
  CUDA_CHECK(cudaMemcpyAsync(x, source.data(), 32 * sizeof(float), cudaMemcpyHostToDevice, s));
  std::fill(source.begin(), source.end(), -1.f);  // allowed: the source was staged
  gate.open();
  // Into pageable memory, even cudaMemcpyAsync returns with the copy done.
  std::vector<float> back(32, 0.f);
  CUDA_CHECK(cudaMemcpyAsync(back.data(), x, 32 * sizeof(float), cudaMemcpyDeviceToHost, s));
  for (float v : back) EXPECT_EQ(v, 5.f);
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFree(x));
}

TEST(HostRuntime, ACopyBetweenPinnedAndDeviceMemoryIsAsynchronous) {
  Gate gate;
  float* x = device_floats(32);
  void* pinned = nullptr;
  CUDA_CHECK(cudaHostAlloc(&pinned, 32 * sizeof(float), cudaHostAllocDefault));
  std::fill_n(static_cast<float*>(pinned), 32, 6.f);
  cudaStream_t s = non_blocking_stream();
  launch("wait_at_gate", wait_at_gate, 1, 1, s, gate.get());
  CUDA_CHECK(cudaMemcpyAsync(x, pinned, 32 * sizeof(float), cudaMemcpyHostToDevice, s));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << "queued behind the gate, not done by the call";
  gate.open();
  CUDA_CHECK(cudaStreamSynchronize(s));
  for (float v : download(x, 32)) EXPECT_EQ(v, 6.f);
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaFree(x));
}

TEST(HostRuntime, FreeWaitsForTheDeviceToFinish) {
  Gate gate;
  float* x = device_floats(32);
  cudaStream_t s = non_blocking_stream();
  launch("wait_at_gate", wait_at_gate, 1, 1, s, gate.get());
  launch("set_to", set_to, 1, 32, s, x, 1.f);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    gate.open();
  });
  const auto before = Clock::now();
  CUDA_CHECK(cudaFree(x));  // returns only after set_to has run: it is not a use after free
  EXPECT_GE(Clock::now() - before, std::chrono::milliseconds(25));
  opener.join();
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST(HostRuntime, ADestroyedStreamStillRunsWhatWasQueuedOnIt) {
  Gate gate;
  float* x = device_floats(32);
  cudaStream_t s = non_blocking_stream();
  launch("wait_at_gate", wait_at_gate, 1, 1, s, gate.get());
  launch("set_to", set_to, 1, 32, s, x, 8.f);
  cudaEvent_t done;
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(done, s));
  CUDA_CHECK(cudaStreamDestroy(s));  // returns at once
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady);
  gate.open();
  CUDA_CHECK(cudaEventSynchronize(done));
  for (float v : download(x, 32)) EXPECT_EQ(v, 8.f);
  CUDA_CHECK(cudaEventDestroy(done));
  CUDA_CHECK(cudaFree(x));
}

TEST(HostRuntime, ALaunchOnAnotherDevicesStreamFails) {
  CUDA_CHECK(cudaSetDevice(1));
  cudaStream_t s = non_blocking_stream();
  CUDA_CHECK(cudaSetDevice(0));
  float* x = device_floats(32);
  try {
    launch("set_to", set_to, 1, 32, s, x, 1.f);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "host kernel set_to: invalid resource handle: the stream belongs to device 1");
  }
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFree(x));
}

// ---- What only ThreadSanitizer sees: work on two streams with no event between them. ----
// A copy stream uploads x while a compute stream's kernel reads it, ordered by an event or
// (the bug) not: then the two worker threads touch x unordered. Returns y.
std::vector<float> read_a_copy(bool wait_for_the_copy) {
  float* x = device_floats(32);
  float* y = device_floats(32);
  void* pinned = nullptr;
  CUDA_CHECK(cudaHostAlloc(&pinned, 32 * sizeof(float), cudaHostAllocDefault));
  std::fill_n(static_cast<float*>(pinned), 32, 1.f);  // the batch, as a loader writes it
  cudaStream_t copies = non_blocking_stream(), compute = non_blocking_stream();
  cudaEvent_t uploaded;
  CUDA_CHECK(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming));
  CUDA_CHECK(cudaMemcpyAsync(x, pinned, 32 * sizeof(float), cudaMemcpyHostToDevice, copies));
  if (wait_for_the_copy) {
    CUDA_CHECK(cudaEventRecord(uploaded, copies));
    CUDA_CHECK(cudaStreamWaitEvent(compute, uploaded, 0));
  }
  launch("copy_values", copy_values, 1, 32, compute, x, y);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out = download(y, 32);
  for (cudaStream_t s : {copies, compute}) CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaEventDestroy(uploaded));
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaFree(y));
  return out;
}

// The correct version: in the ThreadSanitizer build a report here would fail the test
// (the runtime's own locks must not stand in for the event, nor hide it).
TEST(HostRuntime, AnEventOrdersACopyStreamBeforeAComputeStream) {
  for (float v : read_a_copy(true)) EXPECT_EQ(v, 1.f);
}

TEST(HostRuntimeSanitizers, ThreadSanitizerReportsAKernelThatReadsACopyWithoutWaitingForIt) {
#ifndef DPCORE_SANITIZE_THREAD
  GTEST_SKIP() << "needs the ThreadSanitizer build (scripts/test.sh: build-tsan)";
#else
  setenv("TSAN_OPTIONS", "halt_on_error=1", 1);
  EXPECT_DEATH(read_a_copy(false), "data race(.|\n)*copy_values");
#endif
}

#ifdef DPCORE_SANITIZE_THREAD
extern "C" void AnnotateIgnoreSyncBegin(const char* file, int line);
extern "C" void AnnotateIgnoreSyncEnd(const char* file, int line);

// Every thread writes its word, then the block meets at a barrier: after it each thread
// (each fiber) has seen every other's write.
__global__ void set_then_meet(float* x) {
  x[threadIdx.x] = 2.f;
  __syncthreads();
}

void read_what_another_stream_wrote_on_the_same_fibers() {
  host_exec::set_fiber_pool_bound(0);  // b's worker, which has no fibers, then takes a's
  float* x = device_floats(64);
  float* y = device_floats(64);
  cudaStream_t a = non_blocking_stream(), b = non_blocking_stream();
  launch("set_then_meet", set_then_meet, 1, 64, a, x);
  // Only the synchronisation is hidden, by hand: the runtime's own Bookkeeping would show
  // the completion edge the wait acquires (runtime/bookkeeping.h).
  AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
  CUDA_CHECK(cudaStreamSynchronize(a));  // a's fibers are idle again
  AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
  launch("copy_values", copy_values, 1, 64, b, x, y);
  CUDA_CHECK(cudaStreamSynchronize(b));
}
#endif

// The kernel threads' fibers are shared by every stream's worker (tests/host_exec/host_exec.cpp):
// with the pool's bound at 0, stream b's kernel runs on the very fibers that ran stream a's,
// which at a's barrier learnt all of a's writes. Nothing orders the two kernels (the host's wait for a is hidden from
// ThreadSanitizer, so that b's work is queued as if a were still running, as on a GPU it
// may be), so b's reads race with a's writes, and taking over a fiber must not hide that.
TEST(HostRuntimeSanitizers, ThreadSanitizerReportsARaceBetweenStreamsWhoseKernelsRunOnTheSameFibers) {
#ifndef DPCORE_SANITIZE_THREAD
  GTEST_SKIP() << "needs the ThreadSanitizer build (scripts/test.sh: build-tsan)";
#else
  setenv("TSAN_OPTIONS", "halt_on_error=1", 1);
  EXPECT_DEATH(read_what_another_stream_wrote_on_the_same_fibers(), "data race(.|\n)*copy_values");
#endif
}

// ---- The caching allocator's rule (kernels/cuda_runtime/caching_allocator.h): a freed
// block goes to the next allocation on the stream it was allocated on, so memory another
// stream still reads must be ordered before the free (PyTorch's recordStream rule). ----
// Block x is allocated on `owner` and filled with 1s there; a kernel on `reader` copies it
// to y. x is returned to the cache with the owner ordered after that read by an event, or
// (the bug) not, and handed out again on `owner`, which writes 7s into it. With `hold`,
// the reader waits at a gate until the owner's write has run (the bug) or until the block
// is reallocated (correct: the owner then cannot write before the read). Returns y.
std::vector<float> read_a_block_freed_under_the_reader(bool order_the_free, bool hold) {
  dpcore::kernels::cuda_runtime::CachingAllocator cache(0);
  constexpr size_t kBytes = 32 * sizeof(float);
  cudaStream_t owner = non_blocking_stream(), reader = non_blocking_stream();
  cudaEvent_t filled, read;
  for (cudaEvent_t* e : {&filled, &read}) CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  float* x = static_cast<float*>(cache.allocate(kBytes, owner));
  float* y = device_floats(32);
  launch("set_to", set_to, 1, 32, owner, x, 1.f);
  CUDA_CHECK(cudaEventRecord(filled, owner));
  CUDA_CHECK(cudaStreamWaitEvent(reader, filled, 0));
  Gate gate;
  if (hold) launch("wait_at_gate", wait_at_gate, 1, 1, reader, gate.get());
  launch("copy_values", copy_values, 1, 32, reader, x, y);
  if (order_the_free) {
    CUDA_CHECK(cudaEventRecord(read, reader));
    CUDA_CHECK(cudaStreamWaitEvent(owner, read, 0));
  }
  cache.deallocate(x, kBytes);
  float* again = static_cast<float*>(cache.allocate(kBytes, owner));
  EXPECT_EQ(again, x) << "the cache did not hand the block out again on its stream";
  launch("set_to", set_to, 1, 32, owner, again, 7.f);
  if (hold && !order_the_free) CUDA_CHECK(cudaStreamSynchronize(owner));  // the write has run
  gate.open();
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_FALSE(gate.timed_out());
  std::vector<float> out = download(y, 32);
  cache.deallocate(again, kBytes);
  for (cudaStream_t s : {owner, reader}) CUDA_CHECK(cudaStreamDestroy(s));
  for (cudaEvent_t e : {filled, read}) CUDA_CHECK(cudaEventDestroy(e));
  CUDA_CHECK(cudaFree(y));
  return out;
}

// Ordered, the reader sees what was there when it was queued, however long it is held; in
// the ThreadSanitizer build a report here would fail the test.
TEST(HostRuntime, ACachedBlockFreedAfterAnEventOnTheReaderIsRewrittenOnlyAfterTheRead) {
  for (bool hold : {false, true}) {
    for (float v : read_a_block_freed_under_the_reader(true, hold)) EXPECT_EQ(v, 1.f) << "held: " << hold;
  }
}

// Unordered, and the reader held until the owner's write has run: it reads the block's next
// user's values, in every build (the numbers are wrong, not NaN: the cache does not refill
// a block it hands out again).
TEST(HostRuntime, ACachedBlockFreedWithoutAnEventIsRewrittenUnderTheReader) {
  for (float v : read_a_block_freed_under_the_reader(false, true)) EXPECT_EQ(v, 7.f);
}

// Unordered and not held: the owner's write and the reader's copy run on two worker threads
// that nothing orders, which ThreadSanitizer reports whichever runs first.
TEST(HostRuntimeSanitizers, ThreadSanitizerReportsACachedBlockRewrittenWhileAnotherStreamReadsIt) {
#ifndef DPCORE_SANITIZE_THREAD
  GTEST_SKIP() << "needs the ThreadSanitizer build (scripts/test.sh: build-tsan)";
#else
  setenv("TSAN_OPTIONS", "halt_on_error=1", 1);
  EXPECT_DEATH(read_a_block_freed_under_the_reader(false, false), "data race(.|\n)*(set_to|copy_values)");
#endif
}

}  // namespace
