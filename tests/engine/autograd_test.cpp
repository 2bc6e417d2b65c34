// Behaviour of the autograd engine itself: accumulation, evaluation mode, hooks, the
// in-place path into flat gradient buffers.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/autograd.h"
#include "engine/flat_parameters.h"
#include "engine/ops.h"
#include "engine/runtime.h"
#include "support/error_of.h"
#include "support/gradcheck.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

TEST(Autograd, BackwardAccumulatesIntoExistingGradients) {
  Tensor x = testing::random_leaf({2, 3}, 1);
  ops::sum(ops::scale(x, 2.0)).backward();
  ops::sum(ops::scale(x, 2.0)).backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(g, 4.0);
}

TEST(Autograd, EvaluationModeRecordsNothing) {
  Tensor x = testing::random_leaf({2, 3}, 2);
  autograd::NoGradGuard guard;
  Tensor y = ops::relu(x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_THROW(ops::sum(y).backward(), Error);
}

TEST(Autograd, NoGradGuardRestoresOnExit) {
  { autograd::NoGradGuard guard; }
  EXPECT_TRUE(autograd::grad_mode_enabled());
}

TEST(Autograd, NonScalarNeedsASeed) {
  Tensor x = testing::random_leaf({2, 3}, 3);
  Tensor y = ops::scale(x, 3.0);
  EXPECT_THROW(y.backward(), Error);
  y.backward(Tensor::full({2, 3}, 0.5, DType::Float64));
  for (double g : x.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(g, 1.5);
}

// Two linear layers whose parameters live in one flat buffer, as a Model lays them out.
struct TwoLayers {
  FlatParameters params{{{"a.weight", {4, 3}}, {"a.bias", {4}}, {"b.weight", {2, 4}}, {"b.bias", {2}}},
                        DType::Float64, Device::cpu()};
  TwoLayers() {
    auto v = testing::random_vector<double>(size_t(params.total()), 7);
    params.values().copy_(Tensor::from_vector(v, {params.total()}));
  }
  Tensor loss(const Tensor& x) {
    Tensor h = ops::relu(ops::linear(x, params.param(0), params.param(1)));
    return ops::sum(ops::linear(h, params.param(2), params.param(3)));
  }
};

TEST(Autograd, HooksFireOncePerLeafInReverseLayerOrder) {
  TwoLayers net;
  std::vector<std::string> fired;
  for (size_t i = 0; i < net.params.params().size(); ++i) {
    Tensor p = net.params.param(i);
    std::string name = net.params.entries()[i].name;
    p.add_post_accumulate_hook([&fired, name](const Tensor&) { fired.push_back(name); });
  }
  net.loss(testing::random_leaf({5, 3}, 8)).backward();
  ASSERT_EQ(fired.size(), 4u);
  // The second layer's gradients are final before the first layer's.
  auto pos = [&](const std::string& n) { return std::find(fired.begin(), fired.end(), n) - fired.begin(); };
  EXPECT_LT(pos("b.weight"), pos("a.weight"));
  EXPECT_LT(pos("b.bias"), pos("a.bias"));
}

TEST(Autograd, FlatBufferGradientsEqualFreshLeafGradients) {
  TwoLayers net;
  Tensor x = testing::random_leaf({5, 3}, 9);
  net.params.zero_grad();
  net.loss(x).backward();
  net.loss(x).backward();  // accumulates: twice the gradient
  // Same computation on detached copies that have no gradient buffers.
  std::vector<Tensor> fresh;
  for (const Tensor& p : net.params.params()) fresh.push_back(p.clone().set_requires_grad(true));
  Tensor h = ops::relu(ops::linear(x, fresh[0], fresh[1]));
  ops::sum(ops::linear(h, fresh[2], fresh[3])).backward();
  for (size_t i = 0; i < fresh.size(); ++i) {
    auto flat = net.params.param(i).grad().to_vector<double>();
    auto ref = fresh[i].grad().to_vector<double>();
    for (size_t j = 0; j < ref.size(); ++j) EXPECT_NEAR(flat[j], 2 * ref[j], 1e-12) << net.params.entries()[i].name;
  }
  // The gradient views really are slices of the one flat buffer.
  EXPECT_EQ(net.params.param(2).grad().raw_data(),
            static_cast<char*>(net.params.grads().raw_data()) + net.params.entries()[2].offset * sizeof(double));
}

// Row blocks of a parameter (MultiheadAttention's in_proj_weight) add their gradients
// straight into its rows of the flat buffer, and its hook fires once, after all of them.
TEST(Autograd, NarrowedBlocksOfAParameterAccumulateInPlaceAndFireItsHookOnce) {
  FlatParameters params({{"w", {6, 3}}}, DType::Float64, Device::cpu());
  params.values().copy_(Tensor::from_vector(testing::random_vector<double>(size_t(params.total()), 11), {params.total()}));
  params.zero_grad();
  int fired = 0;
  Tensor w = params.param(0);
  w.add_post_accumulate_hook([&fired](const Tensor&) { ++fired; });
  Tensor x = testing::random_leaf({5, 3}, 12);
  auto loss = [&x](const Tensor& weight) {
    Tensor total = ops::sum(ops::relu(ops::linear(x, ops::narrow0(weight, 0, 2), Tensor())));
    for (int64_t block = 1; block < 3; ++block)
      total = ops::add(total, ops::scale(ops::sum(ops::linear(x, ops::narrow0(weight, 2 * block, 2 * block + 2), Tensor())), double(block + 1)));
    return total;
  };
  loss(w).backward();
  EXPECT_EQ(fired, 1);
  Tensor fresh = w.clone().set_requires_grad(true);  // no gradient buffer: the fresh-tensor path
  loss(fresh).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), fresh.grad().to_vector<double>());
  EXPECT_NE(testing::error_of([&] { ops::narrow0(w, 4, 7); }).find("rows [4, 7) are not within the 6 rows of [6, 3]"),
            std::string::npos);
}

