// The host NCCL (include/nccl.h, runtime/nccl_*.cpp): ranks as threads, each on its own
// device of the host CUDA runtime. Each collective against a float64 computation (and the
// rank order it promises), in place and out of place, for 2 and 4 ranks; a ring of sends
// and receives in a group; and the failures comm/nccl.cpp must survive: a rank that never
// arrives (its peer's stream waits until a watchdog aborts the communicator), the async
// error the peers see, mismatched collectives, a buffer on another device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cuda_runtime/check.h"
#include "kernels/half_types.h"

namespace {

using Clock = std::chrono::steady_clock;

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)
#define EXPECT_NCCL(call) EXPECT_EQ((call), ncclSuccess) << ncclGetLastError(nullptr)

// Runs body(rank) on a thread per rank, with device `rank` current.
void on_ranks(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&body, r] {
      CUDA_CHECK(cudaSetDevice(r));
      body(r);
    });
  for (std::thread& t : threads) t.join();
}

// n ranks on devices 0..n-1, each with a non-blocking stream, joined as comm/nccl.cpp's
// make_nccl_communicator joins them: one thread per rank, all with the id rank 0 made.
struct Clique {
  explicit Clique(int n) : comms(n), streams(n) {
    ncclUniqueId id;
    EXPECT_NCCL(ncclGetUniqueId(&id));
    on_ranks(n, [&](int r) {
      EXPECT_NCCL(ncclCommInitRank(&comms[r], n, id, r));
      CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    });
  }
  ~Clique() {
    on_ranks(size(), [&](int r) {
      if (comms[r]) EXPECT_NCCL(ncclCommDestroy(comms[r]));
      CUDA_CHECK(cudaStreamDestroy(streams[r]));
    });
  }
  int size() const { return int(comms.size()); }
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
};

template <class T>
ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  if constexpr (std::is_same_v<T, int32_t>) return ncclInt32;
  return ncclInt64;
}

// A device buffer of the current device, filled from `values` in the order of `stream`.
template <class T>
T* upload(const std::vector<T>& values, cudaStream_t stream) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, values.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpyAsync(p, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  return static_cast<T*>(p);
}

template <class T>
T* device_buffer(size_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  return static_cast<T*>(p);
}

