// The local backend: every collective against a serial reference for a sweep of sizes
// (empty, smaller than the world, uneven, large), world sizes 1-4 and both float dtypes;
// allreduce bit-identical on every replica and equal to the documented ring order;
// asynchronous handles; and failures (a replica that throws, never arrives, passes bad
// arguments or calls another collective) ending every replica with an Error naming it.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <thread>

#include "collective_reference.h"
#include "comm/communicator.h"
#include "comm/ring.h"
#include "engine/backend.h"
#include "engine/seconds_since.h"
#include "replicas.h"

namespace dpcore {
// Names the dtype in the parameters gtest prints for a failing sweep case.
void PrintTo(DType dtype, std::ostream* os) { *os << dtype_name(dtype); }
}  // namespace dpcore

namespace dpcore::testing {
namespace {

using comm::Communicator;
using comm::ReduceOp;
using Clock = std::chrono::steady_clock;

// Chunk number of each element, built from the documented rule (the first count % n
// chunks hold one element more) independently of ring::chunk_range.
std::vector<int64_t> chunk_index(int64_t count, int world) {
  std::vector<int64_t> index;
  for (int c = 0; c < world; ++c) {
    int64_t size = count / world + (c < count % world ? 1 : 0);
    index.insert(index.end(), size_t(size), c);
  }
  return index;
}

template <class T>
Tensor tensor_of(const std::vector<T>& values) {
  return Tensor::from_vector(values, {int64_t(values.size())});
}

// The ring order is exact by construction; a plain serial sum must agree to rounding.
template <class T>
void expect_close_to_serial(const std::vector<T>& got, const std::vector<std::vector<T>>& inputs, ReduceOp op) {
  std::vector<T> serial = serial_reduction(inputs, op);
  double tolerance = sizeof(T) == 4 ? 1e-3 : 1e-12;
  EXPECT_LE(max_relative_error(got.data(), serial.data(), got.size()), tolerance);
}

template <class T>
void check_allreduce(int world, int64_t count, ReduceOp op) {
  auto inputs = all_inputs<T>(world, count);
  std::vector<T> expected = ring_reduction(inputs, chunk_index(count, world), op);
  std::vector<std::vector<T>> results(static_cast<size_t>(world));
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor t = tensor_of(inputs[size_t(c.rank())]);
    c.allreduce(t, op).wait();
    results[size_t(c.rank())] = t.to_vector<T>();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(bit_identical(results[size_t(r)], results[0])) << "rank " << r << " differs from rank 0";
    EXPECT_TRUE(bit_identical(results[size_t(r)], expected)) << "rank " << r << " differs from the ring order";
  }
  if (count > 0) expect_close_to_serial(results[0], inputs, op);
}

template <class T>
void check_broadcast(int world, int64_t count, int root) {
  auto inputs = all_inputs<T>(world, count);
  std::vector<std::vector<T>> results(static_cast<size_t>(world));
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor t = tensor_of(inputs[size_t(c.rank())]);
    c.broadcast(t, root).wait();
    results[size_t(c.rank())] = t.to_vector<T>();
  });
  for (int r = 0; r < world; ++r) EXPECT_TRUE(bit_identical(results[size_t(r)], inputs[size_t(root)])) << "rank " << r;
}

template <class T>
void check_reduce(int world, int64_t count, int root, ReduceOp op) {
  auto inputs = all_inputs<T>(world, count);
  std::vector<T> expected = ring_reduction(inputs, chunk_index(count, world), op);
  std::vector<std::vector<T>> results(static_cast<size_t>(world));
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor t = tensor_of(inputs[size_t(c.rank())]);
    c.reduce(t, root, op).wait();
    results[size_t(c.rank())] = t.to_vector<T>();
  });
  for (int r = 0; r < world; ++r) {
    // The root gets exactly allreduce's result; the others keep their input.
    const std::vector<T>& want = r == root ? expected : inputs[size_t(r)];
    EXPECT_TRUE(bit_identical(results[size_t(r)], want)) << "rank " << r << " (root " << root << ")";
  }
}

