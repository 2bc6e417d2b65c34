// Finite-difference checks in float64 of every differentiable op (engine/ops.h).
#include <gtest/gtest.h>

#include "engine/ops.h"
#include "support/gradcheck.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

using testing::gradcheck;
using testing::random_leaf;

// A weighted sum turns any output into a scalar whose gradient reaches every element
// with a different weight (a plain sum would hide transposed or permuted gradients).
Tensor weighted_sum(const Tensor& y, uint64_t seed) {
  auto w = testing::random_vector<double>(size_t(y.numel()), seed);
  Tensor weights = Tensor::from_vector(w, y.shape());
  // sum(y * w) through ops we trust: linear of the flattened output with w as a 1-row weight.
  Tensor flat = ops::reshape(y, {1, y.numel()});
  return ops::sum(ops::linear(flat, weights.view({1, y.numel()}), Tensor()));
}

void expect_passes(const testing::GradcheckResult& r, int64_t min_checked) {
  EXPECT_TRUE(r.failures.empty()) << r.failures.size() << " mismatches; worst " << r.worst_where;
  EXPECT_GE(r.checked, min_checked) << "too few points checked (" << r.skipped_near_kink << " skipped near kinks)";
  EXPECT_LE(r.skipped_near_kink, r.checked / 10 + 2) << "too many points near kinks";
}

struct ConvCase {
  int64_t n, c, h, w, k, r, s, stride, pad;
};

class Conv2dGradcheck : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dGradcheck, InputWeightBias) {
  ConvCase p = GetParam();
  Tensor x = random_leaf({p.n, p.c, p.h, p.w}, 1);
  Tensor w = random_leaf({p.k, p.c, p.r, p.s}, 2);
  Tensor b = random_leaf({p.k}, 3);
  ops::Conv2dOptions opt{p.stride, p.stride, p.pad, p.pad};
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return weighted_sum(ops::conv2d(in[0], in[1], in[2], opt), 4); },
                     {x, w, b});
  expect_passes(r, x.numel() + w.numel() + b.numel());
}

INSTANTIATE_TEST_SUITE_P(Shapes, Conv2dGradcheck,
                         ::testing::Values(ConvCase{2, 3, 5, 5, 4, 3, 3, 1, 1}, ConvCase{1, 2, 7, 6, 3, 3, 3, 2, 1},
                                           ConvCase{2, 1, 6, 5, 2, 2, 3, 1, 0}, ConvCase{1, 2, 5, 7, 3, 3, 3, 2, 2}));

TEST(Gradcheck, Linear) {
  Tensor x = random_leaf({3, 5}, 1), w = random_leaf({4, 5}, 2), b = random_leaf({4}, 3);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::linear(in[0], in[1], in[2]), 4); },
                     {x, w, b});
  expect_passes(r, x.numel() + w.numel() + b.numel());
}

TEST(Gradcheck, MaxPool) {
  for (auto opt : {ops::Pool2dOptions{2, 2, 2, 2, 0, 0}, ops::Pool2dOptions{3, 3, 2, 2, 1, 1},
                   ops::Pool2dOptions{3, 2, 1, 2, 1, 0}}) {
    Tensor x = random_leaf({2, 3, 7, 6}, 5);
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return weighted_sum(ops::max_pool2d(in[0], opt), 6); }, {x});
    expect_passes(r, x.numel() * 8 / 10);
  }
}

TEST(Gradcheck, Relu) {
  Tensor x = random_leaf({4, 9}, 7);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::relu(in[0]), 8); }, {x});
  expect_passes(r, x.numel() * 8 / 10);
}

TEST(Gradcheck, ReshapeAndFlatten) {
  Tensor x = random_leaf({2, 3, 4}, 9);
  auto r = gradcheck(
      [](const std::vector<Tensor>& in) {
        return weighted_sum(ops::reshape(ops::flatten(in[0]), {-1, 4, 3}), 10);
      },
      {x});
  expect_passes(r, x.numel());
}

TEST(Gradcheck, LogSoftmax) {
  Tensor x = random_leaf({3, 7}, 11, -3, 3);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::log_softmax(in[0]), 12); }, {x});
  expect_passes(r, x.numel());
}

