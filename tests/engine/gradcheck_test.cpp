// Finite-difference checks in float64 of every differentiable op (engine/ops.h).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

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

// Training: the statistics depend on x, so every x gets a gradient through them; with and
// without weight and bias, one image, one value per plane. Eval: constants from the running
// statistics.
TEST(Gradcheck, BatchNorm2d) {
  for (Shape shape : {Shape{3, 2, 3, 4}, Shape{1, 3, 2, 3}, Shape{5, 2, 1, 1}})
    for (bool training : {true, false})
      for (bool affine : {true, false}) {
        SCOPED_TRACE(shape_str(shape) + (training ? " training" : " eval") + (affine ? ", affine" : ""));
        const int64_t C = shape[1];
        Tensor x = random_leaf(shape, 41), w = random_leaf({C}, 42, 0.5, 1.5), b = random_leaf({C}, 43);
        Tensor running_mean = random_leaf({C}, 44).detach(), running_var = random_leaf({C}, 45, 0.5, 2.0).detach();
        std::vector<Tensor> inputs = {x};
        if (affine) inputs.insert(inputs.end(), {w, b});
        auto r = gradcheck(
            [&](const std::vector<Tensor>& in) {
              Tensor weight = affine ? in[1] : Tensor(), bias = affine ? in[2] : Tensor();
              return weighted_sum(ops::batch_norm2d(in[0], weight, bias, running_mean, running_var, training), 46);
            },
            inputs);
        expect_passes(r, x.numel() + (affine ? 2 * C : 0));
      }
}

// PyTorch's numbers for one channel of values 1, 2, 3, 6: mean 3, biased variance 3.5,
// unbiased 14/3. Training updates the running statistics with momentum 0.1; eval
// normalises with them and leaves them alone; without running statistics training works.
TEST(BatchNorm2dOp, TrainingUpdatesRunningStatisticsAndEvalUsesThem) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 6}, {2, 1, 1, 2});
  Tensor running_mean = Tensor::zeros({1}, DType::Float64), running_var = Tensor::full({1}, 1.0, DType::Float64);
  Tensor none;
  const std::vector<double> train_y = ops::batch_norm2d(x, none, none, running_mean, running_var, true).to_vector<double>();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(train_y[i], (x.to_vector<double>()[i] - 3.0) / std::sqrt(3.5 + 1e-5), 1e-14);
  EXPECT_NEAR(running_mean.item(), 0.1 * 3.0, 1e-14);
  EXPECT_NEAR(running_var.item(), 0.9 + 0.1 * 14.0 / 3.0, 1e-14);
  const std::vector<double> eval_y = ops::batch_norm2d(x, none, none, running_mean, running_var, false).to_vector<double>();
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(eval_y[i], (x.to_vector<double>()[i] - 0.3) / std::sqrt(0.9 + 0.1 * 14.0 / 3.0 + 1e-5), 1e-14);
  EXPECT_NEAR(running_mean.item(), 0.3, 1e-14);
  EXPECT_NEAR(running_var.item(), 0.9 + 0.1 * 14.0 / 3.0, 1e-14);
  const std::vector<double> untracked_y = ops::batch_norm2d(x, none, none, none, none, true).to_vector<double>();
  EXPECT_EQ(untracked_y, train_y);
}

TEST(Gradcheck, Relu) {
  Tensor x = random_leaf({4, 9}, 7);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::relu(in[0]), 8); }, {x});
  expect_passes(r, x.numel() * 8 / 10);
}

TEST(Gradcheck, AvgPool) {
  for (auto opt : {ops::Pool2dOptions{2, 2, 2, 2, 0, 0}, ops::Pool2dOptions{3, 3, 2, 2, 1, 1},
                   ops::Pool2dOptions{3, 2, 1, 2, 1, 0}, ops::Pool2dOptions{3, 3, 1, 1, 1, 1}})
    for (bool count_include_pad : {true, false}) {
      Tensor x = random_leaf({2, 3, 7, 6}, 35);
      auto r = gradcheck(
          [&](const std::vector<Tensor>& in) {
            return weighted_sum(ops::avg_pool2d(in[0], opt, count_include_pad), 36);
          },
          {x});
      expect_passes(r, x.numel());
    }
}