template <class T>
void check_allgather(int world, int64_t count) {
  int64_t block = block_for(count, world);
  auto inputs = all_inputs<T>(world, block);
  std::vector<T> expected;
  for (const auto& x : inputs) expected.insert(expected.end(), x.begin(), x.end());
  std::vector<std::vector<T>> results(static_cast<size_t>(world));
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor in = tensor_of(inputs[size_t(c.rank())]);
    Tensor out = Tensor::full({world * block}, NAN, in.dtype());
    c.allgather(in, out).wait();
    results[size_t(c.rank())] = out.to_vector<T>();
  });
  for (int r = 0; r < world; ++r) EXPECT_TRUE(bit_identical(results[size_t(r)], expected)) << "rank " << r;
}

template <class T>
void check_reduce_scatter(int world, int64_t count, ReduceOp op) {
  int64_t block = block_for(count, world);
  auto inputs = all_inputs<T>(world, world * block);
  std::vector<T> reduced = ring_reduction(inputs, chunk_index(world * block, world), op);
  std::vector<std::vector<T>> results(static_cast<size_t>(world));
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor in = tensor_of(inputs[size_t(c.rank())]);
    Tensor out = Tensor::full({block}, NAN, in.dtype());
    c.reduce_scatter(in, out, op).wait();
    results[size_t(c.rank())] = out.to_vector<T>();
  });
  for (int r = 0; r < world; ++r) {
    std::vector<T> expected(reduced.begin() + r * block, reduced.begin() + (r + 1) * block);
    EXPECT_TRUE(bit_identical(results[size_t(r)], expected)) << "rank " << r;
  }
}

template <class F>
void for_dtype(DType dtype, F&& f) {
  if (dtype == DType::Float32) {
    f(float{});
  } else {
    f(double{});
  }
}

// ---- the sweep: world size x element count x dtype ----
class LocalCollectives : public ::testing::TestWithParam<std::tuple<int, int64_t, DType>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  int64_t count() const { return std::get<1>(GetParam()); }
  DType dtype() const { return std::get<2>(GetParam()); }
};

TEST_P(LocalCollectives, AllreduceSum) {
  for_dtype(dtype(), [&](auto t) { check_allreduce<decltype(t)>(world(), count(), ReduceOp::Sum); });
}
TEST_P(LocalCollectives, AllreduceAverage) {
  for_dtype(dtype(), [&](auto t) { check_allreduce<decltype(t)>(world(), count(), ReduceOp::Average); });
}
TEST_P(LocalCollectives, Broadcast) {
  for_dtype(dtype(), [&](auto t) { check_broadcast<decltype(t)>(world(), count(), world() - 1); });
}
TEST_P(LocalCollectives, Reduce) {
  for_dtype(dtype(), [&](auto t) { check_reduce<decltype(t)>(world(), count(), world() - 1, ReduceOp::Sum); });
}
TEST_P(LocalCollectives, Allgather) {
  for_dtype(dtype(), [&](auto t) { check_allgather<decltype(t)>(world(), count()); });
}
TEST_P(LocalCollectives, ReduceScatter) {
  for_dtype(dtype(), [&](auto t) { check_reduce_scatter<decltype(t)>(world(), count(), ReduceOp::Sum); });
}

INSTANTIATE_TEST_SUITE_P(Sweep, LocalCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::ValuesIn(kCounts),
                                            ::testing::Values(DType::Float32, DType::Float64)),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_n" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  dtype_name(std::get<2>(info.param));
                         });

// ---- 16-bit floats (--grad-dtype bf16's allreduce): summed in the same ring order, each
// step's partial sum rounded back to 16 bits ----
template <class T>
void check_half_allreduce(int world, int64_t count) {
  auto inputs = all_inputs<T>(world, count);
  std::vector<T> expected = ring_reduction(inputs, chunk_index(count, world), ReduceOp::Sum);
  std::vector<std::vector<T>> results(static_cast<size_t>(world));
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor t = tensor_of(inputs[size_t(c.rank())]);
    c.allreduce(t, ReduceOp::Sum).wait();
    results[size_t(c.rank())] = t.to_vector<T>();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(bit_identical(results[size_t(r)], results[0])) << "rank " << r << " differs from rank 0";
    EXPECT_TRUE(bit_identical(results[size_t(r)], expected)) << "rank " << r << " differs from the ring order";
  }
  // Each of the world - 1 steps rounds a partial sum no larger than the sum of |x| by at
  // most the unit roundoff (2^-8 for bfloat16's 8 significant bits, 2^-11 for float16's 11).
  const double unit = std::is_same_v<T, kernels::BFloat16> ? 0x1p-8 : 0x1p-11;
  for (size_t i = 0; i < size_t(count); ++i) {
    double exact = 0, magnitude = 0;
    for (const auto& x : inputs) exact += widened(x[i]), magnitude += std::fabs(widened(x[i]));
    ASSERT_LE(std::fabs(widened(results[0][i]) - exact), (world - 1) * unit * magnitude) << "element " << i;
  }
}

class LocalHalfCollectives : public ::testing::TestWithParam<std::tuple<int, int64_t, DType>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  int64_t count() const { return std::get<1>(GetParam()); }
  template <class F>
  void for_half(F&& f) const {
    if (std::get<2>(GetParam()) == DType::BFloat16) f(kernels::BFloat16{});
    else f(kernels::Float16{});
  }
};

TEST_P(LocalHalfCollectives, AllreduceSumRoundsEachStepOfTheRing) {
  for_half([&](auto t) { check_half_allreduce<decltype(t)>(world(), count()); });
}
TEST_P(LocalHalfCollectives, ReduceAndReduceScatterSumInTheSameOrder) {
  for_half([&](auto t) {
    check_reduce<decltype(t)>(world(), count(), world() - 1, ReduceOp::Sum);
    check_reduce_scatter<decltype(t)>(world(), count(), ReduceOp::Sum);
  });
}

INSTANTIATE_TEST_SUITE_P(Sweep, LocalHalfCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(int64_t(0), int64_t(1), int64_t(3), int64_t(1001),
                                                              int64_t(65537)),
                                            ::testing::Values(DType::BFloat16, DType::Float16)),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_n" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  dtype_name(std::get<2>(info.param));
                         });

TEST(LocalCollectivesExtra, SixteenBitAverageIsRefused) {
  auto group = comm::make_local_group(2);
  std::vector<std::string> errors(2);
  run_replicas(group, [&](Communicator& c) {
    Tensor t = Tensor::zeros({6}, DType::BFloat16);
    errors[size_t(c.rank())] = error_of(c.allreduce(t, ReduceOp::Average));
  });
  EXPECT_EQ(errors[0], "local allreduce: cannot average-reduce bfloat16[6] on cpu (supported: float32, float64; "
                       "bfloat16 and float16 for sum)");
}

// ---- beyond the sweep ----
TEST(LocalCollectivesExtra, EveryRootOfBroadcastAndReduce) {
  for (int root = 0; root < 4; ++root) {
    check_broadcast<float>(4, 7, root);
    check_reduce<double>(4, 1001, root, ReduceOp::Sum);
  }
}

TEST(LocalCollectivesExtra, AverageOfReduceAndReduceScatter) {
  check_reduce<float>(3, 1001, 1, ReduceOp::Average);
  check_reduce_scatter<double>(3, 1001, ReduceOp::Average);
}

TEST(LocalCollectivesExtra, ReduceScatterAgreesWithAllreduceChunk) {
  // Same ring order in both: rank r's reduce_scatter block is chunk r of allreduce's result.
  const int world = 3;
  const int64_t block = 333;
  auto inputs = all_inputs<float>(world, world * block);
  std::vector<std::vector<float>> allreduced(world), scattered(world);
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor a = tensor_of(inputs[size_t(c.rank())]);
    Tensor out = Tensor::empty({block});
    comm::Work w = c.reduce_scatter(a, out);
    w.wait();
    c.allreduce(a).wait();
    allreduced[size_t(c.rank())] = a.to_vector<float>();
    scattered[size_t(c.rank())] = out.to_vector<float>();
  });
  for (int r = 0; r < world; ++r) {
    std::vector<float> chunk(allreduced[0].begin() + r * block, allreduced[0].begin() + (r + 1) * block);
    EXPECT_TRUE(bit_identical(scattered[size_t(r)], chunk)) << "rank " << r;
  }
}

TEST(LocalCollectivesExtra, InPlaceAllgatherFromOwnBlock) {
  const int world = 3;
  const int64_t block = 5;
  auto inputs = all_inputs<float>(world, block);
  std::vector<float> expected;
  for (const auto& x : inputs) expected.insert(expected.end(), x.begin(), x.end());
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor out = Tensor::zeros({world * block});
    Tensor mine = out.narrow0(c.rank() * block, (c.rank() + 1) * block);
    mine.copy_(tensor_of(inputs[size_t(c.rank())]));
    c.allgather(mine, out).wait();
    EXPECT_TRUE(bit_identical(out.to_vector<float>(), expected)) << "rank " << c.rank();
  });
}

TEST(LocalCollectivesExtra, ManyMixedCollectivesInSequence) {
  const int world = 3;
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    for (int step = 0; step < 50; ++step) {
      Tensor t = Tensor::full({17}, double(c.rank() + step));
      c.allreduce(t).wait();
      EXPECT_EQ(t.to_vector<float>()[16], float(3 * step + 3)) << "step " << step;
      c.broadcast(t, step % world).wait();
      Tensor all = Tensor::empty({world});
      c.allgather(Tensor::full({1}, double(c.rank())), all).wait();
      EXPECT_EQ(all.to_vector<float>(), (std::vector<float>{0, 1, 2}));
      if (step % 10 == 0) c.barrier();
    }
  });
}

TEST(LocalCollectivesExtra, ShapesNeedNotMatchOnlyElementCounts) {
  auto group = comm::make_local_group(2);
  run_replicas(group, [&](Communicator& c) {
    Tensor t = c.rank() == 0 ? Tensor::full({2, 3}, 1.0) : Tensor::full({6}, 2.0);
    c.allreduce(t).wait();
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(6, 3.0f));
  });
}

TEST(LocalChunks, FirstChunksTakeTheRemainder) {
  using comm::ring::chunk_range;
  std::vector<std::pair<int64_t, int64_t>> got;
  for (int c = 0; c < 4; ++c) got.push_back({chunk_range(10, 4, c).begin, chunk_range(10, 4, c).end});
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 6}, {6, 8}, {8, 10}}));
  // Fewer elements than chunks: the last chunks are empty.
  EXPECT_EQ(chunk_range(2, 4, 1).end - chunk_range(2, 4, 1).begin, 1);
  EXPECT_EQ(chunk_range(2, 4, 2).end - chunk_range(2, 4, 2).begin, 0);
  EXPECT_EQ(chunk_range(2, 4, 3).begin, 2);
  EXPECT_EQ(chunk_range(0, 3, 2).begin, 0);
}

// ---- asynchrony ----
TEST(LocalAsync, CallReturnsBeforeTheOthersArrive) {
  auto group = comm::make_local_group(2, {std::chrono::seconds(10)});
  Tensor a = Tensor::full({100}, 1.0), b = Tensor::full({100}, 2.0);
  // One thread drives both replicas: possible only if allreduce returns at once.
  comm::Work first = group[0]->allreduce(a);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(first.done()) << "replica 0 finished an allreduce that replica 1 has not joined";
  comm::Work second = group[1]->allreduce(b);
  first.wait();
  second.wait();
  EXPECT_TRUE(first.done());
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(100, 3.0f));
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(100, 3.0f));
}

TEST(LocalAsync, TwoInFlightThenWaitBoth) {
  const int world = 4;
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor a = tensor_of(rank_input<float>(c.rank(), 65537));
    Tensor b = Tensor::full({1001}, double(c.rank()), DType::Float64);
    comm::Work wa = c.allreduce(a, ReduceOp::Average);
    comm::Work wb = c.allreduce(b);
    wb.wait();  // in the reverse order: both were queued, neither blocks the other
    wa.wait();
    EXPECT_EQ(b.to_vector<double>(), std::vector<double>(1001, 6.0));
  });
  // a's values are checked by the sweep; here it is enough that both completed.
}

TEST(LocalAsync, BarrierWaitsForEveryone) {
  const int world = 3;
  std::atomic<int> arrived{0};
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40 * c.rank()));
    arrived++;
    c.barrier();
    EXPECT_EQ(arrived.load(), world) << "rank " << c.rank() << " left the barrier early";
  });
}

// ---- failures: never hang, always name the culprit ----
TEST(LocalFailures, ReplicaThatThrowsAbortsTheOthersAtOnce) {
  const int world = 4;
  auto group = comm::make_local_group(world, {std::chrono::seconds(2)});
  std::vector<std::string> errors(world);
  auto start = Clock::now();
  run_replicas(group, [&](Communicator& c) {
    try {
      if (c.rank() == 2) throw std::runtime_error("loss is NaN");
      Tensor t = Tensor::full({1000}, 1.0);
      errors[size_t(c.rank())] = error_of(c.allreduce(t));
    } catch (const std::exception& e) {
      c.abort(e.what());  // what the trainer does with a replica's exception
    }
  });
  EXPECT_LT(seconds_since(start), 1.5) << "the others waited for the timeout instead of the abort";
  for (int r : {0, 1, 3}) {
    EXPECT_NE(errors[size_t(r)].find("aborted by replica 2: loss is NaN"), std::string::npos)
        << "rank " << r << ": " << errors[size_t(r)];
  }
}

TEST(LocalFailures, ReplicaThatNeverArrivesIsNamedAfterTheTimeout) {
  const int world = 3;
  auto group = comm::make_local_group(world, {std::chrono::seconds(1)});
  std::vector<std::string> errors(world);
  auto start = Clock::now();
  run_replicas(group, [&](Communicator& c) {
    if (c.rank() == 2) return;  // exits without joining
    Tensor t = Tensor::full({1000}, 1.0);
    errors[size_t(c.rank())] = error_of(c.allreduce(t));
  });
  double elapsed = seconds_since(start);
  EXPECT_GE(elapsed, 0.9);
  EXPECT_LT(elapsed, 5.0);
  EXPECT_EQ(errors[0], "local allreduce: replica 2 did not arrive within 1 s");
  EXPECT_EQ(errors[1], "local allreduce: replica 2 did not arrive within 1 s");
}

TEST(LocalFailures, SeveralMissingReplicasAreAllNamed) {
  auto group = comm::make_local_group(4, {std::chrono::milliseconds(500)});
  Tensor t = Tensor::full({10}, 1.0);
  EXPECT_EQ(error_of(group[1]->broadcast(t, 0)), "local broadcast: replicas 0, 2 and 3 did not arrive within 0.5 s");
}

TEST(LocalFailures, LateReplicaFailsInsteadOfHanging) {
  auto group = comm::make_local_group(2, {std::chrono::milliseconds(300)});
  std::vector<std::string> errors(2);
  run_replicas(group, [&](Communicator& c) {
    if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(600));
    Tensor t = Tensor::full({10}, 1.0);
    errors[size_t(c.rank())] = error_of(c.allreduce(t));
  });
  EXPECT_EQ(errors[0], "local allreduce: replica 1 did not arrive within 0.3 s");
  EXPECT_EQ(errors[1], errors[0]);
}

