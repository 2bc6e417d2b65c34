// The mpi backend, run by ctest under mpiexec with 2 and 3 processes. Every process runs
// every test in the same order, as collectives require. Each rank can compute every
// rank's input (collective_reference.h), so results are checked against serial
// references locally; MPI's reduction order is its own, so float results are compared
// within rounding, and bit-identity across ranks is checked by gathering them.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "collective_reference.h"
#include "comm/communicator.h"

namespace dpcore::testing {
namespace {

using comm::ReduceOp;

// One communicator for the whole run: MPI can be initialised only once per process.
comm::Communicator& world() {
  static std::unique_ptr<comm::Communicator> communicator = comm::make_mpi_communicator();
  return *communicator;
}

template <class T>
Tensor tensor_of(const std::vector<T>& values) {
  return Tensor::from_vector(values, {int64_t(values.size())});
}

template <class T>
void expect_close(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if constexpr (std::is_integral_v<T>) {
    EXPECT_EQ(got, want) << what;
  } else {
    double tolerance = sizeof(T) == 4 ? 1e-3 : 1e-12;
    EXPECT_LE(max_relative_error(got.data(), want.data(), got.size()), tolerance) << what;
  }
}

template <class T>
void expect_same_on_every_rank(const std::vector<T>& mine, const std::string& what) {
  const int n = world().size();
  Tensor all = Tensor::empty({n * int64_t(mine.size())}, dtype_of<T>::value);
  world().allgather(tensor_of(mine), all).wait();
  std::vector<T> gathered = all.to_vector<T>();
  for (int r = 0; r < n; ++r) {
    std::vector<T> theirs(gathered.begin() + r * mine.size(), gathered.begin() + (r + 1) * mine.size());
    EXPECT_TRUE(bit_identical(theirs, mine)) << what << ": rank " << r << " differs from rank " << world().rank();
  }
}

std::string label(const char* op, int64_t count, DType dtype) {
  return std::string(op) + " of " + std::to_string(count) + " " + dtype_name(dtype) + " on rank " +
         std::to_string(world().rank());
}

template <class T>
void check_allreduce(int64_t count, ReduceOp op) {
  const int n = world().size();
  auto inputs = all_inputs<T>(n, count);
  Tensor t = tensor_of(inputs[size_t(world().rank())]);
  world().allreduce(t, op).wait();
  std::vector<T> got = t.to_vector<T>();
  std::string what = label(op == ReduceOp::Sum ? "allreduce sum" : "allreduce average", count, t.dtype());
  expect_close(got, serial_reduction(inputs, op), what);
  expect_same_on_every_rank(got, what);
}

template <class T>
void check_broadcast_and_reduce(int64_t count) {
  const int n = world().size(), rank = world().rank();
  auto inputs = all_inputs<T>(n, count);
  for (int root = 0; root < n; ++root) {
    Tensor t = tensor_of(inputs[size_t(rank)]);
    world().broadcast(t, root).wait();
    EXPECT_TRUE(bit_identical(t.to_vector<T>(), inputs[size_t(root)])) << label("broadcast", count, t.dtype());
    Tensor r = tensor_of(inputs[size_t(rank)]);
    world().reduce(r, root).wait();
    if (rank == root) {
      expect_close(r.to_vector<T>(), serial_reduction(inputs, ReduceOp::Sum), label("reduce", count, r.dtype()));
    } else {
      EXPECT_TRUE(bit_identical(r.to_vector<T>(), inputs[size_t(rank)])) << label("reduce (non-root)", count, r.dtype());
    }
  }
}

template <class T>
void check_allgather_and_reduce_scatter(int64_t count) {
  const int n = world().size(), rank = world().rank();
  const int64_t block = block_for(count, n);
  auto blocks = all_inputs<T>(n, block);
  Tensor out = Tensor::empty({n * block}, dtype_of<T>::value);
  world().allgather(tensor_of(blocks[size_t(rank)]), out).wait();
  std::vector<T> expected;
  for (const auto& b : blocks) expected.insert(expected.end(), b.begin(), b.end());
  EXPECT_TRUE(bit_identical(out.to_vector<T>(), expected)) << label("allgather", count, out.dtype());

  auto inputs = all_inputs<T>(n, n * block);
  Tensor mine = Tensor::empty({block}, dtype_of<T>::value);
  world().reduce_scatter(tensor_of(inputs[size_t(rank)]), mine).wait();
  std::vector<T> reduced = serial_reduction(inputs, ReduceOp::Sum);
  expect_close(mine.to_vector<T>(), std::vector<T>(reduced.begin() + rank * block, reduced.begin() + (rank + 1) * block),
               label("reduce_scatter", count, mine.dtype()));
}

TEST(MpiCollectives, AllreduceSumAndAverage) {
  for (int64_t count : kCounts) {
    check_allreduce<float>(count, ReduceOp::Sum);
    check_allreduce<double>(count, ReduceOp::Sum);
    check_allreduce<float>(count, ReduceOp::Average);
    check_allreduce<double>(count, ReduceOp::Average);
  }
}

TEST(MpiCollectives, AllreduceInt64IsExact) {
  const int n = world().size();
  std::vector<std::vector<int64_t>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back({int64_t(1) << 40, r, -7 * r});
  Tensor t = Tensor::from_vector(inputs[size_t(world().rank())], {3});
  world().allreduce(t).wait();
  EXPECT_EQ(t.to_vector<int64_t>(), serial_reduction(inputs, ReduceOp::Sum));
}

// 16-bit floats (--grad-dtype bf16) are summed by the backend's own MPI operation, each
// step in float32 rounded back to 16 bits: within world - 1 unit roundoffs (2^-8 bfloat16,
// 2^-11 float16) of the sum of |x| from the exact sum, the same bits on every rank (MPI_SUM
// on the bits, as unsigned integers, would be nowhere near).
template <class T>
void expect_half_sum(const std::vector<T>& got, const std::vector<std::vector<T>>& inputs, size_t first,
                     const std::string& what) {
  const double unit = std::is_same_v<T, kernels::BFloat16> ? 0x1p-8 : 0x1p-11;
  for (size_t i = 0; i < got.size(); ++i) {
    double exact = 0, magnitude = 0;
    for (const auto& x : inputs) exact += widened(x[first + i]), magnitude += std::fabs(widened(x[first + i]));
    ASSERT_LE(std::fabs(widened(got[i]) - exact), (inputs.size() - 1) * unit * magnitude) << what << ", element " << i;
  }
}

template <class T>
void check_half_sums(int64_t count) {
  const int n = world().size(), rank = world().rank();
  auto inputs = all_inputs<T>(n, count);
  Tensor t = tensor_of(inputs[size_t(rank)]);
  world().allreduce(t).wait();
  const std::string what = label("allreduce sum", count, t.dtype());
  expect_half_sum(t.to_vector<T>(), inputs, 0, what);
  expect_same_on_every_rank(t.to_vector<T>(), what);
  Tensor r = tensor_of(inputs[size_t(rank)]);
  world().reduce(r, n - 1).wait();
  if (rank == n - 1) expect_half_sum(r.to_vector<T>(), inputs, 0, label("reduce", count, r.dtype()));
  const int64_t block = block_for(count, n);
  auto whole = all_inputs<T>(n, n * block);
  Tensor mine = Tensor::empty({block}, dtype_of<T>::value);
  world().reduce_scatter(tensor_of(whole[size_t(rank)]), mine).wait();
  expect_half_sum(mine.to_vector<T>(), whole, size_t(rank * block), label("reduce_scatter", count, mine.dtype()));
}

TEST(MpiCollectives, SixteenBitSumsRoundEachStep) {
  for (int64_t count : {int64_t(0), int64_t(1), int64_t(1001), int64_t(65537)}) {
    check_half_sums<kernels::BFloat16>(count);
    check_half_sums<kernels::Float16>(count);
  }
}

TEST(MpiCollectives, BroadcastAndReduceFromEveryRoot) {
  for (int64_t count : kCounts) {
    check_broadcast_and_reduce<float>(count);
    check_broadcast_and_reduce<double>(count);
  }
}

TEST(MpiCollectives, AllgatherAndReduceScatter) {
  for (int64_t count : kCounts) {
    check_allgather_and_reduce_scatter<float>(count);
    check_allgather_and_reduce_scatter<double>(count);
  }
}

TEST(MpiCollectives, InPlaceAllgatherFromOwnBlock) {
  const int n = world().size(), rank = world().rank();
  Tensor out = Tensor::zeros({n * 4}, DType::Float64);
  Tensor mine = out.narrow0(rank * 4, (rank + 1) * 4);
  mine.fill_(rank + 0.5);
  world().allgather(mine, out).wait();
  std::vector<double> got = out.to_vector<double>();
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[size_t(r * 4 + 3)], r + 0.5);
}

TEST(MpiAsync, TwoInFlightThenWaitBoth) {
  const int n = world().size();
  Tensor a = Tensor::full({65537}, 1.0), b = Tensor::full({1001}, double(world().rank()), DType::Float64);
  comm::Work wa = world().allreduce(a);
  comm::Work wb = world().allreduce(b, ReduceOp::Average);
  wb.wait();
  wa.wait();
  EXPECT_TRUE(wa.done() && wb.done());
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(65537, float(n)));
  EXPECT_EQ(b.to_vector<double>(), std::vector<double>(1001, (n - 1) / 2.0));
}

TEST(MpiAsync, BarrierWaitsForTheSlowestRank) {
  auto start = std::chrono::steady_clock::now();
  if (world().rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  world().barrier();
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.25) << "rank " << world().rank() << " left the barrier before rank 0 arrived";
}

TEST(MpiErrors, BadArgumentsAreErrorsOnTheCallingRank) {
  Tensor t = Tensor::zeros({4});
  try {
    world().broadcast(t, world().size()).wait();
    ADD_FAILURE() << "broadcast from a root outside the group succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "mpi broadcast: root " + std::to_string(world().size()) +
                                         " is not a rank of this group of " + std::to_string(world().size()));
  }
  Tensor ints = Tensor::zeros({4}, DType::Int64);
  EXPECT_THROW(world().allreduce(ints, ReduceOp::Average).wait(), Error);
  // The group still works afterwards.
  world().allreduce(t).wait();
}

TEST(MpiChooser, MpiByNameIsOneReplicaOfTheWholeJob) {
  auto group = comm::make_communicators({"mpi", {Device::cpu()}, {}});
  ASSERT_EQ(group.size(), 1u);
  EXPECT_EQ(group[0]->backend(), "mpi");
  EXPECT_EQ(group[0]->size(), world().size());
  EXPECT_EQ(group[0]->rank(), world().rank());
  Tensor t = Tensor::full({3}, 1.0);
  group[0]->allreduce(t).wait();
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, float(world().size())));
}

TEST(MpiHelpers, BroadcastBytesAndGatherStrings) {
  char id[128] = {};
  if (world().rank() == 0) std::snprintf(id, sizeof(id), "unique id from rank 0");
  comm::mpi_broadcast_bytes(id, sizeof(id), 0);
  EXPECT_STREQ(id, "unique id from rank 0");
  std::vector<std::string> all = comm::mpi_allgather_strings("rank " + std::to_string(world().rank()));
  ASSERT_EQ(int(all.size()), world().size());
  for (int r = 0; r < world().size(); ++r) EXPECT_EQ(all[size_t(r)], "rank " + std::to_string(r));
}

TEST(MpiCuda, TensorsOnTheGpuGoThroughHostCopies) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device on this machine";
  const int n = world().size();
  auto inputs = all_inputs<float>(n, 1001);
  Tensor t = Tensor::from_vector(inputs[size_t(world().rank())], {1001}, Device::cuda(0));
  world().allreduce(t).wait();
  expect_close(t.to_vector<float>(), serial_reduction(inputs, ReduceOp::Sum), "allreduce of a CUDA tensor");
}

}  // namespace
}  // namespace dpcore::testing