TEST(FlatParameters, LayoutIsAlignedAndPaddingStaysZero) {
  FlatParameters p({{"w", {3, 5}}, {"b", {3}}}, DType::Float32, Device::cpu());
  EXPECT_EQ(p.entries()[0].offset, 0);
  EXPECT_EQ(p.entries()[1].offset, 16);  // 15 elements rounded up to 16
  EXPECT_EQ(p.total(), 32);
  Tensor x = Tensor::full({2, 5}, 1.0);
  ops::sum(ops::linear(x, p.param(0), p.param(1))).backward();
  auto g = p.grads().to_vector<float>();
  EXPECT_EQ(g[15], 0.0f);
  for (int i = 19; i < 32; ++i) EXPECT_EQ(g[size_t(i)], 0.0f);
  p.zero_grad();
  for (float v : p.grads().to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(FlatParameters, DuplicateNamesAndUnknownNamesAreErrors) {
  EXPECT_THROW(FlatParameters({{"w", {2}}, {"w", {3}}}, DType::Float32, Device::cpu()), Error);
  FlatParameters p({{"w", {2}}}, DType::Float32, Device::cpu());
  try {
    p.entry("v");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'v'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpcore

namespace dpcore {
namespace {

// An allocator that counts, around the CPU backend's own.
class CountingAllocator : public Allocator {
 public:
  explicit CountingAllocator(Allocator& inner) : inner_(inner) {}
  void* allocate(size_t bytes) override {
    ++allocations;
    return inner_.allocate(bytes);
  }
  void deallocate(void* p, size_t bytes) override {
    ++deallocations;
    inner_.deallocate(p, bytes);
  }
  size_t bytes_in_use() const override { return inner_.bytes_in_use(); }
  size_t peak_bytes() const override { return inner_.peak_bytes(); }
  void reset_peak() override { inner_.reset_peak(); }
  int allocations = 0, deallocations = 0;

 private:
  Allocator& inner_;
};

TEST(Storage, AllocatorsArePluggable) {
  CountingAllocator counting(runtime::allocator_for(Device::cpu()));
  runtime::set_allocator(Device::cpu(), &counting);
  {
    Tensor a = Tensor::zeros({3, 4});
    Tensor b = ops::relu(a);
    EXPECT_EQ(counting.allocations, 2);
  }
  EXPECT_EQ(counting.deallocations, 2);
  runtime::set_allocator(Device::cpu(), nullptr);
  Tensor c = Tensor::zeros({2});
  EXPECT_EQ(counting.allocations, 2);  // back to the backend's own
}

}  // namespace
}  // namespace dpcore
