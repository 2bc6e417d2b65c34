// Tied parameters (ParamSlot::tied_to, layers/model.h): a parameter used twice, as BERT's
// masked-LM decoder uses the word embedding matrix, is laid out once in the flat buffer and
// both uses share one leaf, so its gradient is the sum of the two uses' gradients (checked
// against the same network with the two uses untied); replicas keep the tie; a tie to a
// missing or differently shaped parameter is refused, naming both.
#include <gtest/gtest.h>

#include <cmath>

#include "layers/model.h"
#include "layers/transformer/modules.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::layers {
namespace {

constexpr int64_t kVocab = 7, kDim = 4, kTokens = 5;

// x [N, T, D] -> x w^T [N, T, V], w [V, D] tied to `tied_to` (or its own parameter when empty).
class Decoder : public Module {
 public:
  explicit Decoder(std::string tied_to, Shape shape = {kVocab, kDim}) : tied_to_(std::move(tied_to)), shape_(shape) {}
  Tensor forward(const Tensor& x) override { return ops::linear(x, weight_, Tensor()); }
  Shape output_shape(const Shape& in) const override { return {in[0], in[1], shape_[0]}; }
  std::string describe() const override { return "decoder"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<Decoder>(tied_to_, shape_); }
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override {
    ParamSlot slot{qualified_name(prefix, "weight"), shape_, ParamInit::normal(1.0), &weight_};
    slot.tied_to = tied_to_;
    out.push_back(slot);
  }

 private:
  std::string tied_to_;
  Shape shape_;
  Tensor weight_;
};

Model embedding_then_decoder(const std::string& tied_to, Shape decoder_shape = {kVocab, kDim}) {
  auto net = std::make_unique<Sequential>();
  net->add("emb", std::make_unique<Embedding>(kVocab, kDim));
  net->add("dec", std::make_unique<Decoder>(tied_to, decoder_shape));
  net->add("log_softmax", std::make_unique<LogSoftmax>());
  return Model(std::move(net), {kTokens}, Device::cpu(), DType::Float64, 3);
}

// Token ids with a repeat, so that the embedding's gradient sums over a row too.
Tensor ids() { return Tensor::from_vector(std::vector<int64_t>{1, 4, 1, 6, 0, 2, 2, 5, 3, 1}, {2, kTokens}); }

// The summed cross-entropy of the next-token targets, and its backward.
void backward(Model& m) {
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{4, 1, 6, 0, 2, 2, 5, 3, 1, 0}, {2, kTokens});
  m.zero_grad();
  ops::cross_entropy(m.forward_logits(ids()), targets, ops::Reduction::Sum).backward();
}

std::vector<double> entry_of(const Tensor& flat, const FlatEntry& e) {
  const auto all = flat.to_vector<double>();
  return {all.begin() + e.offset, all.begin() + e.offset + e.numel};
}

TEST(TiedParameters, LaidOutOnceWithTheSumOfBothUsesAsGradient) {
  Model tied = embedding_then_decoder("emb.weight");
  ASSERT_EQ(tied.parameters().entries().size(), 1u);
  EXPECT_EQ(tied.parameters().entries()[0].name, "emb.weight");

  // The same network untied, both weights set to the tied model's matrix.
  Model untied = embedding_then_decoder("");
  ASSERT_EQ(untied.parameters().entries().size(), 2u);
  const FlatEntry& own = tied.parameters().entry("emb.weight");
  const std::vector<double> w = entry_of(tied.parameters().values(), own);
  for (const char* name : {"emb.weight", "dec.weight"}) {
    const FlatEntry& e = untied.parameters().entry(name);
    untied.parameters().values().narrow0(e.offset, e.offset + e.numel).copy_(Tensor::from_vector(w, {e.numel}));
  }
  backward(tied);
  backward(untied);
  const std::vector<double> got = entry_of(tied.parameters().grads(), own),
                            from_embedding = entry_of(untied.parameters().grads(), untied.parameters().entry("emb.weight")),
                            from_decoder = entry_of(untied.parameters().grads(), untied.parameters().entry("dec.weight"));
  double scale = 0;
  for (size_t i = 0; i < got.size(); ++i) scale = std::max(scale, std::abs(from_embedding[i]) + std::abs(from_decoder[i]));
  ASSERT_GT(scale, 0);
  int both_used = 0;  // rows the embedding picked: their gradient has both terms
  for (size_t i = 0; i < got.size(); ++i) {
    // One float64 addition apart at most (the two uses accumulate in either order).
    EXPECT_NEAR(got[i], from_embedding[i] + from_decoder[i], 4e-16 * scale) << "element " << i;
    both_used += from_embedding[i] != 0 && from_decoder[i] != 0;
  }
  EXPECT_GT(both_used, 0);
}

TEST(TiedParameters, AReplicaKeepsTheTie) {
  Model tied = embedding_then_decoder("emb.weight");
  auto replica = tied.replicate(Device::cpu());
  ASSERT_EQ(replica->parameters().entries().size(), 1u);
  backward(tied);
  backward(*replica);
  EXPECT_EQ(tied.parameters().grads().to_vector<double>(), replica->parameters().grads().to_vector<double>());
}

TEST(TiedParameters, ATieToAMissingOrDifferentlyShapedParameterIsRefused) {
  EXPECT_NE(testing::error_of([] { embedding_then_decoder("emb.bias"); })
                .find("parameter 'dec.weight' is tied to 'emb.bias', which the model does not have"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { embedding_then_decoder("emb.weight", {kVocab, kDim + 1}); })
                .find("'dec.weight' [7, 5] is tied to 'emb.weight' of another shape [7, 4]"),
            std::string::npos);
}

}  // namespace
}  // namespace dpcore::layers
