// The local backend's point-to-point calls and sub-groups: send/recv in a ring, pairwise
// swaps and many tags (matched by source and tag in issue order), payloads bit-exact;
// split() into groups that allreduce among themselves and exchange messages; and the
// errors (a send to oneself, sizes that differ, a sender that never comes, an abort), none
// of which hangs a replica.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "collective_reference.h"
#include "comm/communicator.h"
#include "engine/backend.h"
#include "engine/seconds_since.h"
#include "engine/trace.h"
#include "replicas.h"
#include "support/test_support.h"
#include "support/trace_checks.h"

namespace dpcore::testing {
namespace {

using comm::Communicator;
using Clock = std::chrono::steady_clock;

Tensor tensor_of(const std::vector<double>& values) { return Tensor::from_vector(values, {int64_t(values.size())}); }
Tensor filled(int64_t count, double value) { return Tensor::full({count}, value, DType::Float64); }

class LocalPointToPoint : public ::testing::TestWithParam<int> {};

// Every rank sends its data to the right and receives its left neighbour's, both issued
// before either is waited for: float64 payloads arrive bit for bit.
TEST_P(LocalPointToPoint, RingExchangeIsBitExact) {
  const int world = GetParam();
  for (int64_t count : {int64_t(0), int64_t(1), int64_t(1001), int64_t(65537)}) {
    auto group = comm::make_local_group(world);
    run_replicas(group, [&](Communicator& c) {
      const int right = (c.rank() + 1) % world, left = (c.rank() + world - 1) % world;
      Tensor mine = tensor_of(rank_input<double>(c.rank(), count));
      Tensor got = Tensor::zeros({count}, DType::Float64);
      comm::Work sent = c.send(mine, right);
      comm::Work received = c.recv(got, left);
      sent.wait();
      received.wait();
      EXPECT_TRUE(bit_identical(got.to_vector<double>(), rank_input<double>(left, count)))
          << "rank " << c.rank() << ", " << count << " elements from rank " << left;
    });
  }
}

// Partners 0<->1, 2<->3 both send first and then receive: a send does not wait for its
// receiver, so the swap cannot deadlock.
TEST_P(LocalPointToPoint, PairwiseSwapBothSendingFirst) {
  const int world = GetParam();
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    const int partner = c.rank() ^ 1;
    Tensor mine = tensor_of(rank_input<double>(c.rank(), 1000));
    Tensor got = Tensor::zeros({1000}, DType::Float64);
    c.send(mine, partner).wait();
    c.recv(got, partner).wait();
    EXPECT_TRUE(bit_identical(got.to_vector<double>(), rank_input<double>(partner, 1000))) << "rank " << c.rank();
  });
}

// Rank 0 sends three messages under each of five tags, tags interleaved; rank 1 receives
// the tags in reverse order. Each tag's messages arrive in the order they were sent.
TEST_P(LocalPointToPoint, MessagesMatchBySourceAndTagInIssueOrder) {
  const int world = GetParam(), tags = 5, per_tag = 3;
  auto group = comm::make_local_group(world);
  auto payload = [](int tag, int index) { return std::vector<double>(7, 100.0 * tag + index); };
  run_replicas(group, [&](Communicator& c) {
    if (c.rank() == 0) {
      std::vector<comm::Work> sends;
      for (int index = 0; index < per_tag; ++index) {
        for (int tag = 0; tag < tags; ++tag) sends.push_back(c.send(tensor_of(payload(tag, index)), 1, tag));
      }
      for (const comm::Work& w : sends) w.wait();
    } else if (c.rank() == 1) {
      std::vector<Tensor> got;
      std::vector<comm::Work> recvs;
      for (int tag = tags - 1; tag >= 0; --tag) {
        for (int index = 0; index < per_tag; ++index) {
          got.push_back(Tensor::zeros({7}, DType::Float64));
          recvs.push_back(c.recv(got.back(), 0, tag));
        }
      }
      for (const comm::Work& w : recvs) w.wait();
      size_t k = 0;
      for (int tag = tags - 1; tag >= 0; --tag) {
        for (int index = 0; index < per_tag; ++index, ++k) {
          EXPECT_EQ(got[k].to_vector<double>(), payload(tag, index)) << "tag " << tag << ", message " << index;
        }
      }
    }
  });
}

