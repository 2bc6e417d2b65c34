// The nccl backend on real GPUs: one rank on cuda:0 (NCCL supports world size 1), and a
// group over every GPU when there are two or more; send/recv and split() on both. Skipped
// on machines without a GPU; the device-list checks that need none are in choose_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "collective_reference.h"
#include "comm/communicator.h"
#include "engine/runtime.h"
#include "replicas.h"

namespace dpcore::testing {
namespace {

using comm::Communicator;
using comm::ReduceOp;

Tensor on_gpu(const std::vector<float>& values, int device) {
  return Tensor::from_vector(values, {int64_t(values.size())}, Device::cuda(device));
}

TEST(NcclCollectives, WorldSizeOneOnEveryCollective) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device on this machine";
  auto group = comm::make_nccl_group({Device::cuda(0)});
  Communicator& c = *group[0];
  EXPECT_EQ(c.backend(), "nccl");
  EXPECT_EQ(c.size(), 1);
  std::vector<float> x = rank_input<float>(0, 1001);
  Tensor t = on_gpu(x, 0);
  c.allreduce(t).wait();
  c.allreduce(t, ReduceOp::Average).wait();
  c.broadcast(t, 0).wait();
  c.reduce(t, 0).wait();
  EXPECT_TRUE(bit_identical(t.to_vector<float>(), x));
  Tensor out = Tensor::empty({1001}, DType::Float32, Device::cuda(0));
  c.allgather(t, out).wait();
  EXPECT_TRUE(bit_identical(out.to_vector<float>(), x));
  c.reduce_scatter(t, out).wait();
  EXPECT_TRUE(bit_identical(out.to_vector<float>(), x));
  c.barrier();
}

TEST(NcclCollectives, TensorOnAnotherDeviceIsRefused) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device on this machine";
  auto group = comm::make_nccl_group({Device::cuda(0)});
  Tensor host = Tensor::zeros({4});
  try {
    group[0]->allreduce(host).wait();
    ADD_FAILURE() << "allreduce of a CPU tensor on an NCCL communicator succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "nccl allreduce: float32[4] on cpu is not on this rank's device cuda:0");
  }
}

TEST(NcclCollectives, GroupOverEveryGpu) {
  int gpus = runtime::cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 or more GPUs (NCCL refuses two ranks on one GPU); this machine has " << gpus;
  auto group = comm::make_nccl_group(comm::place_replicas(gpus, Device::Type::CUDA));
  const int64_t count = 1000001;
  auto inputs = all_inputs<float>(gpus, count);
  std::vector<float> serial = serial_reduction(inputs, ReduceOp::Sum);
  std::vector<std::vector<float>> results(static_cast<size_t>(gpus));
  run_replicas(group, [&](Communicator& c) {
    Tensor a = on_gpu(inputs[size_t(c.rank())], c.rank());
    Tensor b = on_gpu(inputs[size_t(c.rank())], c.rank());
    comm::Work wa = c.allreduce(a), wb = c.allreduce(b, ReduceOp::Average);  // two in flight
    wb.wait();
    wa.wait();
    results[size_t(c.rank())] = a.to_vector<float>();
    c.barrier();
  });
  EXPECT_LE(max_relative_error(results[0].data(), serial.data(), serial.size()), 1e-3);
  for (int r = 1; r < gpus; ++r) EXPECT_TRUE(bit_identical(results[size_t(r)], results[0])) << "rank " << r;
}

// --grad-dtype bf16's allreduce over NCCL: bfloat16 and float16 tensors summed, each step
// rounded back to 16 bits, within world - 1 unit roundoffs of the sum of |x|, the same
// bits on every rank.
TEST(NcclCollectives, SixteenBitSumOverEveryGpu) {
  int gpus = runtime::cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 or more GPUs (NCCL refuses two ranks on one GPU); this machine has " << gpus;
  auto group = comm::make_nccl_group(comm::place_replicas(gpus, Device::Type::CUDA));
  const int64_t count = 1001;
  auto inputs = all_inputs<kernels::BFloat16>(gpus, count);
  std::vector<std::vector<kernels::BFloat16>> results(static_cast<size_t>(gpus));
  run_replicas(group, [&](Communicator& c) {
    Tensor t = Tensor::from_vector(inputs[size_t(c.rank())], {count}).to(Device::cuda(c.rank()));
    c.allreduce(t).wait();
    results[size_t(c.rank())] = t.to(Device::cpu()).to_vector<kernels::BFloat16>();
    c.barrier();
  });
  for (size_t i = 0; i < size_t(count); ++i) {
    double exact = 0, magnitude = 0;
    for (const auto& x : inputs) exact += widened(x[i]), magnitude += std::fabs(widened(x[i]));
    ASSERT_LE(std::fabs(widened(results[0][i]) - exact), (gpus - 1) * 0x1p-8 * magnitude) << "element " << i;
  }
  for (int r = 1; r < gpus; ++r) EXPECT_TRUE(bit_identical(results[size_t(r)], results[0])) << "rank " << r;
}

TEST(NcclPointToPoint, SendToItselfIsRefusedAndSplitOfOneRank) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device on this machine";
  auto group = comm::make_nccl_group({Device::cuda(0)});
  Communicator& c = *group[0];
  try {
    c.send(on_gpu({1.0f}, 0), 0).wait();
    ADD_FAILURE() << "a send to itself succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nccl send: destination 0 is this rank itself"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(c.split(-1, 0), nullptr);
  std::unique_ptr<Communicator> sub = c.split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  Tensor t = on_gpu({1.0f, 2.0f}, 0);
  sub->allreduce(t).wait();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
}

// Every rank passes its data to the right. NCCL runs a send only with its recv, so even
// ranks send first and odd ranks receive first; then the ranks split by parity and each
// group allreduces among itself.
TEST(NcclPointToPoint, RingExchangeAndSplitOverEveryGpu) {
  int gpus = runtime::cuda_device_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 or more GPUs (NCCL refuses two ranks on one GPU); this machine has " << gpus;
  auto group = comm::make_nccl_group(comm::place_replicas(gpus, Device::Type::CUDA));
  const int64_t count = 65537;
  run_replicas(group, [&](Communicator& c) {
    const int right = (c.rank() + 1) % gpus, left = (c.rank() + gpus - 1) % gpus;
    Tensor mine = on_gpu(rank_input<float>(c.rank(), count), c.rank());
    Tensor got = Tensor::zeros({count}, DType::Float32, Device::cuda(c.rank()));
    if (c.rank() % 2 == 0) {
      c.send(mine, right).wait();
      c.recv(got, left).wait();
    } else {
      c.recv(got, left).wait();
      c.send(mine, right).wait();
    }
    EXPECT_TRUE(bit_identical(got.to_vector<float>(), rank_input<float>(left, count))) << "rank " << c.rank();

    std::unique_ptr<Communicator> sub = c.split(c.rank() % 2, c.rank());
    ASSERT_NE(sub, nullptr);
    std::vector<std::vector<float>> inputs;
    for (int r = c.rank() % 2; r < gpus; r += 2) inputs.push_back(rank_input<float>(r, count));
    EXPECT_EQ(sub->size(), int(inputs.size()));
    Tensor t = on_gpu(rank_input<float>(c.rank(), count), c.rank());
    sub->allreduce(t).wait();
    std::vector<float> serial = serial_reduction(inputs, ReduceOp::Sum);
    EXPECT_LE(max_relative_error(t.to_vector<float>().data(), serial.data(), serial.size()), 1e-3)
        << "rank " << c.rank();
  });
}

}  // namespace
}  // namespace dpcore::testing
