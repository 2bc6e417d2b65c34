// The mpi backend's send/recv and split(), run by ctest under mpiexec with 2 and 4
// processes (an even number: ranks pair up). Every process runs every test in the same
// order. Payloads are float64 from collective_reference.h, which every rank can compute,
// and must arrive bit for bit.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "collective_reference.h"
#include "comm/communicator.h"

namespace dpcore::testing {
namespace {

// One communicator for the whole run: MPI can be initialised only once per process.
comm::Communicator& world() {
  static std::unique_ptr<comm::Communicator> communicator = comm::make_mpi_communicator();
  return *communicator;
}

Tensor tensor_of(const std::vector<double>& values) { return Tensor::from_vector(values, {int64_t(values.size())}); }

TEST(MpiPointToPoint, RingExchangeIsBitExact) {
  comm::Communicator& c = world();
  const int n = c.size(), right = (c.rank() + 1) % n, left = (c.rank() + n - 1) % n;
  for (int64_t count : {int64_t(0), int64_t(1), int64_t(65537)}) {
    Tensor got = Tensor::zeros({count}, DType::Float64);
    comm::Work sent = c.send(tensor_of(rank_input<double>(c.rank(), count)), right);
    comm::Work received = c.recv(got, left);
    sent.wait();
    received.wait();
    EXPECT_TRUE(bit_identical(got.to_vector<double>(), rank_input<double>(left, count)))
        << count << " elements from rank " << left << " to rank " << c.rank();
  }
}

// Both partners send first: a message far above MPI's eager limit still cannot deadlock,
// since the send only starts an MPI_Isend of its own copy.
TEST(MpiPointToPoint, PairwiseSwapBothSendingFirst) {
  comm::Communicator& c = world();
  const int partner = c.rank() ^ 1;
  const int64_t count = 1 << 20;
  Tensor mine = tensor_of(rank_input<double>(c.rank(), count)), got = Tensor::zeros({count}, DType::Float64);
  c.send(mine, partner).wait();
  mine.fill_(-1.0);  // the send's copy is what goes
  c.recv(got, partner).wait();
  EXPECT_TRUE(bit_identical(got.to_vector<double>(), rank_input<double>(partner, count))) << "rank " << c.rank();
}

TEST(MpiPointToPoint, MessagesMatchBySourceAndTagInIssueOrder) {
  comm::Communicator& c = world();
  const int tags = 5, per_tag = 3;
  auto payload = [](int tag, int index) { return std::vector<double>(7, 100.0 * tag + index); };
  if (c.rank() == 0) {
    for (int index = 0; index < per_tag; ++index) {
      for (int tag = 0; tag < tags; ++tag) c.send(tensor_of(payload(tag, index)), 1, tag);
    }
  } else if (c.rank() == 1) {
    for (int tag = tags - 1; tag >= 0; --tag) {
      for (int index = 0; index < per_tag; ++index) {
        Tensor got = Tensor::zeros({7}, DType::Float64);
        c.recv(got, 0, tag).wait();
        EXPECT_EQ(got.to_vector<double>(), payload(tag, index)) << "tag " << tag << ", message " << index;
      }
    }
  }
  c.barrier();
}

TEST(MpiPointToPointErrors, SendToItselfIsRefusedNamingTheRank) {
  comm::Communicator& c = world();
  std::string error = error_of(c.send(Tensor::zeros({4}, DType::Float64), c.rank()));
  EXPECT_NE(error.find("mpi send: destination " + std::to_string(c.rank()) + " is this rank itself"),
            std::string::npos)
      << error;
}

// The receiver probes the message first: a recv of another size fails naming both ranks
// and sizes, and the message stays there for a recv that fits.
TEST(MpiPointToPointErrors, SizeMismatchNamesBothRanksAndSizes) {
  comm::Communicator& c = world();
  const int tag = 77;
  if (c.rank() == 0) {
    c.send(Tensor::full({200}, 1.0f), 1, tag).wait();
  } else if (c.rank() == 1) {
    Tensor small = Tensor::zeros({100}, DType::Float32);
    std::string error = error_of(c.recv(small, 0, tag));
    EXPECT_NE(error.find("mpi recv: rank 1 expects 100 float32 (400 bytes) from rank 0 (tag 77), which sent 800 bytes"),
              std::string::npos)
        << error;
    Tensor fits = Tensor::zeros({200}, DType::Float32);
    c.recv(fits, 0, tag).wait();
    EXPECT_EQ(fits.to_vector<float>(), std::vector<float>(200, 1.0f));
  }
  c.barrier();
}

// Split by parity, ordered by descending rank: each group allreduces among itself and
// passes a message from its rank 0 to its rank 1 (with 4 processes; 2 give singletons).
TEST(MpiSplit, GroupsAllreduceAmongThemselves) {
  comm::Communicator& c = world();
  std::unique_ptr<comm::Communicator> sub = c.split(c.rank() % 2, -c.rank());
  ASSERT_NE(sub, nullptr);
  std::vector<int> members;  // old ranks in the new group's order
  for (int r = c.size() - 1; r >= 0; --r) {
    if (r % 2 == c.rank() % 2) members.push_back(r);
  }
  ASSERT_EQ(sub->size(), int(members.size()));
  EXPECT_EQ(members[size_t(sub->rank())], c.rank());
  EXPECT_EQ(sub->backend(), "mpi");

  const int64_t count = 1001;
  std::vector<std::vector<double>> inputs;
  for (int r : members) inputs.push_back(rank_input<double>(r, count));
  Tensor t = tensor_of(rank_input<double>(c.rank(), count));
  sub->allreduce(t).wait();
  // One or two addends: the sum is exact in any order.
  EXPECT_TRUE(bit_identical(t.to_vector<double>(), serial_reduction(inputs, comm::ReduceOp::Sum)))
      << "rank " << c.rank();

  if (sub->size() >= 2) {
    Tensor got = Tensor::zeros({9}, DType::Float64);
    if (sub->rank() == 0) sub->send(tensor_of(rank_input<double>(c.rank(), 9)), 1).wait();
    if (sub->rank() == 1) {
      sub->recv(got, 0).wait();
      EXPECT_TRUE(bit_identical(got.to_vector<double>(), rank_input<double>(members[0], 9))) << "rank " << c.rank();
    }
  }
  c.barrier();
}

TEST(MpiSplit, NegativeColorIsInNoGroup) {
  comm::Communicator& c = world();
  std::unique_ptr<comm::Communicator> sub = c.split(c.rank() == 1 ? -1 : 3, 0);
  if (c.rank() == 1) {
    EXPECT_EQ(sub, nullptr);
  } else {
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), c.size() - 1);
    EXPECT_EQ(sub->rank(), c.rank() == 0 ? 0 : c.rank() - 1);
    Tensor t = Tensor::full({3}, 1.0, DType::Float64);
    sub->allreduce(t).wait();
    EXPECT_EQ(t.to_vector<double>(), std::vector<double>(3, double(c.size() - 1)));
  }
  c.barrier();
}

// Run only by the ctest comm_mpi_point_to_point_timeout (it ends the job): rank 0 waits for
// a message rank 1 never sends, and its watchdog aborts the job after the timeout, naming
// the recv; the ctest passes on that message.
TEST(MpiPointToPointErrors, DISABLED_RecvWhoseSenderNeverComesAbortsTheJob) {
  std::unique_ptr<comm::Communicator> c = comm::make_mpi_communicator(std::chrono::milliseconds(500));
  if (c->rank() == 0) {
    Tensor t = Tensor::zeros({4}, DType::Float64);
    c->recv(t, 1, 99).wait();
    ADD_FAILURE() << "the recv returned without a message";
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(30));
  }
}

}  // namespace
}  // namespace dpcore::testing