TEST(Gradcheck, GlobalAvgPool) {
  for (Shape shape : {Shape{2, 3, 5, 4}, Shape{2, 4, 7, 7}, Shape{3, 2, 1, 1}}) {
    Tensor x = random_leaf(shape, 37);
    auto r = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::global_avg_pool2d(in[0]), 38); },
                       {x});
    expect_passes(r, x.numel());
  }
}

// A ResNet's convolutions: 3x3 without bias (batch norm follows), and the 1x1 stride-2
// projection of a downsampling shortcut, with and without bias.
TEST(Gradcheck, Conv2dWithoutBiasAndStridedOneByOne) {
  struct Case {
    Shape x, w;
    ops::Conv2dOptions opt;
  };
  for (const Case& c : {Case{{2, 3, 6, 5}, {4, 3, 3, 3}, {1, 1, 1, 1}}, Case{{2, 3, 7, 6}, {5, 3, 1, 1}, {2, 2, 0, 0}},
                        Case{{1, 4, 8, 8}, {6, 4, 1, 1}, {2, 2, 0, 0}}})
    for (bool with_bias : {false, true}) {
      Tensor x = random_leaf(c.x, 39), w = random_leaf(c.w, 40);
      std::vector<Tensor> inputs = {x, w};
      if (with_bias) inputs.push_back(random_leaf({c.w[0]}, 41));
      auto r = gradcheck(
          [&](const std::vector<Tensor>& in) {
            return weighted_sum(ops::conv2d(in[0], in[1], with_bias ? in[2] : Tensor(), c.opt), 42);
          },
          inputs);
      expect_passes(r, x.numel() + w.numel() + (with_bias ? c.w[0] : 0));
    }
}

// add's two gradients are dy each: a residual sum, whose input reaches it both through the
// branch and through the identity shortcut, and a tensor added to itself get both.
TEST(Gradcheck, ResidualSums) {
  Tensor x = random_leaf({2, 3, 5, 5}, 43), w = random_leaf({3, 3, 3, 3}, 44);
  auto r = gradcheck(
      [](const std::vector<Tensor>& in) {
        Tensor branch = ops::conv2d(in[0], in[1], Tensor(), ops::Conv2dOptions{1, 1, 1, 1});
        return weighted_sum(ops::add(ops::add(branch, in[0]), ops::add(in[0], in[0])), 45);
      },
      {x, w});
  expect_passes(r, x.numel() + w.numel());
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

// q, k and v of scaled_dot_product_attention, with a key-padding mask and without, causal
// with Tq > Tk and Tq < Tk, the default scale and a given one; batch 1 pads key 0, so that
// under the causal mask its query 0 sees no key (its gradients are 0 on both sides).
TEST(Gradcheck, ScaledDotProductAttention) {
  struct Case {
    int64_t Tq, Tk;
    bool causal, padded;
    std::optional<double> scale;
  };
  for (const Case& c : {Case{3, 4, false, false, {}}, Case{4, 3, true, true, {}}, Case{2, 5, true, false, 0.7},
                        Case{3, 3, false, true, 1.3}}) {
    SCOPED_TRACE("Tq " + std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk) + (c.causal ? " causal" : "") +
                 (c.padded ? " padded" : ""));
    const int64_t B = 2, H = 1, d = 3;  // the heads' indexing is the op test's
    Tensor q = random_leaf({B, H, c.Tq, d}, 21, -2, 2), k = random_leaf({B, H, c.Tk, d}, 22, -2, 2),
           v = random_leaf({B, H, c.Tk, d}, 23);
    std::vector<double> keep(size_t(B * c.Tk), 1.0);
    keep[1] = 0.0, keep[size_t(c.Tk)] = 0.0;  // batch 0 pads key 1, batch 1 key 0
    Tensor mask = c.padded ? Tensor::from_vector(keep, {B, c.Tk}) : Tensor();
    const ops::AttentionOptions opt{c.causal, c.scale};
    auto r = gradcheck(
        [&](const std::vector<Tensor>& in) {
          return weighted_sum(ops::scaled_dot_product_attention(in[0], in[1], in[2], mask, opt), 24);
        },
        {q, k, v});
    expect_passes(r, q.numel() + k.numel() + v.numel());
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

// ---- gelu, tanh, dropout (issue 24) ----
// Both forms of gelu over [-4, 4], where the curvature is (its tails are linear or flat).
TEST(Gradcheck, GeluBothForms) {
  for (const char* approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    Tensor x = random_leaf({4, 9}, 51, -4.0, 4.0);
    auto r = gradcheck(
        [&](const std::vector<Tensor>& in) { return weighted_sum(ops::gelu(in[0], approximate), 52); }, {x});
    expect_passes(r, x.numel());
  }
}

TEST(Gradcheck, Tanh) {
  Tensor x = random_leaf({4, 9}, 53, -3.0, 3.0);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::tanh(in[0]), 54); }, {x});
  expect_passes(r, x.numel());
}

