// Graph capture in the host CUDA runtime (runtime/graphs.cpp): what a capture records
// does not run, the replay gives the eager result, a fork through events must be joined,
// and each call CUDA forbids during a capture fails with CUDA's error and invalidates
// the capture, while the capture modes let the calls through that CUDA lets through.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "host_exec/runtime_test_util.h"

namespace {

using dpcore::kernels::cuda::launch;
using namespace host_runtime_test;

// A fork and its join: x = value; `side` copies x and adds 2 to the copy while `main`
// zeroes y; `main` waits for `side`, copies x into y and adds 1: y = value + 1, copy =
// value + 2. (Only reads of x are concurrent.)
void forked_sequence(cudaStream_t main, cudaStream_t side, float* x, float* copy, float* y, float value,
                     cudaEvent_t forked, cudaEvent_t joined) {
  launch("set_to", set_to, 1, 32, main, x, value);
  CUDA_CHECK(cudaEventRecord(forked, main));
  CUDA_CHECK(cudaStreamWaitEvent(side, forked, 0));
  CUDA_CHECK(cudaMemcpyAsync(copy, x, 32 * sizeof(float), cudaMemcpyDeviceToDevice, side));
  launch("add_one", add_one, 1, 32, side, copy);
  launch("add_one", add_one, 1, 32, side, copy);
  CUDA_CHECK(cudaEventRecord(joined, side));
  CUDA_CHECK(cudaMemsetAsync(y, 0, 32 * sizeof(float), main));
  CUDA_CHECK(cudaStreamWaitEvent(main, joined, 0));
  launch("copy_values", copy_values, 1, 32, main, x, y);
  launch("add_one", add_one, 1, 32, main, y);
}

struct Buffers {
  float* x = device_floats(32);
  float* copy = device_floats(32);
  float* y = device_floats(32);
  cudaStream_t main = non_blocking_stream(), side = non_blocking_stream();
  cudaEvent_t forked = nullptr, joined = nullptr;
  Buffers() {
    CUDA_CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  }
  ~Buffers() {
    cudaStreamDestroy(main);
    cudaStreamDestroy(side);
    cudaEventDestroy(forked);
    cudaEventDestroy(joined);
    for (float* p : {x, copy, y}) cudaFree(p);
  }
  void run(float value) { forked_sequence(main, side, x, copy, y, value, forked, joined); }
  // What the host sees: y and the side's copy after the sequence.
  std::vector<float> results() {
    std::vector<float> out = download(y, 32), side_copy = download(copy, 32);
    out.insert(out.end(), side_copy.begin(), side_copy.end());
    return out;
  }
};

TEST(HostGraph, ACaptureRecordsInsteadOfRunningAndItsReplayGivesTheEagerResult) {
  Buffers eager;
  eager.run(5.f);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> expected = eager.results();
  ASSERT_EQ(expected.front(), 6.f);
  ASSERT_EQ(expected.back(), 7.f);

  Buffers b;
  CUDA_CHECK(cudaStreamBeginCapture(b.main, cudaStreamCaptureModeGlobal));
  b.run(5.f);
  cudaStreamCaptureStatus status;
  CUDA_CHECK(cudaStreamIsCapturing(b.side, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusActive) << "waiting for an event of the capture joins it";
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(b.main, &graph));
  CUDA_CHECK(cudaStreamIsCapturing(b.side, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone) << "the end of the capture releases the forked stream";
  std::vector<float> before = b.results();
  EXPECT_TRUE(all_bits_set(before.data(), before.size() * sizeof(float))) << "captured work ran";
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 7u) << "launches, the copy and the memset (events are edges, not nodes)";

  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));  // the executable graph is a copy
  for (int replay = 0; replay < 2; ++replay) {
    CUDA_CHECK(cudaGraphLaunch(exec, b.main));
    CUDA_CHECK(cudaStreamSynchronize(b.main));
    EXPECT_EQ(b.results(), expected) << "replay " << replay;
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
}

