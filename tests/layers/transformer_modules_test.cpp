// The transformer's building-block modules (layers/transformer/modules.h): shapes, PyTorch's
// initialisation, the flags they put in the flat layout, and dropout's position-keyed masks.
// The ops under them are checked at every level in tests/ops and tests/engine.
#include <gtest/gtest.h>

#include <cmath>

#include "layers/transformer/attention.h"
#include "layers/transformer/modules.h"
#include "layers/model.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::layers {
namespace {

Model model_of(std::unique_ptr<Module> first, Shape input, uint64_t seed = 1) {
  auto net = std::make_unique<Sequential>();
  net->add("emb", std::move(first));
  return Model(std::move(net), std::move(input), Device::cpu(), DType::Float32, seed);
}

TEST(EmbeddingModule, PicksRowsAndStartsNormalWithThePaddingRowZero) {
  Model m = model_of(std::make_unique<Embedding>(50, 8, 3, 0.02), {5});
  EXPECT_TRUE(m.takes_token_ids());
  EXPECT_EQ(m.output_shape(), (Shape{5, 8}));
  const auto& e = m.parameters().entry("emb.weight");
  EXPECT_EQ(e.shape, (Shape{50, 8}));
  auto w = m.parameters().values().to_vector<float>();
  double sum_sq = 0;
  for (int64_t i = 0; i < e.numel; ++i) {
    const float v = w[size_t(e.offset + i)];
    if (i / 8 == 3) EXPECT_EQ(v, 0.0f) << "padding row element " << i % 8;
    else sum_sq += double(v) * v;
  }
  // 392 draws of N(0, 0.02^2): the sample std is within 15% of 0.02 (chi-square, ~4 sigma).
  EXPECT_NEAR(std::sqrt(sum_sq / 392.0), 0.02, 0.003);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{7, 3, 0, 49, 7}, {1, 5});
  auto y = m.forward_logits(ids).to_vector<float>();
  const int64_t rows[] = {7, 3, 0, 49, 7};
  for (int t = 0; t < 5; ++t) {
    for (int d = 0; d < 8; ++d) EXPECT_EQ(y[size_t(t * 8 + d)], w[size_t(e.offset + rows[t] * 8 + d)]);
  }
}

TEST(EmbeddingModule, BadArgumentsNameTheValueAndTheLimit) {
  EXPECT_NE(testing::error_of([] { Embedding(10, 4, 10); }).find("padding_idx 10 is outside [-10, 10)"), std::string::npos);
  EXPECT_NE(testing::error_of([] { Embedding(0, 4); }).find("num_embeddings 0"), std::string::npos);
  Model m = model_of(std::make_unique<Embedding>(10, 4), {2});
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 12}, {1, 2});
  EXPECT_NE(testing::error_of([&] { m.forward_logits(ids); }).find("12"), std::string::npos);
}

TEST(LayerNormModule, StartsAtOneAndZeroAndCarriesItsWeightDecayFlag) {
  auto net = std::make_unique<Sequential>();
  net->add("ln", std::make_unique<LayerNorm>(6, 1e-12, false)).add("keep", std::make_unique<LayerNorm>(6));
  Model m(std::move(net), {6});
  auto w = m.parameters().values().to_vector<float>();
  for (const char* name : {"ln.weight", "keep.weight"}) {
    const auto& e = m.parameters().entry(name);
    for (int64_t i = 0; i < e.numel; ++i) EXPECT_EQ(w[size_t(e.offset + i)], 1.0f);
  }
  for (const auto& e : m.parameters().entries()) {
    EXPECT_EQ(e.weight_decay, e.name.rfind("keep.", 0) == 0) << e.name;
  }
  auto bad = std::make_unique<Sequential>();
  bad->add("ln", std::make_unique<LayerNorm>(6));
  EXPECT_NE(testing::error_of([&] { Model(std::move(bad), {5}); }).find("does not end in the normalized dimension 6"), std::string::npos);
}

TEST(GeluModule, NamesItsFormAndRefusesOthers) {
  EXPECT_EQ(GELU().describe(), "gelu");
  EXPECT_EQ(GELU("tanh").describe(), "gelu(tanh)");
  EXPECT_NE(testing::error_of([] { GELU("fast"); }).find("approximate 'fast'"), std::string::npos);
}