// The mask depends only on the options, so both sides of every difference see the same one
// (and the backward recomputes it): training at a few p, and the identity of eval.
TEST(Gradcheck, Dropout) {
  for (ops::DropoutOptions opt : {ops::DropoutOptions{0.3, true, 5, 2, 4}, ops::DropoutOptions{0.8, true, 6, 0, 0},
                                  ops::DropoutOptions{0.5, false, 5, 2, 4}}) {
    SCOPED_TRACE("p = " + std::to_string(opt.p) + (opt.training ? " training" : " eval"));
    Tensor x = random_leaf({3, 2, 5}, 55);
    auto r = gradcheck([&](const std::vector<Tensor>& in) { return weighted_sum(ops::dropout(in[0], opt), 56); },
                       {x});
    expect_passes(r, x.numel());
  }
}

// ---- batched_matmul and linear over leading dimensions ----
// Both operands, every combination of the transpose flags, 3-d and 4-d: each flag changes
// which product computes each gradient (engine/ops/batched_matmul.cpp).
TEST(Gradcheck, BatchedMatmulEveryTransposition) {
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true})
      for (const Shape& batch : {Shape{3}, Shape{2, 2}}) {
        SCOPED_TRACE(std::string(trans_a ? "a transposed, " : "") + (trans_b ? "b transposed, " : "") +
                     std::to_string(batch.size() + 2) + "-d");
        const int64_t M = 3, N = 4, K = 5;
        Shape a_shape = batch, b_shape = batch;
        a_shape.insert(a_shape.end(), {trans_a ? K : M, trans_a ? M : K});
        b_shape.insert(b_shape.end(), {trans_b ? N : K, trans_b ? K : N});
        Tensor a = random_leaf(a_shape, 41), b = random_leaf(b_shape, 42);
        auto r = gradcheck(
            [&](const std::vector<Tensor>& in) {
              return weighted_sum(ops::batched_matmul(in[0], in[1], trans_a, trans_b), 43);
            },
            {a, b});
        expect_passes(r, a.numel() + b.numel());
      }
}

// x [2, 3, 5] and [5]: the leading dimensions are rows of one product.
TEST(Gradcheck, LinearOverLeadingDimensions) {
  for (const Shape& x_shape : {Shape{2, 3, 5}, Shape{5}}) {
    Tensor x = random_leaf(x_shape, 44), w = random_leaf({4, 5}, 45), b = random_leaf({4}, 46);
    auto r = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::linear(in[0], in[1], in[2]), 47); },
                       {x, w, b});
    expect_passes(r, x.numel() + w.numel() + b.numel());
  }
}