TEST(LocalFailures, BadArgumentsOnOneReplicaFailEveryone) {
  const int world = 3;
  auto group = comm::make_local_group(world, {std::chrono::seconds(2)});
  std::vector<std::string> errors(world);
  auto start = Clock::now();
  run_replicas(group, [&](Communicator& c) {
    Tensor t = c.rank() == 1 ? Tensor::zeros({10}, DType::Int64) : Tensor::zeros({10});
    errors[size_t(c.rank())] = error_of(c.allreduce(t));
  });
  EXPECT_LT(seconds_since(start), 1.5);
  EXPECT_EQ(errors[1], "local allreduce: cannot sum-reduce int64[10] on cpu (supported: float32, float64; bfloat16 and "
                       "float16 for sum)");
  for (int r : {0, 2}) {
    EXPECT_EQ(errors[size_t(r)], "local allreduce: replica 1 failed: " + errors[1]) << "rank " << r;
  }
}

TEST(LocalFailures, MismatchedCollectivesAreReported) {
  const int world = 3;
  auto group = comm::make_local_group(world, {std::chrono::seconds(2)});
  std::vector<std::string> errors(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor t = Tensor::zeros({10});
    errors[size_t(c.rank())] = error_of(c.rank() == 1 ? c.broadcast(t, 0) : c.allreduce(t));
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[size_t(r)],
              "local group: replica 1 called broadcast from replica 0 of 10 float32 while replica 0 called "
              "allreduce (sum) of 10 float32")
        << "rank " << r;
  }
}

TEST(LocalFailures, AbortedGroupFailsEveryLaterCollectiveAtOnce) {
  auto group = comm::make_local_group(2, {std::chrono::seconds(60)});
  group[1]->abort("out of memory on replica 1");
  Tensor t = Tensor::zeros({10});
  auto start = Clock::now();
  EXPECT_EQ(error_of(group[0]->allreduce(t)), "local group aborted by replica 1: out of memory on replica 1");
  EXPECT_THROW(group[1]->barrier(), Error);
  EXPECT_LT(seconds_since(start), 1.0);
}

TEST(LocalFailures, DestroyedReplicaReleasesTheOthers) {
  auto group = comm::make_local_group(2, {std::chrono::seconds(60)});
  group[1].reset();
  Tensor t = Tensor::zeros({10});
  EXPECT_EQ(error_of(group[0]->allreduce(t)), "local group: the communicator of replica 1 was destroyed");
}

TEST(LocalFailures, ArgumentErrorsNameTheProblem) {
  auto expect_error = [](const std::function<comm::Work(Communicator&)>& call, const std::string& message) {
    auto group = comm::make_local_group(1);
    EXPECT_EQ(error_of(call(*group[0])), message);
  };
  Tensor t = Tensor::zeros({6});
  expect_error([&](Communicator& c) { return c.broadcast(t, 1); },
               "local broadcast: root 1 is not a rank of this group of 1");
  expect_error([&](Communicator& c) { return c.reduce(t, -1); },
               "local reduce: root -1 is not a rank of this group of 1");
  Tensor wrong = Tensor::zeros({5});
  expect_error([&](Communicator& c) { return c.allgather(t, wrong); },
               "local allgather: output float32[5] on cpu must have 1 x 6 elements (world size x input float32[6] on cpu)");
  Tensor doubles = Tensor::zeros({6}, DType::Float64);
  expect_error([&](Communicator& c) { return c.reduce_scatter(t, doubles); },
               "local reduce_scatter: input float32[6] on cpu and output float64[6] on cpu differ in dtype or device");
  Tensor three = Tensor::zeros({3});
  expect_error([&](Communicator& c) { return c.reduce_scatter(t, three); },
               "local reduce_scatter: input float32[6] on cpu must have 1 x 3 elements (world size x output float32[3] on cpu)");
  Tensor ints = Tensor::zeros({6}, DType::Int32);
  expect_error([&](Communicator& c) { return c.allreduce(ints, ReduceOp::Average); },
               "local allreduce: cannot average-reduce int32[6] on cpu (supported: float32, float64; bfloat16 and "
               "float16 for sum)");
  Tensor undefined;
  expect_error([&](Communicator& c) { return c.broadcast(undefined, 0); },
               "local broadcast: the input tensor is undefined");
  EXPECT_THROW(comm::make_local_group(0), Error);
  EXPECT_THROW(comm::make_local_group(2, {std::chrono::milliseconds(0)}), Error);
}