TEST(DropoutModule, MasksFollowTheBatchPositionNotTheSplit) {
  auto net = std::make_unique<Sequential>();
  net->add("drop", std::make_unique<Dropout>(0.5));
  Model m(std::move(net), {16}, Device::cpu(), DType::Float32, 4);
  const auto x = testing::random_vector<float>(4 * 16, 2, 1.0, 2.0);  // nonzero: a zero marks a dropped element
  Tensor batch = Tensor::from_vector(x, {4, 16});
  m.set_batch_position(3, 0);
  const auto whole = m.forward_logits(batch).to_vector<float>();
  m.set_batch_position(3, 2);  // samples 2 and 3 alone, as a second replica would run them
  const auto tail = m.forward_logits(batch.narrow0(2, 4)).to_vector<float>();
  EXPECT_EQ(tail, std::vector<float>(whole.begin() + 32, whole.end()));
  int dropped = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    if (whole[i] == 0.0f) ++dropped;
    else EXPECT_EQ(whole[i], x[i] * 2.0f);  // kept elements scaled by 1 / (1 - p), exactly 2
  }
  EXPECT_GT(dropped, 10);  // 64 draws at p = 0.5
  EXPECT_LT(dropped, 54);
  m.set_batch_position(4, 0);  // the next step draws another mask
  EXPECT_NE(m.forward_logits(batch).to_vector<float>(), whole);
  m.eval();
  EXPECT_EQ(m.forward_logits(batch).to_vector<float>(), x);
  EXPECT_NE(testing::error_of([] { Dropout(1.5); }).find("p = 1.5 is outside [0, 1]"), std::string::npos);
}

TEST(AttentionHeads, SplitPutsEachHeadsSliceOfTheHiddenSizeInItsOwnPlane) {
  const int64_t n = 2, t = 3, heads = 2, d = 4;
  const auto x = testing::random_vector<double>(size_t(n * t * heads * d), 5);
  Tensor split = split_heads(Tensor::from_vector(x, {n, t, heads * d}), heads);
  ASSERT_EQ(split.shape(), (Shape{n, heads, t, d}));
  const auto y = split.to_vector<double>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < t; ++i)
        for (int64_t j = 0; j < d; ++j) {
          EXPECT_EQ(y[size_t(((b * heads + h) * t + i) * d + j)], x[size_t((b * t + i) * heads * d + h * d + j)]);
        }
  EXPECT_EQ(merge_heads(split).to_vector<double>(), x);
  EXPECT_NE(testing::error_of([&] { split_heads(Tensor::from_vector(x, {n, t, heads * d}), 3); })
                .find("3 heads do not divide the hidden size 8"),
            std::string::npos);
}

// The explicit path (dropout in training) against a float64 computation by hand with the very
// mask ops::dropout draws, and against the fused op when its dropout keeps everything.
TEST(AttentionDropoutPath, EqualsTheDefinitionWithTheDrawnMask) {
  const int64_t n = 2, heads = 2, t = 5, d = 3;
  auto leaf = [](uint64_t seed) {
    return Tensor::from_vector(testing::random_vector<double>(size_t(n * heads * t * d), seed), {n, heads, t, d});
  };
  const Tensor q = leaf(1), k = leaf(2), v = leaf(3);
  const Tensor mask = Tensor::from_vector(std::vector<double>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1}, {n, t});
  const AttentionDropout drop{0.3, true, {11, 4, 6}};
  const auto got = attention(q, k, v, mask, drop).to_vector<double>();
  // The mask: ops::dropout of ones with the same key, step and first sample.
  const auto keep = ops::dropout(Tensor::full({n, heads, t, t}, 1.0, DType::Float64), {0.3, true, 11, 4, 6})
                        .to_vector<double>();
  const auto qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>();
  const auto mv = mask.to_vector<double>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < t; ++i) {
        const size_t plane = size_t((b * heads + h) * t);
        std::vector<double> p(static_cast<size_t>(t));
        double max = -INFINITY, total = 0;
        for (int64_t j = 0; j < t; ++j) {
          if (mv[size_t(b * t + j)] == 0) continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += qv[(plane + size_t(i)) * d + c] * kv[(plane + size_t(j)) * d + c];
          p[size_t(j)] = dot / std::sqrt(double(d));
          max = std::max(max, p[size_t(j)]);
        }
        for (int64_t j = 0; j < t; ++j) total += mv[size_t(b * t + j)] ? std::exp(p[size_t(j)] - max) : 0;
        for (int64_t c = 0; c < d; ++c) {
          double want = 0;
          for (int64_t j = 0; j < t; ++j) {
            if (!mv[size_t(b * t + j)]) continue;
            want += std::exp(p[size_t(j)] - max) / total * keep[(plane + size_t(i)) * t + j] * vv[(plane + size_t(j)) * d + c];
          }
          EXPECT_NEAR(got[(plane + size_t(i)) * d + c], want, 1e-12) << b << " " << h << " " << i << " " << c;
        }
      }
  // A dropout that keeps every element (p = 1e-300: threshold 2^32, scale exactly 1) runs the
  // explicit path and must agree with the fused one.
  const auto explicit_path = attention(q, k, v, mask, {1e-300, true, {}}).to_vector<double>();
  const auto fused = attention(q, k, v, mask, {0.3, false, {}}).to_vector<double>();
  ASSERT_EQ(explicit_path.size(), fused.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(explicit_path[i], fused[i], 1e-13) << i;
}

}  // namespace
}  // namespace dpcore::layers
