// main() of the host execution tests. The host layer plays a kernel's threads as fibers
// on its stream's worker thread; the CPU reference kernels they are compared with run
// serially on the test thread: OpenMP's worker threads would be reported as races by ThreadSanitizer
// (its runtime is not instrumented), and would only compete with the fibers elsewhere.
#include <gtest/gtest.h>
#include <omp.h>

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  // Death tests start the child afresh: a fork would not copy the stream worker threads.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