TEST(LocalFailures, BroadcastAndAllgatherMoveIntegers) {
  auto group = comm::make_local_group(2);
  run_replicas(group, [&](Communicator& c) {
    Tensor t = Tensor::from_vector(std::vector<int64_t>{c.rank() * 10 + 1, c.rank() * 10 + 2}, {2});
    Tensor all = Tensor::empty({4}, DType::Int64);
    c.allgather(t, all).wait();
    EXPECT_EQ(all.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 11, 12}));
    c.broadcast(t, 1).wait();
    EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{11, 12}));
  });
}

// ---- CUDA replicas (need a GPU) ----
void check_cuda_allreduce(const std::vector<Device>& devices) {
  const int world = int(devices.size());
  const int64_t count = 65537;
  auto inputs = all_inputs<float>(world, count);
  std::vector<float> expected = ring_reduction(inputs, chunk_index(count, world), ReduceOp::Average);
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor t = Tensor::from_vector(inputs[size_t(c.rank())], {count}, devices[size_t(c.rank())]);
    c.allreduce(t, ReduceOp::Average).wait();
    EXPECT_TRUE(bit_identical(t.to_vector<float>(), expected)) << "rank " << c.rank() << " on " << t.device().str();
    Tensor in = Tensor::from_vector(inputs[size_t(c.rank())], {count}, devices[size_t(c.rank())]);
    Tensor out = Tensor::empty({world * count}, DType::Float32, devices[size_t(c.rank())]);
    c.allgather(in, out).wait();
    std::vector<float> all = out.to_vector<float>();
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(bit_identical(std::vector<float>(all.begin() + r * count, all.begin() + (r + 1) * count),
                                inputs[size_t(r)]))
          << "block " << r << " on rank " << c.rank();
    }
  });
}

TEST(LocalCuda, ReplicasSharingOneGpu) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device on this machine";
  check_cuda_allreduce({Device::cuda(0), Device::cuda(0), Device::cuda(0)});
}

// Each replica produces its input on its own stream and hands it to the collective
// without waiting: the ring's stream must order itself after the caller's (an event, not
// a device-wide wait), and the caller may overwrite the buffer as soon as wait() returns.
TEST(LocalCuda, CollectivesOrderAfterTheCallersStreamWithoutSynchronising) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device on this machine";
  const int world = 3;
  const int64_t count = stream_order_test_elements();
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    const Device gpu = Device::cuda(0);
    backend_for(gpu).use_thread_stream(gpu.index, c.rank());
    Tensor t = Tensor::empty({count}, DType::Float32, gpu);
    for (int round = 0; round < 4; ++round) {
      backend_for(gpu).fill(t, double(c.rank() + 1 + round));  // queued, not waited for
      c.allreduce(t).wait();
      const float expected = float(world * (world + 1) / 2 + world * round);
      EXPECT_EQ(t.to_vector<float>(), std::vector<float>(size_t(count), expected))
          << "rank " << c.rank() << ", round " << round;
    }
  });
}

TEST(LocalCuda, ReplicasOnCpuAndGpuStageThroughCopies) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device on this machine";
  check_cuda_allreduce({Device::cpu(), Device::cuda(0), Device::cpu(), Device::cuda(0)});
}

}  // namespace
}  // namespace dpcore::testing
