// The CPU kernels' thread count: set, queried, reset to the library default, and rejected
// when negative.
#include <gtest/gtest.h>

#include "kernels/cpu/kernels.h"
#include "kernels/error.h"

namespace dpcore::testing {
namespace {

namespace cpu = kernels::cpu;

TEST(KernelThreadsTest, SetAndQueryTheThreadCount) {
  cpu::set_num_threads(3);
  EXPECT_EQ(cpu::num_threads(), 3);
  cpu::set_num_threads(0);
  EXPECT_GE(cpu::num_threads(), 1);
  EXPECT_THROW(cpu::set_num_threads(-1), dpcore::Error);
}

}  // namespace
}  // namespace dpcore::testing