// Point-to-point calls and collectives share each replica's queue: a message sent between
// two allreduces is received between them, and the allreduces still agree.
TEST_P(LocalPointToPoint, InterleavesWithCollectives) {
  const int world = GetParam();
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    Tensor a = filled(10, 1.0), b = filled(10, 2.0);
    Tensor message = filled(3, double(c.rank())), got = Tensor::zeros({3}, DType::Float64);
    c.allreduce(a);
    c.send(message, (c.rank() + 1) % world, 9);
    comm::Work received = c.recv(got, (c.rank() + world - 1) % world, 9);
    c.allreduce(b).wait();
    received.wait();
    EXPECT_EQ(a.to_vector<double>(), std::vector<double>(10, double(world)));
    EXPECT_EQ(b.to_vector<double>(), std::vector<double>(10, 2.0 * world));
    EXPECT_EQ(got.to_vector<double>(), std::vector<double>(3, double((c.rank() + world - 1) % world)));
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, LocalPointToPoint, ::testing::Values(2, 4));

// A traced ring exchange: each communication lane has one send and one recv span, with
// the message's bytes, the peer and the tag.
TEST(LocalPointToPointTrace, SendAndRecvSpansNameBytesPeerAndTag) {
  const int world = 2;
  TempDir dir;
  auto group = comm::make_local_group(world);
  trace::start();
  run_replicas(group, [&](Communicator& c) {
    Tensor got = Tensor::zeros({1001}, DType::Float64);
    c.send(filled(1001, 1.0), (c.rank() + 1) % world, 3);
    c.recv(got, (c.rank() + world - 1) % world, 3).wait();
  });
  trace::stop();
  trace::write(dir.file("trace.json"));
  TraceFile t = read_trace(dir.file("trace.json"));
  for (int r = 0; r < world; ++r) {
    const std::string lane = "comm " + std::to_string(r);
    for (const char* name : {"send", "recv"}) {
      std::vector<TraceSpan> spans = spans_of(t, lane, name);
      ASSERT_EQ(spans.size(), 1u) << lane << ": " << name;
      EXPECT_EQ(spans[0].args["bytes"], 1001 * 8) << lane << ": " << name;
      EXPECT_EQ(spans[0].args["peer"], (r + 1) % world) << lane << ": " << name;  // 2 ranks: left is right
      EXPECT_EQ(spans[0].args["tag"], 3) << lane << ": " << name;
      EXPECT_EQ(spans[0].args["algorithm"], "mailbox") << lane << ": " << name;
    }
  }
}

// LocalOptions name a group's lanes, and thread_start runs on each rank's communication
// thread, the one that runs its calls: a lane it names there is where the rank's send lands.
TEST(LocalPointToPointTrace, GroupOptionsNameTheLanesAndRunOnEachCommunicationThread) {
  for (bool renamed : {false, true}) {
    TempDir dir;
    comm::LocalOptions options;
    options.lanes = "stage comm", options.first_lane = trace::kStageCommLanes;
    std::vector<int> started;  // the ranks thread_start ran for, in order
    if (renamed) {
      options.thread_start = [&](int r) {
        started.push_back(r);
        trace::set_lane("started " + std::to_string(r), trace::kStageCommLanes + 10 + r);
      };
    }
    auto group = comm::make_local_group(2, options);
    EXPECT_EQ(started, renamed ? std::vector<int>({0, 1}) : std::vector<int>{});
    trace::start();
    run_replicas(group, [&](Communicator& c) {
      Tensor got = Tensor::zeros({8}, DType::Float64);
      c.send(filled(8, 1.0), 1 - c.rank(), 0);
      c.recv(got, 1 - c.rank(), 0).wait();
    });
    trace::stop();
    trace::write(dir.file("trace.json"));
    TraceFile t = read_trace(dir.file("trace.json"));
    for (int r = 0; r < 2; ++r) {
      const std::string lane = (renamed ? "started " : "stage comm ") + std::to_string(r);
      EXPECT_EQ(spans_of(t, lane, "send").size(), 1u) << lane;
      for (const auto& [key, name] : t.lanes)
        if (name == lane) EXPECT_EQ(t.sort_index.at(key), trace::kStageCommLanes + (renamed ? 10 : 0) + r);
    }
  }
}

// ---- errors: named, and never a hang ----
TEST(LocalPointToPointErrors, SendToItselfIsRefusedNamingTheRank) {
  auto group = comm::make_local_group(2);
  std::string error = error_of(group[1]->send(filled(4, 1.0), 1));
  EXPECT_NE(error.find("local send: destination 1 is this rank itself"), std::string::npos) << error;
}