TEST(Gradcheck, NllLossMeanAndSum) {
  Tensor target = Tensor::from_vector<int64_t>({2, 0, 4, 4}, {4});
  for (auto red : {ops::Reduction::Mean, ops::Reduction::Sum}) {
    Tensor x = random_leaf({4, 5}, 13, -3, 0);
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return ops::nll_loss(in[0], target, red); }, {x});
    expect_passes(r, x.numel());
  }
}

TEST(Gradcheck, FusedCrossEntropy) {
  Tensor target = Tensor::from_vector<int64_t>({1, 0, 3}, {3});
  for (auto red : {ops::Reduction::Mean, ops::Reduction::Sum}) {
    Tensor x = random_leaf({3, 6}, 14, -4, 4);
    // Through a scale so the incoming gradient is not 1: the fused backward must rescale.
    auto r = gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::scale(ops::cross_entropy(in[0], target, red), 2.5); }, {x});
    expect_passes(r, x.numel());
  }
}

TEST(Gradcheck, AddScaleSumMean) {
  Tensor a = random_leaf({3, 4}, 15), b = random_leaf({3, 4}, 16);
  auto r = gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor y = ops::add(ops::scale(in[0], -1.5), in[1]);
        return ops::add(ops::sum(ops::relu(y)), ops::mean(ops::add(y, in[0])));
      },
      {a, b});
  expect_passes(r, (a.numel() + b.numel()) * 8 / 10);
}

TEST(Gradcheck, InputUsedTwiceAccumulates) {
  Tensor x = random_leaf({2, 3}, 17);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::add(in[0], ops::scale(in[0], 3.0)), 18); },
                     {x});
  expect_passes(r, x.numel());
}

}  // namespace
}  // namespace dpcore

namespace dpcore {
namespace {

TEST(Gradcheck, FusedConvReluAndConvReluPool) {
  ops::Conv2dOptions conv{1, 1, 1, 1};
  ops::Pool2dOptions pool{2, 2, 2, 2, 0, 0};
  Tensor x = testing::random_leaf({2, 3, 6, 6}, 21), w = testing::random_leaf({4, 3, 3, 3}, 22);
  Tensor b = testing::random_leaf({4}, 23);
  auto r1 = testing::gradcheck(
      [&](const std::vector<Tensor>& in) { return weighted_sum(ops::conv2d_relu(in[0], in[1], in[2], conv), 24); },
      {x, w, b});
  expect_passes(r1, (x.numel() + w.numel() + b.numel()) * 8 / 10);
  Tensor x2 = testing::random_leaf({2, 3, 6, 6}, 25), w2 = testing::random_leaf({4, 3, 3, 3}, 26);
  Tensor b2 = testing::random_leaf({4}, 27);
  auto r2 = testing::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return weighted_sum(ops::conv2d_relu_max_pool2d(in[0], in[1], in[2], conv, pool), 28);
      },
      {x2, w2, b2});
  expect_passes(r2, (x2.numel() + w2.numel() + b2.numel()) * 8 / 10);
}

TEST(FusedOps, EqualTheComposition) {
  ops::Conv2dOptions conv{2, 2, 1, 1};
  ops::Pool2dOptions pool{3, 3, 2, 2, 1, 1};
  auto run = [&](bool fused) {
    Tensor x = testing::random_leaf({3, 2, 9, 8}, 31), w = testing::random_leaf({5, 2, 3, 3}, 32);
    Tensor b = testing::random_leaf({5}, 33);
    Tensor y = fused ? ops::conv2d_relu_max_pool2d(x, w, b, conv, pool)
                     : ops::max_pool2d(ops::relu(ops::conv2d(x, w, b, conv)), pool);
    weighted_sum(y, 34).backward();
    std::vector<double> all = y.to_vector<double>();
    for (const Tensor& t : {x, w, b}) {
      auto g = t.grad().to_vector<double>();
      all.insert(all.end(), g.begin(), g.end());
    }
    return all;
  };
  EXPECT_EQ(run(true), run(false));  // bit-identical on the CPU
}

}  // namespace
}  // namespace dpcore
