// The batch loader: coverage of every sample, order, resumption, the worker thread's
// failures and shutdown, reuse of its buffers, and its lane in a trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "engine/data/loader.h"
#include "engine/trace.h"
#include "support/error_of.h"
#include "support/test_support.h"
#include "support/trace_checks.h"

namespace dpcore::data {
namespace {

using testing::error_of;
using testing::read_trace;
using testing::spans_of;
using testing::TempDir;

// n samples of 2 x 3 x 1; every pixel of sample i is i and its label i % 5, so a batch
// tells which samples it holds.
Dataset numbered(int64_t n) {
  Dataset d;
  d.name = "numbered";
  d.n = n;
  d.c = 2;
  d.h = 3;
  d.w = 1;
  d.num_classes = 5;
  for (int64_t i = 0; i < n; ++i) {
    d.images.insert(d.images.end(), 6, float(i));
    d.labels.push_back(i % 5);
  }
  return d;
}

// The samples of one batch, checking that each one was copied whole with its label.
std::vector<int64_t> samples_of(const Batch& b) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < b.size; ++i) {
    const int64_t id = int64_t(b.images[i * 6]);
    for (int p = 0; p < 6; ++p) EXPECT_EQ(b.images[i * 6 + p], float(id));
    EXPECT_EQ(b.labels[i], id % 5);
    ids.push_back(id);
  }
  return ids;
}

// One epoch: the batch sizes and the samples in the order they came.
struct Epoch {
  std::vector<int64_t> sizes, order;
};

Epoch run_epoch(DataLoader& loader) {
  Epoch e;
  Batch b;
  while (loader.next(b)) {
    EXPECT_EQ(b.sample_numel(), 6);
    e.sizes.push_back(b.size);
    for (int64_t id : samples_of(b)) e.order.push_back(id);
  }
  return e;
}