TEST(LocalPointToPointErrors, PeerOutsideTheGroupIsRefused) {
  auto group = comm::make_local_group(2);
  Tensor t = Tensor::zeros({4}, DType::Float64);
  std::string error = error_of(group[0]->recv(t, 2));
  EXPECT_NE(error.find("local recv: source 2 is not a rank of this group of 2"), std::string::npos) << error;
}

TEST(LocalPointToPointErrors, NegativeTagIsRefused) {
  auto group = comm::make_local_group(2);
  std::string error = error_of(group[0]->send(filled(4, 1.0), 1, -3));
  EXPECT_NE(error.find("local send: tag -3 must not be negative"), std::string::npos) << error;
}

TEST(LocalPointToPointErrors, SizeMismatchNamesBothRanksAndSizes) {
  auto group = comm::make_local_group(2, {std::chrono::seconds(5)});
  std::string error;
  run_replicas(group, [&](Communicator& c) {
    if (c.rank() == 0) {
      c.send(Tensor::full({200}, 1.0f), 1).wait();
    } else {
      Tensor t = Tensor::zeros({100}, DType::Float32);
      error = error_of(c.recv(t, 0));
    }
  });
  EXPECT_NE(error.find("local recv: replica 1 expects 100 float32 (400 bytes) from replica 0 (tag 0), which sent "
                       "200 float32 (800 bytes)"),
            std::string::npos)
      << error;
}

TEST(LocalPointToPointErrors, SenderThatNeverComesIsNamedAfterTheTimeout) {
  auto group = comm::make_local_group(3, {std::chrono::milliseconds(300)});
  std::string error;
  std::vector<int> missing;
  auto start = Clock::now();
  run_replicas(group, [&](Communicator& c) {
    if (c.rank() != 1) return;  // rank 2 never sends
    Tensor t = Tensor::zeros({4}, DType::Float64);
    // Held until the error has been read: the Work's release then orders the read before
    // the communication thread frees the error (which ThreadSanitizer cannot see through
    // the exception's own reference count).
    comm::Work received = c.recv(t, 2, 5);
    try {
      received.wait();
    } catch (const comm::ReplicasMissing& e) {
      error = e.what();
      missing = e.missing;
    }
  });
  EXPECT_GE(seconds_since(start), 0.25);
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(missing, std::vector<int>{2});
  EXPECT_NE(error.find("local recv: replica 2 sent nothing to replica 1 (tag 5) within 0.3 s"), std::string::npos)
      << error;
}

TEST(LocalPointToPointErrors, AbortReleasesAWaitingRecv) {
  auto group = comm::make_local_group(2, {std::chrono::seconds(60)});
  std::string error;
  auto start = Clock::now();
  run_replicas(group, [&](Communicator& c) {
    if (c.rank() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      c.abort("the loss is NaN");
      return;
    }
    Tensor t = Tensor::zeros({4}, DType::Float64);
    error = error_of(c.recv(t, 0));
  });
  EXPECT_LT(seconds_since(start), 5.0) << "the recv waited for the timeout instead of the abort";
  EXPECT_NE(error.find("aborted by replica 0: the loss is NaN"), std::string::npos) << error;
}

// ---- CUDA (skipped without a GPU) ----
// Replicas on one GPU and on the CPU pass messages around a ring; each fills its message on
// a stream of its own and sends it without waiting, and overwrites it as soon as the send
// is done: the send's copy must order itself after the caller's stream, and across devices
// the receiver's copy after the sender's.
TEST(LocalPointToPointCuda, RingOrdersAfterTheCallersStreamAcrossDevices) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device on this machine";
  const std::vector<Device> devices = {Device::cuda(0), Device::cpu(), Device::cuda(0), Device::cuda(0)};
  const int world = int(devices.size());
  const int64_t count = stream_order_test_elements();
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    const Device device = devices[size_t(c.rank())];
    if (device.is_cuda()) backend_for(device).use_thread_stream(device.index, c.rank());
    const int left = (c.rank() + world - 1) % world;
    Tensor message = Tensor::empty({count}, DType::Float32, device);
    Tensor got = Tensor::zeros({count}, DType::Float32, device);
    for (int round = 0; round < 3; ++round) {
      backend_for(device).fill(message, double(10 * c.rank() + round));  // queued, not waited for
      c.send(message, (c.rank() + 1) % world).wait();
      backend_for(device).fill(message, -1.0);  // the send's copy is what goes
      c.recv(got, left).wait();
      EXPECT_EQ(got.to_vector<float>(), std::vector<float>(size_t(count), float(10 * left + round)))
          << "rank " << c.rank() << ", round " << round;
    }
  });
}

// ---- sub-groups ----
// Four ranks split by parity, each group ordered by descending old rank (key = -rank):
// group {2, 0} and group {3, 1}. Each allreduces float64 data among itself (two addends, so
// the sum is exact in either order) and passes a message from its rank 0 to its rank 1.
TEST(LocalSplit, TwoGroupsAllreduceAmongThemselves) {
  const int world = 4;
  const int64_t count = 1001;
  auto group = comm::make_local_group(world);
  run_replicas(group, [&](Communicator& c) {
    std::unique_ptr<Communicator> sub = c.split(c.rank() % 2, -c.rank());
    ASSERT_NE(sub, nullptr);
    const std::vector<int> members = c.rank() % 2 == 0 ? std::vector<int>{2, 0} : std::vector<int>{3, 1};
    EXPECT_EQ(sub->size(), 2);
    EXPECT_EQ(members[size_t(sub->rank())], c.rank());
    EXPECT_EQ(sub->backend(), "local");

    Tensor t = tensor_of(rank_input<double>(c.rank(), count));
    sub->allreduce(t).wait();
    std::vector<double> expected =
        serial_reduction(std::vector<std::vector<double>>{rank_input<double>(members[0], count),
                                                          rank_input<double>(members[1], count)},
                         comm::ReduceOp::Sum);
    EXPECT_TRUE(bit_identical(t.to_vector<double>(), expected)) << "rank " << c.rank();

    Tensor message = tensor_of(rank_input<double>(c.rank(), 9)), got = Tensor::zeros({9}, DType::Float64);
    if (sub->rank() == 0) sub->send(message, 1).wait();
    else sub->recv(got, 0).wait();
    if (sub->rank() == 1) {
      EXPECT_TRUE(bit_identical(got.to_vector<double>(), rank_input<double>(members[0], 9))) << "rank " << c.rank();
    }
    // The parent group still works after the split, beside its sub-groups.
    Tensor one = filled(5, 1.0);
    c.allreduce(one).wait();
    EXPECT_EQ(one.to_vector<double>(), std::vector<double>(5, double(world)));
  });
}

// A negative color leaves a rank out: it gets no communicator, the others form a group.
TEST(LocalSplit, NegativeColorIsInNoGroup) {
  auto group = comm::make_local_group(3);
  run_replicas(group, [&](Communicator& c) {
    std::unique_ptr<Communicator> sub = c.split(c.rank() == 1 ? -1 : 7, 0);
    if (c.rank() == 1) {
      EXPECT_EQ(sub, nullptr);
      return;
    }
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), 2);
    EXPECT_EQ(sub->rank(), c.rank() == 0 ? 0 : 1);  // equal keys: by old rank
    Tensor t = filled(3, double(c.rank()));
    sub->allreduce(t).wait();
    EXPECT_EQ(t.to_vector<double>(), std::vector<double>(3, 2.0));  // 0 + 2
  });
}

// A failure inside one sub-group ends that group's waits, naming the culprit, and leaves
// the other group alone.
TEST(LocalSplit, AbortStaysInsideItsGroup) {
  auto group = comm::make_local_group(4, {std::chrono::seconds(60)});
  std::vector<std::string> errors(4);
  run_replicas(group, [&](Communicator& c) {
    std::unique_ptr<Communicator> sub = c.split(c.rank() / 2, c.rank());
    Tensor t = filled(3, 1.0);
    if (c.rank() == 0) {
      sub->abort("stage 0 failed");
      return;
    }
    errors[size_t(c.rank())] = error_of(sub->allreduce(t));
    if (c.rank() >= 2) EXPECT_EQ(t.to_vector<double>(), std::vector<double>(3, 2.0));
  });
  EXPECT_NE(errors[1].find("aborted by replica 0: stage 0 failed"), std::string::npos) << errors[1];
  EXPECT_EQ(errors[2], "");
  EXPECT_EQ(errors[3], "");
}

}  // namespace
}  // namespace dpcore::testing