// cross_entropy over [N, T, C] with ignored targets (the default -100, and a real class as
// ignore_index): their logits get no gradient, and the mean divides by the counted ones.
TEST(Gradcheck, CrossEntropyOverTokensWithIgnoreIndex) {
  Tensor target = Tensor::from_vector<int64_t>({1, -100, 3, 0, 4, -100}, {2, 3});
  Tensor classes_ignored = Tensor::from_vector<int64_t>({1, 2, 3, 2, 4, 0}, {2, 3});
  for (auto red : {ops::Reduction::Mean, ops::Reduction::Sum})
    for (const auto& [t, ignore] : {std::pair{target, int64_t(-100)}, std::pair{classes_ignored, int64_t(2)}}) {
      Tensor x = random_leaf({2, 3, 5}, 53, -4, 4);
      auto r = gradcheck(
          [&](const std::vector<Tensor>& in) { return ops::scale(ops::cross_entropy(in[0], t, red, ignore), 2.5); },
          {x});
      expect_passes(r, x.numel());
    }
}

// embedding: ids of two dimensions with repeats (their gradients add) and table rows no id
// names (gradient 0, which the central difference also gives). A padding_idx row is left
// out: its forward reads the row, so the numeric derivative is not the zero that PyTorch's
// padding_idx (and ours) returns on purpose; tests/ops/embedding_test.cpp and the PyTorch
// parity test hold that row.
TEST(Gradcheck, Embedding) {
  Tensor ids = Tensor::from_vector<int64_t>({3, 0, 3, 5, 1, 3, 0, 2}, {2, 4});
  Tensor w = random_leaf({7, 3}, 51);
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return weighted_sum(ops::embedding(ids, in[0]), 52); }, {w});
  expect_passes(r, w.numel());
}

// layer_norm: x of three dimensions (rows from the leading two), affine and not (fresh
// leaves for each check: gradcheck reads the gradients one backward leaves).
TEST(Gradcheck, LayerNorm) {
  Tensor x = random_leaf({2, 3, 5}, 1), w = random_leaf({5}, 2), b = random_leaf({5}, 3);
  auto r = gradcheck(
      [](const std::vector<Tensor>& in) { return weighted_sum(ops::layer_norm(in[0], in[1], in[2], 1e-5), 4); },
      {x, w, b});
  expect_passes(r, x.numel() + w.numel() + b.numel());
  Tensor plain_x = random_leaf({4, 6}, 5);
  auto plain = gradcheck(
      [](const std::vector<Tensor>& in) { return weighted_sum(ops::layer_norm(in[0], Tensor(), Tensor(), 1e-5), 6); },
      {plain_x});
  expect_passes(plain, plain_x.numel());
}

// softmax over the last dimension with a key mask (some entries -inf) and causal.
TEST(Gradcheck, Softmax) {
  Tensor x = random_leaf({2, 2, 3, 4}, 1);
  std::vector<double> m = testing::random_vector<double>(8, 2);
  m[2] = m[7] = -INFINITY;
  const Tensor mask = Tensor::from_vector(m, {2, 1, 1, 4});
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return weighted_sum(ops::softmax(in[0], mask, true), 3); },
                     {x});
  expect_passes(r, x.numel());
  Tensor plain_x = random_leaf({3, 5}, 4);
  auto plain = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::softmax(in[0]), 5); }, {plain_x});
  expect_passes(plain, plain_x.numel());
}

// transpose of two dimensions (the backward is the same swap), and dims that count from the end.
TEST(Gradcheck, Transpose) {
  Tensor x = random_leaf({2, 3, 4, 5}, 7);
  auto r = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::transpose(in[0], 1, -2), 8); }, {x});
  expect_passes(r, x.numel());
  Tensor m = random_leaf({3, 4}, 9);
  auto matrix = gradcheck([](const std::vector<Tensor>& in) { return weighted_sum(ops::transpose(in[0], 1, 0), 10); }, {m});
  expect_passes(matrix, m.numel());
}

}  // namespace
}  // namespace dpcore