// Waits for the stream's work up to the copy (a copy into pageable memory returns once done).
template <class T>
std::vector<T> download(const T* p, size_t n, cudaStream_t stream) {
  std::vector<T> out(n);
  CUDA_CHECK(cudaMemcpyAsync(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  return out;
}

// Rank r's input: values in [-1, 1] (floating) or [-50, 50] (integers); for products values
// whose product stays in range: magnitudes in [0.5, 1.5], or integers in [-3, 3].
template <class T>
std::vector<T> inputs(int rank, size_t n, ncclRedOp_t op) {
  std::mt19937 gen(1000 + rank);
  std::vector<T> out(n);
  for (T& x : out) {
    if constexpr (std::is_floating_point_v<T>) {
      if (op == ncclProd) {
        const T magnitude = std::uniform_real_distribution<T>(0.5, 1.5)(gen);
        x = gen() % 2 ? magnitude : -magnitude;
      } else {
        x = std::uniform_real_distribution<T>(-1, 1)(gen);
      }
    } else {
      const int64_t range = op == ncclProd ? 3 : 50;
      x = T(std::uniform_int_distribution<int64_t>(-range, range)(gen));
    }
  }
  return out;
}

// The reduction of xs (rank 0's first) in float64, or exactly in int64 for integers (whose
// average NCCL truncates), and how far the data type's own arithmetic may stray from it:
// the (n - 1) roundings of a sum or product of n terms, gamma(n - 1) = (n - 1) u / (1 - (n - 1) u)
// times the sum of magnitudes (or the product's magnitude); the average's scaling by 1/n
// adds two roundings per term (1/n, and the product). Max and min round nothing.
struct Expected {
  double value, tolerance;
};
template <class T>
Expected reference(ncclRedOp_t op, const std::vector<T>& xs) {
  const int n = int(xs.size());
  if constexpr (std::is_integral_v<T>) {
    int64_t acc = xs[0];
    for (int q = 1; q < n; ++q) {
      if (op == ncclSum || op == ncclAvg) acc += xs[q];
      if (op == ncclProd) acc *= xs[q];
      if (op == ncclMax) acc = std::max<int64_t>(acc, xs[q]);
      if (op == ncclMin) acc = std::min<int64_t>(acc, xs[q]);
    }
    return {double(op == ncclAvg ? acc / n : acc), 0.0};
  } else {
    const double u = std::numeric_limits<T>::epsilon() / 2;
    const auto gamma = [u](int k) { return k * u / (1 - k * u); };
    double acc = xs[0], magnitudes = std::fabs(double(xs[0])), product_magnitude = std::fabs(double(xs[0]));
    for (int q = 1; q < n; ++q) {
      const double x = xs[q];
      if (op == ncclSum || op == ncclAvg) acc += x;
      if (op == ncclProd) acc *= x;
      if (op == ncclMax) acc = std::max(acc, x);
      if (op == ncclMin) acc = std::min(acc, x);
      magnitudes += std::fabs(x);
      product_magnitude *= std::fabs(x);
    }
    switch (op) {
      case ncclSum: return {acc, gamma(n - 1) * magnitudes};
      case ncclAvg: return {acc / n, gamma(n + 1) * magnitudes / n};
      case ncclProd: return {acc, gamma(n - 1) * product_magnitude};
      default: return {acc, 0.0};
    }
  }
}

const ncclRedOp_t kReductions[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

// Rank r's element i of a collective's inputs, for the element-wise check below.
template <class T>
std::vector<T> column(const std::vector<std::vector<T>>& per_rank, size_t i) {
  std::vector<T> out;
  for (const std::vector<T>& values : per_rank) out.push_back(values[i]);
  return out;
}

template <class T>
void check_all_reduce(Clique& clique, ncclRedOp_t op, bool in_place) {
  SCOPED_TRACE(std::string(typeid(T).name()) + " op " + std::to_string(int(op)) + (in_place ? " in place" : ""));
  const int n = clique.size();
  const size_t count = 37;
  std::vector<std::vector<T>> in(n), out(n);
  for (int r = 0; r < n; ++r) in[r] = inputs<T>(r, count, op);
  on_ranks(n, [&](int r) {
    cudaStream_t s = clique.streams[r];
    T* send = upload(in[r], s);
    T* recv = in_place ? send : device_buffer<T>(count);
    EXPECT_NCCL(ncclAllReduce(send, recv, count, nccl_type<T>(), op, clique.comms[r], s));
    out[r] = download(recv, count, s);
    CUDA_CHECK(cudaFree(send));
    if (!in_place) CUDA_CHECK(cudaFree(recv));
  });
  for (size_t i = 0; i < count; ++i) {
    const Expected e = reference(op, column(in, i));
    for (int r = 0; r < n; ++r)
      EXPECT_NEAR(double(out[r][i]), e.value, e.tolerance) << "rank " << r << " element " << i;
  }
}

template <class T>
void check_all_reduce_ops(Clique& clique) {
  for (ncclRedOp_t op : kReductions)
    for (bool in_place : {false, true}) check_all_reduce<T>(clique, op, in_place);
}

class HostNcclRanks : public ::testing::TestWithParam<int> {};

TEST_P(HostNcclRanks, AllReduceMatchesFloat64ForEveryReductionAndType) {
  Clique clique(GetParam());
  check_all_reduce_ops<float>(clique);
  check_all_reduce_ops<double>(clique);
  check_all_reduce_ops<int32_t>(clique);
  check_all_reduce_ops<int64_t>(clique);
}

TEST_P(HostNcclRanks, BroadcastCopiesTheRootsBuffer) {
  const int n = GetParam();
  Clique clique(n);
  const size_t count = 19;
  for (bool in_place : {false, true}) {
    const int root = n - 1;
    std::vector<std::vector<double>> out(n);
    on_ranks(n, [&](int r) {
      cudaStream_t s = clique.streams[r];
      double* send = upload(inputs<double>(r, count, ncclSum), s);
      double* recv = in_place ? send : device_buffer<double>(count);
      EXPECT_NCCL(ncclBroadcast(send, recv, count, ncclFloat64, root, clique.comms[r], s));
      out[r] = download(recv, count, s);
      CUDA_CHECK(cudaFree(send));
      if (!in_place) CUDA_CHECK(cudaFree(recv));
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], inputs<double>(root, count, ncclSum)) << "rank " << r;
  }
}

TEST_P(HostNcclRanks, ReduceLeavesTheSumOnTheRootOnly) {
  const int n = GetParam();
  Clique clique(n);
  const size_t count = 23;
  const int root = 1;
  std::vector<std::vector<float>> in(n), out(n);
  for (int r = 0; r < n; ++r) in[r] = inputs<float>(r, count, ncclSum);
  on_ranks(n, [&](int r) {
    cudaStream_t s = clique.streams[r];
    float* send = upload(in[r], s);
    float* recv = upload(std::vector<float>(count, -7.f), s);
    EXPECT_NCCL(ncclReduce(send, recv, count, ncclFloat32, ncclSum, root, clique.comms[r], s));
    out[r] = download(recv, count, s);
    CUDA_CHECK(cudaFree(send));
    CUDA_CHECK(cudaFree(recv));
  });
  for (size_t i = 0; i < count; ++i) {
    const Expected e = reference(ncclSum, column(in, i));
    EXPECT_NEAR(out[root][i], e.value, e.tolerance) << "element " << i;
    for (int r = 0; r < n; ++r)
      if (r != root) EXPECT_EQ(out[r][i], -7.f) << "ncclReduce wrote rank " << r << "'s recvbuff";
  }
}

TEST_P(HostNcclRanks, AllGatherConcatenatesTheRanksInRankOrder) {
  const int n = GetParam();
  Clique clique(n);
  const size_t count = 11;
  for (bool in_place : {false, true}) {
    std::vector<std::vector<int64_t>> out(n);
    on_ranks(n, [&](int r) {
      cudaStream_t s = clique.streams[r];
      const std::vector<int64_t> mine = inputs<int64_t>(r, count, ncclSum);
      int64_t* recv = device_buffer<int64_t>(n * count);
      const int64_t* send = recv + r * count;  // NCCL's in-place layout: the rank's own slot
      if (in_place) {
        CUDA_CHECK(cudaMemcpyAsync(recv + r * count, mine.data(), count * sizeof(int64_t), cudaMemcpyHostToDevice, s));
      } else {
        send = upload(mine, s);
      }
      EXPECT_NCCL(ncclAllGather(send, recv, count, ncclInt64, clique.comms[r], s));
      out[r] = download(recv, n * count, s);
      if (!in_place) CUDA_CHECK(cudaFree(const_cast<int64_t*>(send)));
      CUDA_CHECK(cudaFree(recv));
    });
    std::vector<int64_t> expected;
    for (int q = 0; q < n; ++q) {
      const std::vector<int64_t> values = inputs<int64_t>(q, count, ncclSum);
      expected.insert(expected.end(), values.begin(), values.end());
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], expected) << "rank " << r << (in_place ? " in place" : "");
  }
}

TEST_P(HostNcclRanks, ReduceScatterGivesEachRankItsBlockOfTheSum) {
  const int n = GetParam();
  Clique clique(n);
  const size_t count = 5;  // per rank
  for (bool in_place : {false, true}) {
    std::vector<std::vector<double>> in(n), out(n);
    for (int r = 0; r < n; ++r) in[r] = inputs<double>(r, n * count, ncclSum);
    on_ranks(n, [&](int r) {
      cudaStream_t s = clique.streams[r];
      double* send = upload(in[r], s);
      double* recv = in_place ? send + r * count : device_buffer<double>(count);  // NCCL's in-place layout
      EXPECT_NCCL(ncclReduceScatter(send, recv, count, ncclFloat64, ncclSum, clique.comms[r], s));
      out[r] = download(recv, count, s);
      CUDA_CHECK(cudaFree(send));
      if (!in_place) CUDA_CHECK(cudaFree(recv));
    });
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        const Expected e = reference(ncclSum, column(in, r * count + i));
        EXPECT_NEAR(out[r][i], e.value, e.tolerance) << "rank " << r << " element " << i;
      }
  }
}

TEST_P(HostNcclRanks, SendsAndReceivesInAGroupPassARing) {
  const int n = GetParam();
  Clique clique(n);
  const size_t count = 13;
  std::vector<std::vector<float>> out(n);
  on_ranks(n, [&](int r) {
    cudaStream_t s = clique.streams[r];
    float* send = upload(inputs<float>(r, count, ncclSum), s);
    float* recv = device_buffer<float>(count);
    // Each rank sends before it receives: outside a group every rank would wait for its
    // right neighbour to receive, and the ring would deadlock.
    EXPECT_NCCL(ncclGroupStart());
    EXPECT_NCCL(ncclSend(send, count, ncclFloat32, (r + 1) % n, clique.comms[r], s));
    EXPECT_NCCL(ncclRecv(recv, count, ncclFloat32, (r + n - 1) % n, clique.comms[r], s));
    EXPECT_NCCL(ncclGroupEnd());
    out[r] = download(recv, count, s);
    CUDA_CHECK(cudaFree(send));
    CUDA_CHECK(cudaFree(recv));
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(out[r], inputs<float>((r + n - 1) % n, count, ncclSum)) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(, HostNcclRanks, ::testing::Values(2, 4), [](const auto& info) {
  return std::to_string(info.param) + "Ranks";
});

TEST(HostNccl, AllReduceAddsTheRanksInRankOrder) {
  // 1e8 + 1 rounds to 1e8 in float32 (its spacing there is 8): ((1e8 + 1) - 1e8) + 1 is 1,
  // while the reverse order, or a tree (1e8 + 1) + (-1e8 + 1), gives 0.
  Clique clique(4);
  const float values[] = {1e8f, 1.f, -1e8f, 1.f};
  std::vector<float> out(4);
  on_ranks(4, [&](int r) {
    cudaStream_t s = clique.streams[r];
    float* x = upload(std::vector<float>{values[r]}, s);
    EXPECT_NCCL(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, clique.comms[r], s));
    out[r] = download(x, 1, s)[0];
    CUDA_CHECK(cudaFree(x));
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(out[r], 1.f) << "rank " << r;
}

// bfloat16 and float16 (--grad-dtype bf16's allreduce) are combined in float32 and rounded
// back to 16 bits at every step, as NCCL's kernels store each partial result: 256 + 1 is
// 257, a tie between bfloat16's 256 and 258 that rounds to the even 256, and so is every
// later step; one float32 sum of all four, rounded at the end, would give 258. float16
// has the same tie at 2048.
TEST(HostNccl, SixteenBitAllReduceRoundsEveryStep) {
  using dpcore::kernels::BFloat16;
  using dpcore::kernels::Float16;
  Clique clique(4);
  const float values[] = {0.f, 1.f, 1.f, 0.f};  // after the first rank's
  for (const float first : {256.f, 2048.f}) {
    const bool bf16 = first == 256.f;
    std::vector<float> out(4);
    on_ranks(4, [&](int r) {
      cudaStream_t s = clique.streams[r];
      const float mine = r == 0 ? first : values[r];
      uint16_t bits = bf16 ? dpcore::kernels::float_to_bfloat16(mine).bits : dpcore::kernels::float_to_float16(mine).bits;
      uint16_t* x = upload(std::vector<uint16_t>{bits}, s);
      EXPECT_NCCL(ncclAllReduce(x, x, 1, bf16 ? ncclBfloat16 : ncclFloat16, ncclSum, clique.comms[r], s));
      const uint16_t got = download(x, 1, s)[0];
      out[r] = bf16 ? dpcore::kernels::bfloat16_to_float(BFloat16{got}) : dpcore::kernels::float16_to_float(Float16{got});
      CUDA_CHECK(cudaFree(x));
    });
    for (int r = 0; r < 4; ++r) EXPECT_EQ(out[r], first) << (bf16 ? "bfloat16" : "float16") << " rank " << r;
  }
}

// ncclCommSplit as NCCL defines it: ranks of one color form a communicator ranked by key,
// then by their old rank; NCCL_SPLIT_NOCOLOR gets none. Ranks 0 and 2 (key -rank: 2 first)
// allreduce among themselves, rank 1 is alone, rank 3 stays out; a second split (every rank
// one color, key 0: the old order) meets as a round of its own.
TEST(HostNccl, SplitGroupsRanksByColorOrderedByKey) {
  Clique clique(4);
  const int colors[] = {0, 1, 0, NCCL_SPLIT_NOCOLOR};
  std::vector<int> sizes(4, -1), ranks(4, -1), whole_ranks(4, -1);
  std::vector<float> sums(4, 0.f);
  on_ranks(4, [&](int r) {
    ncclComm_t part = nullptr, whole = nullptr;
    EXPECT_NCCL(ncclCommSplit(clique.comms[r], colors[r], -r, &part, nullptr));
    EXPECT_NCCL(ncclCommSplit(clique.comms[r], 7, 0, &whole, nullptr));
    EXPECT_NCCL(ncclCommUserRank(whole, &whole_ranks[r]));
    EXPECT_NCCL(ncclCommDestroy(whole));
    if (!part) return;
    EXPECT_NCCL(ncclCommCount(part, &sizes[r]));
    EXPECT_NCCL(ncclCommUserRank(part, &ranks[r]));
    cudaStream_t s = clique.streams[r];
    float* x = upload(std::vector<float>{float(r + 1)}, s);
    EXPECT_NCCL(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, part, s));
    sums[r] = download(x, 1, s)[0];
    CUDA_CHECK(cudaFree(x));
    EXPECT_NCCL(ncclCommDestroy(part));
  });
  EXPECT_EQ(sizes, (std::vector<int>{2, 1, 2, -1}));
  EXPECT_EQ(ranks, (std::vector<int>{1, 0, 0, -1}));
  EXPECT_EQ(sums, (std::vector<float>{4.f, 2.f, 4.f, 0.f}));
  EXPECT_EQ(whole_ranks, (std::vector<int>{0, 1, 2, 3}));
  ncclComm_t none = nullptr;
  EXPECT_EQ(ncclCommSplit(clique.comms[0], -2, 0, &none, nullptr), ncclInvalidArgument);
  EXPECT_CONTAINS(ncclGetLastError(nullptr), "color -2");
}

TEST(HostNccl, InitRankReturnsOnceEveryRankHasJoined) {
  ncclUniqueId id;
  EXPECT_NCCL(ncclGetUniqueId(&id));
  ncclComm_t first = nullptr, second = nullptr;
  std::atomic<bool> first_returned{false};
  std::thread rank0([&] {
    EXPECT_NCCL(ncclCommInitRank(&first, 2, id, 0));
    first_returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(first_returned) << "rank 0 returned before rank 1 joined";
  std::thread rank1([&] {
    CUDA_CHECK(cudaSetDevice(1));
    EXPECT_NCCL(ncclCommInitRank(&second, 2, id, 1));
  });
  rank0.join();
  rank1.join();
  int count = 0, rank = -1;
  EXPECT_NCCL(ncclCommCount(second, &count));
  EXPECT_NCCL(ncclCommUserRank(second, &rank));
  EXPECT_EQ(count, 2);
  EXPECT_EQ(rank, 1);
  EXPECT_NCCL(ncclCommDestroy(first));
  EXPECT_NCCL(ncclCommDestroy(second));
}

TEST(HostNccl, OneThreadInitsSeveralRanksInAGroup) {
  // NCCL's way for one thread to join a clique as several ranks: the waits happen at the
  // group's end, once every rank has joined.
  ncclUniqueId id;
  EXPECT_NCCL(ncclGetUniqueId(&id));
  ncclComm_t comms[2] = {};
  EXPECT_NCCL(ncclGroupStart());
  for (int r = 0; r < 2; ++r) {
    CUDA_CHECK(cudaSetDevice(r));
    EXPECT_NCCL(ncclCommInitRank(&comms[r], 2, id, r));
  }
  EXPECT_NCCL(ncclGroupEnd());
  CUDA_CHECK(cudaSetDevice(0));
  for (int r = 0; r < 2; ++r) {
    int rank = -1;
    EXPECT_NCCL(ncclCommUserRank(comms[r], &rank));
    EXPECT_EQ(rank, r);
    EXPECT_NCCL(ncclCommDestroy(comms[r]));
  }
}

TEST(HostNccl, InitRankRefusesTwoRanksOnOneDevice) {
  ncclUniqueId id;
  EXPECT_NCCL(ncclGetUniqueId(&id));
  ncclResult_t results[2];
  ncclComm_t comms[2] = {};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) ranks.emplace_back([&, r] { results[r] = ncclCommInitRank(&comms[r], 2, id, r); });
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(results[0], ncclInvalidUsage);
  EXPECT_EQ(results[1], ncclInvalidUsage);
  EXPECT_CONTAINS(ncclGetLastError(nullptr), "duplicate GPU detected: rank 0 and rank 1 both on CUDA device 0");
}

TEST(HostNccl, InitAllMakesACliqueThatOneThreadDrivesInAGroup) {
  // comm/nccl.cpp's make_nccl_group: one thread makes every rank's communicator.
  const int devices[] = {2, 0, 3};
  ncclComm_t comms[3];
  EXPECT_NCCL(ncclCommInitAll(comms, 3, devices));
  const int duplicated[] = {1, 1};
  ncclComm_t unused[2];
  EXPECT_EQ(ncclCommInitAll(unused, 2, duplicated), ncclInvalidUsage);
  std::vector<int*> buffers(3);
  std::vector<cudaStream_t> streams(3);
  for (int r = 0; r < 3; ++r) {
    CUDA_CHECK(cudaSetDevice(devices[r]));
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    buffers[r] = upload(std::vector<int>{r + 1, 10 * (r + 1)}, streams[r]);
  }
  EXPECT_NCCL(ncclGroupStart());
  for (int r = 0; r < 3; ++r)
    EXPECT_NCCL(ncclAllReduce(buffers[r], buffers[r], 2, ncclInt32, ncclSum, comms[r], streams[r]));
  EXPECT_NCCL(ncclGroupEnd());
  for (int r = 0; r < 3; ++r) {
    CUDA_CHECK(cudaSetDevice(devices[r]));
    EXPECT_EQ(download(buffers[r], 2, streams[r]), (std::vector<int>{6, 60})) << "rank " << r;
    CUDA_CHECK(cudaFree(buffers[r]));
    CUDA_CHECK(cudaStreamDestroy(streams[r]));
    EXPECT_NCCL(ncclCommDestroy(comms[r]));
  }
  CUDA_CHECK(cudaSetDevice(0));
}

// Whether the stream's work completes within `limit`: a test of a hang must not hang.
bool idle_within(cudaStream_t stream, std::chrono::milliseconds limit) {
  const auto give_up = Clock::now() + limit;
  while (cudaStreamQuery(stream) == cudaErrorNotReady) {
    if (Clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// comm/nccl.cpp's Work::wait, on a watchdog thread: polls the collective's event and the
// async error until `timeout`, then aborts the communicator.
void watch_and_abort(ncclComm_t comm, cudaEvent_t finished, std::chrono::milliseconds timeout) {
  CUDA_CHECK(cudaSetDevice(0));
  const auto start = Clock::now();
  for (;;) {
    EXPECT_EQ(cudaEventQuery(finished), cudaErrorNotReady) << "the collective completed without its peer";
    ncclResult_t async = ncclSuccess;
    EXPECT_NCCL(ncclCommGetAsyncError(comm, &async));
    EXPECT_EQ(async, ncclSuccess) << "a peer that is merely late is no error";
    if (Clock::now() - start >= timeout) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_NCCL(ncclCommAbort(comm));
}

TEST(HostNccl, ARankThatNeverArrivesHoldsItsPeersStreamUntilAWatchdogAborts) {
  Clique clique(2);
  float* x = upload(std::vector<float>{3.f, 4.f}, clique.streams[0]);
  cudaEvent_t finished;
  CUDA_CHECK(cudaEventCreateWithFlags(&finished, cudaEventDisableTiming));
  // Rank 1 never calls: rank 0's collective waits on its stream.
  EXPECT_NCCL(ncclAllReduce(x, x, 2, ncclFloat32, ncclSum, clique.comms[0], clique.streams[0]));
  CUDA_CHECK(cudaEventRecord(finished, clique.streams[0]));
  std::thread watchdog([&] { watch_and_abort(clique.comms[0], finished, std::chrono::milliseconds(50)); });
  watchdog.join();
  clique.comms[0] = nullptr;  // freed by the abort
  ASSERT_TRUE(idle_within(clique.streams[0], std::chrono::seconds(1))) << "the stream still waits after the abort";
  EXPECT_EQ(cudaEventQuery(finished), cudaSuccess);
  EXPECT_EQ(download(x, 2, clique.streams[0]), (std::vector<float>{3.f, 4.f})) << "the aborted collective ran";
  // The peer that never came finds the communicator gone.
  ncclResult_t async = ncclSuccess;
  EXPECT_NCCL(ncclCommGetAsyncError(clique.comms[1], &async));
  EXPECT_EQ(async, ncclRemoteError);
  EXPECT_CONTAINS(ncclGetLastError(nullptr), "rank 0 of 2 aborted its communicator");
  CUDA_CHECK(cudaSetDevice(1));
  float* y = upload(std::vector<float>{1.f}, clique.streams[1]);
  EXPECT_EQ(ncclAllReduce(y, y, 1, ncclFloat32, ncclSum, clique.comms[1], clique.streams[1]), ncclRemoteError)
      << "NCCL refuses a communicator with an asynchronous error";
  CUDA_CHECK(cudaFree(y));
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaEventDestroy(finished));
}

TEST(HostNccl, AnAbortReleasesAPeerThatWaitsInACollective) {
  // Rank 1 waits for rank 0, which aborts instead of calling: rank 1's stream completes and
  // its async error names the abort.
  Clique clique(2);
  CUDA_CHECK(cudaSetDevice(1));
  float* x = upload(std::vector<float>{5.f}, clique.streams[1]);
  EXPECT_NCCL(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, clique.comms[1], clique.streams[1]));
  EXPECT_EQ(cudaStreamQuery(clique.streams[1]), cudaErrorNotReady);
  std::thread([&] { EXPECT_NCCL(ncclCommAbort(clique.comms[0])); }).join();
  clique.comms[0] = nullptr;
  if (!idle_within(clique.streams[1], std::chrono::seconds(1))) {
    clique.comms[1] = nullptr;  // left behind: ncclCommDestroy would wait for the call too
    FAIL() << "the peer still waits after the abort";
  }
  ncclResult_t async = ncclSuccess;
  EXPECT_NCCL(ncclCommGetAsyncError(clique.comms[1], &async));
  EXPECT_EQ(async, ncclRemoteError);
  EXPECT_EQ(download(x, 1, clique.streams[1])[0], 5.f);
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaSetDevice(0));
}

TEST(HostNccl, MismatchedCollectivesAreAnInvalidUsageOnEveryRank) {
  // NCCL would hang or corrupt memory; the host NCCL fails the communicator instead.
  Clique clique(2);
  on_ranks(2, [&](int r) {
    cudaStream_t s = clique.streams[r];
    double* x = upload(std::vector<double>(8, 1.0), s);
    if (r == 0) EXPECT_NCCL(ncclAllReduce(x, x, 8, ncclFloat64, ncclSum, clique.comms[r], s));
    else EXPECT_NCCL(ncclBroadcast(x, x, 8, ncclFloat64, 0, clique.comms[r], s));
    EXPECT_EQ(download(x, 8, s), std::vector<double>(8, 1.0));
    CUDA_CHECK(cudaFree(x));
  });
  for (int r = 0; r < 2; ++r) {
    ncclResult_t async = ncclSuccess;
    EXPECT_NCCL(ncclCommGetAsyncError(clique.comms[r], &async));
    EXPECT_EQ(async, ncclInvalidUsage) << "rank " << r;
  }
  const std::string message = ncclGetLastError(nullptr);
  EXPECT_CONTAINS(message, "mismatched collectives: call #0 is ncclAllReduce of 8 float64 (sum) on rank 0");
  EXPECT_CONTAINS(message, "but ncclBroadcast of 8 float64 (root 0) on rank 1");
}

TEST(HostNccl, DifferentCountsAreMismatchedCollectives) {
  Clique clique(2);
  on_ranks(2, [&](int r) {
    cudaStream_t s = clique.streams[r];
    float* x = upload(std::vector<float>(16, 1.f), s);
    EXPECT_NCCL(ncclAllReduce(x, x, r == 0 ? 16 : 8, ncclFloat32, ncclSum, clique.comms[r], s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaFree(x));
  });
  ncclResult_t async = ncclSuccess;
  EXPECT_NCCL(ncclCommGetAsyncError(clique.comms[0], &async));
  EXPECT_EQ(async, ncclInvalidUsage);
}

TEST(HostNccl, ACollectiveThatNeedsARankThatDestroyedItsCommunicatorFails) {
  Clique clique(2);
  EXPECT_NCCL(ncclCommDestroy(clique.comms[0]));
  clique.comms[0] = nullptr;
  CUDA_CHECK(cudaSetDevice(1));
  float* x = upload(std::vector<float>{1.f}, clique.streams[1]);
  EXPECT_NCCL(ncclAllReduce(x, x, 1, ncclFloat32, ncclSum, clique.comms[1], clique.streams[1]));
  EXPECT_EQ(download(x, 1, clique.streams[1])[0], 1.f);
  ncclResult_t async = ncclSuccess;
  EXPECT_NCCL(ncclCommGetAsyncError(clique.comms[1], &async));
  EXPECT_EQ(async, ncclRemoteError);
  EXPECT_CONTAINS(ncclGetLastError(nullptr), "rank 0 destroyed its communicator before collective #0");
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaSetDevice(0));
}

TEST(HostNccl, ASendAndAReceiveOfDifferentLengthsAreAnInvalidUsage) {
  Clique clique(2);
  on_ranks(2, [&](int r) {
    cudaStream_t s = clique.streams[r];
    float* x = upload(std::vector<float>(8, 1.f), s);
    if (r == 0) EXPECT_NCCL(ncclSend(x, 8, ncclFloat32, 1, clique.comms[r], s));
    else EXPECT_NCCL(ncclRecv(x, 4, ncclFloat32, 0, clique.comms[r], s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaFree(x));
  });
  ncclResult_t async = ncclSuccess;
  EXPECT_NCCL(ncclCommGetAsyncError(clique.comms[0], &async));
  EXPECT_EQ(async, ncclInvalidUsage);
  EXPECT_CONTAINS(ncclGetLastError(nullptr), "message #0 from rank 0 to rank 1 is ncclSend of 8 float32 to rank 1 but "
                                             "ncclRecv of 4 float32 from rank 0");
}

TEST(HostNccl, ABufferOnAnotherDeviceFaultsTheRanksDevice) {
  // Rank 0's communicator is on device 0, its buffer on device 2, without peer access: the
  // NCCL kernel faults as any kernel would, and the peer is told.
  Clique clique(2);
  CUDA_CHECK(cudaSetDevice(2));
  float* elsewhere = device_buffer<float>(4);
  CUDA_CHECK(cudaSetDevice(0));
  // Rank 1 first, so that its call is queued before rank 0's fault makes NCCL refuse calls.
  CUDA_CHECK(cudaSetDevice(1));
  float* x = upload(std::vector<float>(4, 2.f), clique.streams[1]);
  EXPECT_NCCL(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, clique.comms[1], clique.streams[1]));
  CUDA_CHECK(cudaSetDevice(0));
  EXPECT_NCCL(ncclAllReduce(elsewhere, elsewhere, 4, ncclFloat32, ncclSum, clique.comms[0], clique.streams[0]));
  EXPECT_EQ(cudaStreamSynchronize(clique.streams[0]), cudaErrorIllegalAddress);
  CUDA_CHECK(cudaSetDevice(1));
  const std::vector<float> peer_result = download(x, 4, clique.streams[1]);
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaSetDevice(0));
  EXPECT_EQ(peer_result, std::vector<float>(4, 2.f));
  ncclResult_t async[2];
  for (int r = 0; r < 2; ++r) EXPECT_NCCL(ncclCommGetAsyncError(clique.comms[r], &async[r]));
  EXPECT_EQ(async[0], ncclUnhandledCudaError);
  EXPECT_EQ(async[1], ncclRemoteError);
  EXPECT_CONTAINS(ncclGetLastError(nullptr), "kernel ncclAllReduce: argument 0 points into device 2's memory");
  CUDA_CHECK(cudaDeviceReset());  // device 0's sticky error, for the tests after this one
  cudaGetLastError();
  CUDA_CHECK(cudaSetDevice(2));
  CUDA_CHECK(cudaFree(elsewhere));
  CUDA_CHECK(cudaSetDevice(0));
}

TEST(HostNccl, BadArgumentsAreRefusedAtTheCall) {
  Clique clique(2);
  float* x = device_buffer<float>(4);
  EXPECT_EQ(ncclAllReduce(x, x, 4, ncclDataType_t(12), ncclSum, clique.comms[0], clique.streams[0]),
            ncclInvalidArgument);
  EXPECT_CONTAINS(ncclGetLastError(nullptr), "ncclAllReduce: invalid data type 12");
  EXPECT_EQ(ncclBroadcast(x, x, 4, ncclFloat32, 2, clique.comms[0], clique.streams[0]), ncclInvalidArgument);
  EXPECT_CONTAINS(ncclGetLastError(nullptr), "ncclBroadcast: root 2 is not a rank of 2");
  EXPECT_EQ(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, clique.comms[0], clique.streams[1]), ncclUnhandledCudaError)
      << "rank 0's communicator is on device 0, the stream on device 1";
  EXPECT_CONTAINS(ncclGetLastError(nullptr), "the stream belongs to device 1, the communicator's device is 0");
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  CUDA_CHECK(cudaFree(x));
}

// ---- What only ThreadSanitizer sees: a collective that does not wait for its input. ----
// Rank 0 writes its input on a compute stream and all-reduces it on its communication
// stream, as comm/nccl.cpp does, ordered by an event (comm/nccl.cpp's `ready`) or, the bug,
// not: then the copy and the ranks' reads of the input are unordered. Returns the result.
float all_reduce_written_on_another_stream(bool wait_for_the_input) {
  Clique clique(2);
  const size_t count = 256;
  cudaStream_t compute;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  cudaEvent_t ready;
  CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  float* x = upload(std::vector<float>(count, 1.f), compute);
  if (wait_for_the_input) {
    CUDA_CHECK(cudaEventRecord(ready, compute));
    CUDA_CHECK(cudaStreamWaitEvent(clique.streams[0], ready, 0));
  }
  CUDA_CHECK(cudaSetDevice(1));
  float* y = upload(std::vector<float>(count, 2.f), clique.streams[1]);
  EXPECT_NCCL(ncclAllReduce(y, y, count, ncclFloat32, ncclSum, clique.comms[1], clique.streams[1]));
  CUDA_CHECK(cudaSetDevice(0));
  EXPECT_NCCL(ncclAllReduce(x, x, count, ncclFloat32, ncclSum, clique.comms[0], clique.streams[0]));
  const float result = download(x, 1, clique.streams[0])[0];
  CUDA_CHECK(cudaSetDevice(1));
  CUDA_CHECK(cudaFree(y));
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaEventDestroy(ready));
  CUDA_CHECK(cudaStreamDestroy(compute));
  return result;
}

// The correct version: in the ThreadSanitizer build a report here would fail the test.
TEST(HostNccl, AnEventOrdersACollectiveAfterTheStreamThatWroteItsInput) {
  EXPECT_EQ(all_reduce_written_on_another_stream(true), 3.f);
}

TEST(HostNcclSanitizers, ThreadSanitizerReportsACollectiveThatDoesNotWaitForItsInput) {
#ifndef DPCORE_SANITIZE_THREAD
  GTEST_SKIP() << "needs the ThreadSanitizer build (scripts/test.sh: build-tsan)";
#else
  setenv("TSAN_OPTIONS", "halt_on_error=1", 1);
  EXPECT_DEATH(all_reduce_written_on_another_stream(false), "data race(.|\n)*Clique::collective");
#endif
}

}  // namespace