LoaderOptions options(int64_t batch, bool shuffle, bool drop_last, uint64_t seed = 7) {
  LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.drop_last = drop_last;
  o.seed = seed;
  return o;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

TEST(Loader, WithoutShuffleEveryEpochIsFileOrder) {
  Dataset d = numbered(23);
  DataLoader loader(d, options(5, false, false));
  EXPECT_EQ(loader.batches_per_epoch(), 5);
  for (int epoch = 0; epoch < 3; ++epoch) {
    Epoch e = run_epoch(loader);
    EXPECT_EQ(e.sizes, (std::vector<int64_t>{5, 5, 5, 5, 3}));
    EXPECT_EQ(e.order, iota(23));
  }
}

TEST(Loader, ShuffledEpochsVisitEverySampleOnceInDifferentOrders) {
  Dataset d = numbered(103);
  DataLoader loader(d, options(10, true, false));
  std::vector<std::vector<int64_t>> orders;
  for (int epoch = 0; epoch < 3; ++epoch) {
    Epoch e = run_epoch(loader);
    EXPECT_EQ(e.sizes.size(), 11u);
    EXPECT_EQ(e.sizes.back(), 3);
    EXPECT_EQ(sorted(e.order), iota(103)) << "epoch " << epoch;
    EXPECT_NE(e.order, iota(103));
    EXPECT_EQ(e.order, sample_order(103, true, 7, epoch));
    orders.push_back(e.order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
}

TEST(Loader, DropLastDropsOnlyTheShortBatch) {
  Dataset d = numbered(103);
  for (bool shuffle : {false, true}) {
    DataLoader loader(d, options(10, shuffle, true));
    EXPECT_EQ(loader.batches_per_epoch(), 10);
    for (int epoch = 0; epoch < 2; ++epoch) {
      Epoch e = run_epoch(loader);
      EXPECT_EQ(e.sizes, std::vector<int64_t>(10, 10));
      std::vector<int64_t> full = sample_order(103, shuffle, 7, epoch);
      EXPECT_EQ(e.order, std::vector<int64_t>(full.begin(), full.begin() + 100));
      const std::vector<int64_t> ids = sorted(e.order);
      EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "a sample came twice";
    }
  }
  Dataset thirty = numbered(30);
  DataLoader exact(thirty, options(10, true, true));
  EXPECT_EQ(run_epoch(exact).sizes, (std::vector<int64_t>{10, 10, 10}));
}

TEST(Loader, SameSeedSameOrderOtherSeedOtherOrder) {
  Dataset d = numbered(64);
  DataLoader a(d, options(8, true, false, 1)), b(d, options(8, true, false, 1)), c(d, options(8, true, false, 2));
  for (int epoch = 0; epoch < 2; ++epoch) {
    Epoch ea = run_epoch(a), eb = run_epoch(b), ec = run_epoch(c);
    EXPECT_EQ(ea.order, eb.order);
    EXPECT_NE(ea.order, ec.order);
  }
}

TEST(Loader, OrderIsPinnedAcrossPlatformsAndVersions) {
  // Checkpoints resume by recomputing the order, so the documented algorithm (mt19937_64
  // seeded with derive_seed(seed, epoch), Fisher-Yates, rejection sampling) must never change.
  // mt19937_64's 10000th output is fixed by the C++ standard; the permutation below is what
  // the algorithm produced when it was written.
  std::mt19937_64 standard;
  standard.discard(9999);
  EXPECT_EQ(standard(), 9981545732273789042ull);
  EXPECT_EQ(sample_order(10, true, 42, 0), (std::vector<int64_t>{2, 0, 4, 7, 8, 3, 5, 1, 9, 6}));
}

TEST(Loader, ResumingFromAPositionReproducesTheRest) {
  Dataset d = numbered(57);
  const LoaderOptions o = options(6, true, false, 99);
  DataLoader first(d, o);
  run_epoch(first);
  Batch b;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(first.next(b));
  const LoaderPosition saved = first.position();
  EXPECT_EQ(saved, (LoaderPosition{1, 4}));
  std::vector<int64_t> rest;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (int64_t id : run_epoch(first).order) rest.push_back(id);

  DataLoader resumed(d, o, saved);
  EXPECT_EQ(resumed.position(), saved);
  std::vector<int64_t> again;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (int64_t id : run_epoch(resumed).order) again.push_back(id);
  EXPECT_EQ(again, rest);
  EXPECT_EQ(resumed.position(), (LoaderPosition{3, 0}));

  // The same through seek() on a loader that is holding a batch and has others queued.
  DataLoader seeking(d, o);
  ASSERT_TRUE(seeking.next(b));
  seeking.seek(saved);
  std::vector<int64_t> sought;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (int64_t id : run_epoch(seeking).order) sought.push_back(id);
  EXPECT_EQ(sought, rest);
}

TEST(Loader, PositionAtEpochEndEndsTheEpochFirst) {
  Dataset d = numbered(20);
  DataLoader loader(d, options(5, true, false), {2, 4});
  Batch b;
  EXPECT_FALSE(loader.next(b));
  EXPECT_EQ(loader.position(), (LoaderPosition{3, 0}));
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.epoch, 3);
  EXPECT_EQ(b.index, 0);
  std::vector<int64_t> expect = sample_order(20, true, 7, 3);
  EXPECT_EQ(samples_of(b), std::vector<int64_t>(expect.begin(), expect.begin() + 5));
}

TEST(Loader, BadOptionsAndPositionsAreErrors) {
  Dataset d = numbered(20);
  EXPECT_NE(error_of([&] { DataLoader(d, options(0, true, false)); }).find("batch size must be positive, got 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { DataLoader(d, options(21, true, true)); }).find("batch size 21 is larger than the 20"),
            std::string::npos);
  DataLoader whole(d, options(21, false, false));  // without drop_last one short batch per epoch
  EXPECT_EQ(run_epoch(whole).sizes, (std::vector<int64_t>{20}));
  LoaderOptions no_prefetch = options(4, true, false);
  no_prefetch.prefetch = 0;
  EXPECT_NE(error_of([&] { DataLoader(d, no_prefetch); }).find("prefetch must be at least 1"), std::string::npos);
  DataLoader loader(d, options(4, true, false));
  EXPECT_NE(error_of([&] {
              loader.seek({0, 6});
            }).find("cannot seek to epoch 0 batch 6 (an epoch has 5 batches)"),
            std::string::npos);
  Dataset broken = numbered(5);
  broken.labels[3] = 5;
  EXPECT_NE(error_of([&] { DataLoader(broken, options(2, true, false)); }).find("label 5 of sample 3"),
            std::string::npos);
}

// Counts calls, and throws on call number `fail_at` (0: never).
struct CountingAllocator {
  std::atomic<int> allocations{0}, frees{0};
  int fail_at = 0;
  HostAllocator get() {
    HostAllocator base = aligned_host_allocator();
    return {[this, base](size_t bytes) {
              if (++allocations == fail_at)
                throw Error("pinned allocation of " + std::to_string(bytes) + " bytes failed");
              return base.allocate(bytes);
            },
            [this, base](void* p) {
              ++frees;
              base.deallocate(p);
            }};
  }
};

TEST(Loader, BuffersAreReusedSoSteadyStateAllocatesNothing) {
  Dataset d = numbered(100);
  CountingAllocator counter;
  {
    LoaderOptions o = options(7, true, false);
    o.allocator = counter.get();
    DataLoader loader(d, o);
    for (int epoch = 0; epoch < 5; ++epoch) run_epoch(loader);
    // 75 batches came out of at most prefetch + 1 buffers (how many of them get used
    // depends on how far the worker runs ahead).
    EXPECT_GE(counter.allocations, 1);
    EXPECT_LE(counter.allocations, o.prefetch + 1);
  }
  EXPECT_EQ(counter.frees, counter.allocations);
}

TEST(Loader, WorkerExceptionReachesTheConsumer) {
  Dataset d = numbered(100);
  CountingAllocator counter;
  counter.fail_at = 1;
  LoaderOptions o = options(10, false, false);
  o.allocator = counter.get();
  DataLoader loader(d, o);
  Batch b;
  for (int attempt = 0; attempt < 2; ++attempt)
    EXPECT_NE(error_of([&] { loader.next(b); }).find("pinned allocation of"), std::string::npos) << attempt;
}

TEST(Loader, BatchesPreparedBeforeAWorkerExceptionAreDeliveredFirst) {
  Dataset d = numbered(100);
  CountingAllocator counter;
  counter.fail_at = 2;  // the first buffer works; whichever batch needs a second one fails
  LoaderOptions o = options(10, false, false);
  o.allocator = counter.get();
  DataLoader loader(d, o);
  // Let the worker run ahead before taking anything: it prepares the first batch in the
  // first buffer, then needs a second buffer for the next batch, whose allocation fails.
  // Consuming at once could hand the first buffer back in time for every batch (a busy
  // machine schedules the consumer first), and the failure would never come.
  for (int i = 0; i < 1000 && counter.allocations < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(counter.allocations.load(), 2) << "the worker never asked for a second buffer";
  Batch b;
  int64_t delivered = 0;
  std::string message;
  while (message.empty() && delivered < 10) {
    try {
      ASSERT_TRUE(loader.next(b));
      const std::vector<int64_t> upto = iota(10 * (delivered + 1));
      EXPECT_EQ(samples_of(b), std::vector<int64_t>(upto.end() - 10, upto.end()));
      ++delivered;
    } catch (const Error& e) {
      message = e.what();
    }
  }
  EXPECT_EQ(delivered, 1);  // the one batch prepared before the failure, then the error
  EXPECT_NE(message.find("pinned allocation of"), std::string::npos) << message;
}

// Runs `action` on another thread and fails the whole test binary if it does not finish
// within a generous limit: a hang would otherwise stall the test run with no message.
template <class Action>
void expect_finishes(const char* what, Action action) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    action();
    done = true;
  });
  for (int i = 0; i < 1000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!done) {
    std::fprintf(stderr, "FATAL: %s did not finish within 10 s (the loader hangs)\n", what);
    std::_Exit(1);
  }
  t.join();
}

TEST(Loader, DestroyingMidEpochDoesNotHang) {
  Dataset d = numbered(1000);
  expect_finishes("destroying an unused loader", [&] { DataLoader loader(d, options(10, true, false)); });
  expect_finishes("destroying a loader mid-epoch", [&] {
    DataLoader loader(d, options(10, true, false));
    Batch b;
    for (int i = 0; i < 3; ++i) loader.next(b);
    // Let the worker fill the queue and block on it.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  });
  expect_finishes("destroying a loader after a worker error", [&] {
    CountingAllocator counter;
    counter.fail_at = 1;
    LoaderOptions o = options(10, true, false);
    o.allocator = counter.get();
    DataLoader loader(d, o);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
}

// The worker records each batch it gathers as "prepare batch" on the lane "loader". With
// recording on before the loader exists, the batches next() returned were all prepared
// while recording (their spans end before they are queued); the worker may have begun the
// next ones too, which stop() keeps when they were open.
TEST(Loader, TheWorkerRecordsEachBatchItPreparesOnTheLoaderLane) {
  TempDir dir;
  trace::write(dir.file("before.json"));  // (starts the file below after any earlier events)
  Dataset d = numbered(20);
  trace::start();
  {
    DataLoader loader(d, options(5, false, false));
    Batch b;
    ASSERT_TRUE(loader.next(b));
    ASSERT_TRUE(loader.next(b));
    trace::stop();
  }  // (joins the worker: a span it had open has ended)
  trace::write(dir.file("t.json"));

  testing::TraceFile t = read_trace(dir.file("t.json"));
  std::vector<testing::TraceSpan> spans = spans_of(t, "loader", "");
  ASSERT_GE(spans.size(), 2u);
  ASSERT_LE(spans.size(), 4u) << "the worker stays within 2 batches queued beside the one in use";
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(spans[i].name, "prepare batch");
    EXPECT_EQ(spans[i].args.value("epoch", 0), 1) << spans[i].args.dump();
    EXPECT_EQ(spans[i].args.value("batch", -1), int64_t(i)) << spans[i].args.dump();
    EXPECT_EQ(spans[i].args.value("samples", 0), 5) << spans[i].args.dump();
    EXPECT_EQ(t.sort_index.at(spans[i].key()), trace::kLoaderLane);
  }
}

}  // namespace
}  // namespace dpcore::data