TEST(HostGraph, AForkThatIsNotJoinedBackFailsTheEndOfTheCapture) {
  Buffers b;
  CUDA_CHECK(cudaStreamBeginCapture(b.main, cudaStreamCaptureModeGlobal));
  CUDA_CHECK(cudaEventRecord(b.forked, b.main));
  CUDA_CHECK(cudaStreamWaitEvent(b.side, b.forked, 0));
  launch("add_one", add_one, 1, 32, b.side, b.copy);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(b.side, &graph), cudaErrorStreamCaptureUnmatched)
      << "only the stream that began the capture ends it";
  EXPECT_EQ(cudaStreamEndCapture(b.main, &graph), cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(graph, nullptr);
  cudaStreamCaptureStatus status;
  CUDA_CHECK(cudaStreamIsCapturing(b.side, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  cudaGetLastError();
}

// One call CUDA forbids while `capturing` captures (made blocking when `blocking`).
struct Forbidden {
  const char* call;
  cudaError_t error;
  std::function<cudaError_t(cudaStream_t capturing, cudaEvent_t recorded_in_capture)> make;
  bool blocking = false;
};

std::vector<Forbidden> forbidden_calls() {
  static float* device = device_floats(32);
  static cudaEvent_t outside = [] {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventRecord(e, nullptr));
    return e;
  }();
  static std::vector<float> host(32);
  const auto from_another_thread = [](std::function<cudaError_t()> call) {
    cudaError_t error = cudaSuccess;
    std::thread([&] { error = call(); }).join();
    return error;
  };
  return {
      {"a synchronising cudaMemcpy", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t, cudaEvent_t) {
         return cudaMemcpy(host.data(), device, 32 * sizeof(float), cudaMemcpyDeviceToHost);
       }},
      {"cudaMalloc", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t, cudaEvent_t) {
         void* p = nullptr;
         return cudaMalloc(&p, 64);
       }},
      {"cudaFree", cudaErrorStreamCaptureUnsupported, [](cudaStream_t, cudaEvent_t) { return cudaFree(device); }},
      {"cudaDeviceSynchronize", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t, cudaEvent_t) { return cudaDeviceSynchronize(); }},
      {"cudaStreamSynchronize of the capturing stream", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t s, cudaEvent_t) { return cudaStreamSynchronize(s); }},
      {"cudaStreamQuery of the capturing stream", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t s, cudaEvent_t) { return cudaStreamQuery(s); }},
      {"cudaEventQuery of an event recorded in the capture", cudaErrorCapturedEvent,
       [](cudaStream_t, cudaEvent_t e) { return cudaEventQuery(e); }},
      {"cudaEventSynchronize of an event recorded in the capture", cudaErrorCapturedEvent,
       [](cudaStream_t, cudaEvent_t e) { return cudaEventSynchronize(e); }},
      {"a cudaMemcpyAsync into pageable memory", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t s, cudaEvent_t) {
         return cudaMemcpyAsync(host.data(), device, 32 * sizeof(float), cudaMemcpyDeviceToHost, s);
       }},
      {"waiting for an event recorded outside the capture", cudaErrorStreamCaptureIsolation,
       [](cudaStream_t s, cudaEvent_t) { return cudaStreamWaitEvent(s, outside, 0); }},
      {"a synchronising cudaMemcpy on another thread (global mode)", cudaErrorStreamCaptureUnsupported,
       [from_another_thread](cudaStream_t, cudaEvent_t) {
         return from_another_thread([] {
           return cudaMemcpy(device, host.data(), 32 * sizeof(float), cudaMemcpyHostToDevice);
         });
       }},
      {"the legacy stream, on another thread, while a blocking stream captures", cudaErrorStreamCaptureImplicit,
       [from_another_thread](cudaStream_t, cudaEvent_t) {
         return from_another_thread([] { return cudaMemsetAsync(device, 0, 32 * sizeof(float), nullptr); });
       },
       true},
  };
}

TEST(HostGraph, EachCallCudaForbidsDuringACaptureFailsWithItsErrorAndInvalidatesTheCapture) {
  float* x = device_floats(32);
  for (const Forbidden& forbidden : forbidden_calls()) {
    SCOPED_TRACE(forbidden.call);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, forbidden.blocking ? cudaStreamDefault : cudaStreamNonBlocking));
    cudaEvent_t recorded;
    CUDA_CHECK(cudaEventCreate(&recorded));
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    launch("set_to", set_to, 1, 32, s, x, 1.f);
    CUDA_CHECK(cudaEventRecord(recorded, s));
    EXPECT_EQ(forbidden.make(s, recorded), forbidden.error);
    cudaStreamCaptureStatus status;
    CUDA_CHECK(cudaStreamIsCapturing(s, &status));
    EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
    try {
      launch("add_one", add_one, 1, 32, s, x);
      ADD_FAILURE() << "a launch into an invalidated capture was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_CONTAINS(e.what(), cudaGetErrorString(cudaErrorStreamCaptureInvalidated));
    }
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);
    cudaGetLastError();
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaEventDestroy(recorded));
  }
  // After the captures the same calls work again.
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaFree(x));
}

TEST(HostGraph, TheCaptureModesLetThroughWhatCudaLetsThrough) {
  float* x = device_floats(32);
  std::vector<float> host(32);
  cudaStream_t s = non_blocking_stream();
  // A thread-local capture does not bar other threads from synchronising calls.
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch("set_to", set_to, 1, 32, s, x, 2.f);
  cudaError_t other = cudaErrorInvalidValue;
  std::thread([&] { other = cudaMemcpy(host.data(), x, 32 * sizeof(float), cudaMemcpyDeviceToHost); }).join();
  EXPECT_EQ(other, cudaSuccess);
  // A thread in relaxed mode may allocate even while it captures (the caching allocator's case).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal) << "a thread's mode is global at first";
  void* grown = nullptr;
  EXPECT_EQ(cudaMalloc(&grown, 256), cudaSuccess);
  CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaFree(grown));
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFree(x));
}

TEST(HostGraph, OnlyTheThreadThatBeganAThreadLocalCaptureEndsIt) {
  cudaStream_t s = non_blocking_stream();
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaErrorIllegalState);
  cudaError_t other = cudaSuccess;
  cudaGraph_t graph = nullptr;
  std::thread([&] { other = cudaStreamEndCapture(s, &graph); }).join();
  EXPECT_EQ(other, cudaErrorStreamCaptureWrongThread);
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  CUDA_CHECK(cudaGraphDestroy(graph));
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported)
      << "the legacy stream cannot be captured";
  cudaGetLastError();
  CUDA_CHECK(cudaStreamDestroy(s));
}

// Issue 23, item 3: a body that allocates with cudaMalloc while it is being captured gets
// the capture error (the message CUDA_CHECK throws names it), and the capture is lost.
TEST(HostGraphProof, CudaMallocDuringACaptureIsTheCaptureError) {
  cudaStream_t s = non_blocking_stream();
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  try {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, 1 << 20));
    ADD_FAILURE() << "cudaMalloc succeeded during a global capture";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "cudaMalloc(&p, 1 << 20) failed");
    EXPECT_CONTAINS(e.what(), "operation not permitted when stream is capturing");
  }
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace
