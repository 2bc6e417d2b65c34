// DDP over the mpi backend, run under mpiexec with 2 and 3 processes: each process holds
// one replica; after 5 steps every process's parameters must equal single-replica
// training on the whole batch (computed locally by each process as the reference).
#include <gtest/gtest.h>

#include "equivalence.h"

namespace dpcore::train {

using namespace dpcore::layers;

namespace {

using testing::kSgd;

void expect_equivalent(int64_t accum, const std::string& split) {
  const int64_t n = 13;
  train::ParallelOptions options;
  options.mode = "ddp", options.backend = "mpi", options.split = split, options.timeout_s = 120;
  auto runner = train::make_runner(testing::simplenet(), kSgd, accum, options);
  auto got = testing::train_with(*runner, n, 5);
  double diff = testing::relative_difference(got, testing::reference_params(n, 5));
  EXPECT_LE(diff, 1e-5) << runner->describe();
}

TEST(MpiDdp, EvenSplit) { expect_equivalent(1, "even"); }
TEST(MpiDdp, EvenSplitWithAccumulation) { expect_equivalent(3, "even"); }
TEST(MpiDdp, AdaptiveSplitWithAccumulation) { expect_equivalent(3, "adaptive"); }

}  // namespace
}  // namespace dpcore::train
