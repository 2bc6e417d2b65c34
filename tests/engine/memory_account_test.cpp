// Memory accounts (engine/memory_account.h): a thread's tensors are charged to the account
// its open scope names, and only those; freeing one, on any thread, gives its bytes back;
// the run-long peak and the window's peak are the most held at once since their resets;
// scopes nest.
#include <thread>

#include <gtest/gtest.h>

#include "engine/memory_account.h"
#include "engine/tensor.h"

namespace dpcore {
namespace {

constexpr size_t kBytes = 1000 * sizeof(float);

TEST(MemoryAccount, AScopesThreadsTensorsAreChargedUntilFreedOnAnyThread) {
  auto account = std::make_shared<MemoryAccount>();
  Tensor outside = Tensor::zeros({1000}, DType::Float32);
  Tensor kept;
  std::thread stage([&] {
    const MemoryAccount::Scope charged(account);
    Tensor gone = Tensor::zeros({1000}, DType::Float32);
    kept = Tensor::zeros({1000}, DType::Float32);
    EXPECT_EQ(account->bytes_in_use(), 2 * kBytes);
  });
  stage.join();
  EXPECT_EQ(account->bytes_in_use(), kBytes) << "the tensor the thread kept is still its account's";
  EXPECT_EQ(account->peak_bytes(), 2 * kBytes);
  kept = Tensor();  // freed on this thread, charged to the stage's
  EXPECT_EQ(account->bytes_in_use(), 0u);
  Tensor after = Tensor::zeros({1000}, DType::Float32);
  EXPECT_EQ(account->bytes_in_use(), 0u) << "no scope open here: not charged";
  EXPECT_EQ(MemoryAccount::current(), nullptr);
}

TEST(MemoryAccount, PeaksCountFromTheirResetsAndScopesNest) {
  auto outer = std::make_shared<MemoryAccount>(), inner = std::make_shared<MemoryAccount>();
  const MemoryAccount::Scope charged(outer);
  Tensor a = Tensor::zeros({1000}, DType::Float32), b = Tensor::zeros({1000}, DType::Float32);
  b = Tensor();
  outer->begin_window();
  EXPECT_EQ(outer->window_peak_bytes(), kBytes) << "a window starts at what is held";
  EXPECT_EQ(outer->peak_bytes(), 2 * kBytes);
  {
    const MemoryAccount::Scope nested(inner);
    Tensor c = Tensor::zeros({2000}, DType::Float32);
    EXPECT_EQ(inner->peak_bytes(), 2 * kBytes);
    EXPECT_EQ(outer->bytes_in_use(), kBytes);
  }
  EXPECT_EQ(MemoryAccount::current(), outer) << "the outer account is back";
  Tensor d = Tensor::zeros({500}, DType::Float32);
  EXPECT_EQ(outer->window_peak_bytes(), kBytes + kBytes / 2);
  outer->reset_peak();
  EXPECT_EQ(outer->peak_bytes(), kBytes + kBytes / 2);
}

}  // namespace
}  // namespace dpcore
