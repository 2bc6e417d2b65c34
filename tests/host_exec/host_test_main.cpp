// main() of the host execution tests. The host layer plays a kernel's threads as fibers
// on the one test thread; the CPU reference kernels they are compared with run on it
// serially too: OpenMP's worker threads would be reported as races by ThreadSanitizer
// (its runtime is not instrumented), and would only compete with the fibers elsewhere.
#include <gtest/gtest.h>
#include <omp.h>

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
