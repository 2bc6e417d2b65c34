// MultiheadAttention, TransformerEncoderLayer and TransformerEncoder (layers/transformer/)
// against torch.nn's, run by Debian's PyTorch 1.13 (tests/layers/torch_transformer_layers.py,
// one process for every case): the output and the gradient of every parameter and of the input, float64
// and float32, post-norm and pre-norm, relu and gelu, with key padding and causal masks,
// and the eval-mode forward against torch's fused fast path;
// the state_dict names and shapes; torch's initialisation; a float64 finite-difference
// gradcheck of the encoder layer with dropout; dropout's masks keyed by the batch
// position; the layer-spec words encoder and meanpool; and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "layers/model.h"
#include "layers/transformer/encoder_layer.h"
#include "layers/transformer/mean_pool.h"
#include "layers/transformer/multihead_attention.h"
#include "layers/zoo.h"
#include "support/error_of.h"
#include "support/gradcheck.h"
#include "support/kernel_checks.h"
#include "support/test_support.h"

namespace dpcore::layers {
namespace {

enum class Kind { Attention, Layer, Stack };  // MultiheadAttention, TransformerEncoderLayer, TransformerEncoder

struct TorchCase {
  std::string name;
  Kind kind;
  int64_t N, T, E, heads, ff;
  std::string activation;
  bool norm_first, padded, causal;
  DType dtype;
  bool training = true;  // false: the forward alone in eval mode (torch's fast path for a layer)

  std::string spec() const {
    auto n = [](int64_t v) { return std::to_string(v); };
    const char* kinds[] = {"mha", "encoder", "stack"};
    return name + ":" + kinds[int(kind)] + ":" + n(N) + ":" + n(T) + ":" + n(E) + ":" + n(heads) + ":" +
           n(ff) + ":" + activation + ":" + (norm_first ? "1" : "0") + ":" + (padded ? "1" : "0") + ":" +
           (causal ? "1" : "0") + ":" + (dtype == DType::Float64 ? "float64" : "float32") + ":" +
           (training ? "train" : "eval");
  }
  // The stack is torch's TransformerEncoder of two layers and a final norm.
  std::unique_ptr<Module> module() const {
    if (kind == Kind::Attention) return std::make_unique<MultiheadAttention>(E, heads, 0.0, causal);
    TransformerEncoderLayer layer(E, heads, EncoderLayerOptions{ff, 0.0, activation, 1e-5, norm_first, causal});
    if (kind == Kind::Layer) return layer.clone();
    return std::make_unique<TransformerEncoder>(layer, 2, true);
  }
};

// The one module of a model under test, named "layer": its parameters are torch's names
// behind "layer.".
constexpr const char* kPrefix = "layer.";
Model model_of(std::unique_ptr<Module> module, const Shape& input, DType dtype, uint64_t seed = 1) {
  auto net = std::make_unique<Sequential>();
  net->add("layer", std::move(module));
  return Model(std::move(net), input, Device::cpu(), dtype, seed);
}

// The module's masked forward (Module::forward takes no mask).
Tensor masked_forward(Model& model, const Tensor& x, const Tensor& key_padding_mask) {
  Module& m = model.net().child(0);
  if (auto* layer = dynamic_cast<TransformerEncoderLayer*>(&m)) return layer->forward(x, key_padding_mask);
  if (auto* stack = dynamic_cast<TransformerEncoder*>(&m)) return stack->forward(x, key_padding_mask);
  return dynamic_cast<MultiheadAttention&>(m).forward(x, key_padding_mask);
}

template <class T>
Tensor tensor_of(const nlohmann::json& values, const Shape& shape) {
  return Tensor::from_vector(values.get<std::vector<T>>(), shape);
}

// The float32 bound, from an error analysis: an n-term sum in float is within about n
// roundings (u = 2^-24) of its terms' scale, and the output's error is the sum of its
// stages' (layer norm rescales both the value and its error, and its inputs have mean about
// 0, so it amplifies neither). The longest forward chain of sums: the projections (E terms),
// the scores (d), the weighted sum of values (T) and the output projection (E); an encoder
// layer adds its two layer norms (E each) and its feed-forward linears (E, then ff), a
// stack of two layers twice that and its final norm. The backward runs the same chains in reverse and the weight gradients add a sum over the
// N * T tokens. Each side is that far from the exact result, so they differ by twice that.
double float32_bound(const TorchCase& c) {
  const int64_t d = c.E / c.heads;
  int64_t forward_terms = c.E + d + c.T + c.E;
  if (c.kind != Kind::Attention) forward_terms += 2 * c.E + c.E + c.ff;
  if (c.kind == Kind::Stack) forward_terms = 2 * forward_terms + c.E;
  return 2.0 * double(2 * forward_terms + c.N * c.T) * std::ldexp(1.0, -24);
}

// Loads the script's parameters into a fresh model of the case, runs the forward on its x
// (and mask) and the backward from its dout, and compares the output, every parameter's
// gradient and the input's with the script's (testing::scaled_error: each element relative
// to max(|want|, rms(want))). Also the parameters' names, shapes and order against torch's
// state_dict.
template <class T>
void expect_matches_torch(const TorchCase& c, const nlohmann::json& want, double tolerance) {
  Model model = model_of(c.module(), {c.T, c.E}, c.dtype);
  const auto& entries = model.parameters().entries();
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name.substr(std::string(kPrefix).size()));
  EXPECT_EQ(names, want.at("names").get<std::vector<std::string>>());

  std::vector<T> flat(size_t(model.parameters().total()), T(0));
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].shape, want.at("shapes").at(names[i]).get<Shape>()) << names[i];
    const auto values = want.at("params").at(names[i]).get<std::vector<T>>();
    ASSERT_EQ(int64_t(values.size()), entries[i].numel) << names[i];
    std::copy(values.begin(), values.end(), flat.begin() + entries[i].offset);
  }
  model.parameters().values().copy_(Tensor::from_vector(flat, {model.parameters().total()}));
  model.zero_grad();

  const Shape x_shape{c.N, c.T, c.E};
  Tensor x = tensor_of<T>(want.at("x"), x_shape);
  x.set_requires_grad(c.training);
  model.train(c.training);
  Tensor mask = c.padded ? tensor_of<T>(want.at("mask"), {c.N, c.T}) : Tensor();
  Tensor y = masked_forward(model, x, mask);

  auto check = [&](const std::string& what, const Tensor& got, const nlohmann::json& expected) {
    const double err = testing::scaled_error(got.to_vector<T>(), expected.get<std::vector<T>>());
    std::cout << c.name << " " << what << ": error " << err << " (" << err / tolerance << " of the bound)\n";
    EXPECT_LE(err, tolerance) << what;
  };
  check("y", y, want.at("y"));
  if (!c.training) return;
  y.backward(tensor_of<T>(want.at("dout"), x_shape));
  check("x.grad", x.grad(), want.at("dx"));
  for (size_t i = 0; i < entries.size(); ++i)
    check(names[i] + ".grad", model.parameters().param(i).grad(), want.at("grads").at(names[i]));
}

TEST(TransformerLayers, MatchTorchForwardAndBackward) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  const DType f64 = DType::Float64, f32 = DType::Float32;
  const std::vector<TorchCase> cases = {
      {"mha_padded", Kind::Attention, 2, 6, 8, 2, 0, "relu", false, true, false, f64},
      {"mha_causal_padded", Kind::Attention, 3, 5, 12, 3, 0, "relu", false, true, true, f64},
      {"post_norm_relu_padded", Kind::Layer, 2, 6, 8, 2, 16, "relu", false, true, false, f64},
      {"post_norm_gelu_causal", Kind::Layer, 2, 5, 8, 4, 12, "gelu", false, false, true, f64},
      {"pre_norm_relu_causal_padded", Kind::Layer, 2, 6, 8, 2, 16, "relu", true, true, true, f64},
      {"pre_norm_gelu_padded", Kind::Layer, 3, 4, 12, 3, 20, "gelu", true, true, false, f64},
      {"stack_pre_norm_gelu_padded", Kind::Stack, 2, 5, 8, 2, 12, "gelu", true, true, false, f64},
      {"mha_padded_f32", Kind::Attention, 2, 16, 32, 4, 0, "relu", false, true, false, f32},
      {"post_norm_gelu_padded_f32", Kind::Layer, 2, 16, 32, 4, 64, "gelu", false, true, false, f32},
      {"pre_norm_relu_causal_f32", Kind::Layer, 2, 16, 32, 4, 64, "relu", true, false, true, f32},
      {"stack_post_norm_relu_padded_f32", Kind::Stack, 2, 16, 32, 4, 64, "relu", false, true, false, f32},
      // Eval mode: torch's fused fast path, against our one path.
      {"eval_post_norm_gelu_padded", Kind::Layer, 2, 6, 8, 2, 16, "gelu", false, true, false, f64, false},
      {"eval_pre_norm_relu_padded_f32", Kind::Layer, 2, 16, 32, 4, 64, "relu", true, true, false, f32, false},
  };
  testing::TempDir dir;
  const std::string out = dir.file("torch_transformer_layers.json");
  std::string args = "'" + out + "'";
  for (const TorchCase& c : cases) args += " " + c.spec();
  const testing::ScriptResult script = testing::run_python_script("tests/layers/torch_transformer_layers.py", args);
  ASSERT_EQ(script.status, 0) << script.output;
  std::ifstream f(out);
  const nlohmann::json torch = nlohmann::json::parse(f);
  for (const TorchCase& c : cases) {
    SCOPED_TRACE(c.name);
    // Float64: the same sums in different orders, a few roundings of 1e-16 each.
    if (c.dtype == f64) expect_matches_torch<double>(c, torch.at(c.name), 1e-10);
    else expect_matches_torch<float>(c, torch.at(c.name), float32_bound(c));
  }
}

// torch 1.13's _reset_parameters: xavier_uniform_ on in_proj_weight, U(+-sqrt(6 / 4E)); the
// biases zero; out_proj.weight, linear1 and linear2 torch.nn.Linear's U(+-1/sqrt(fan_in))
// (linear biases too); the norms 1 and 0. The largest of thousands of uniform draws is
// within 2% of the bound (the chance of less is 0.98^n < e^-80 for these n >= 4096), which
// tells xavier's 0.153 from the default's 0.125 at E = 64.
TEST(TransformerLayers, StartAsTorchInitialisesThem) {
  const int64_t E = 64, ff = 96;
  Model model = model_of(std::make_unique<TransformerEncoderLayer>(E, 4, EncoderLayerOptions{ff}), {3, E}, DType::Float64);
  const auto values = model.parameters().values().to_vector<double>();
  auto largest = [&](const std::string& name) {
    const auto& e = model.parameters().entry(std::string(kPrefix) + name);
    double m = 0;
    for (int64_t i = 0; i < e.numel; ++i) m = std::max(m, std::abs(values[size_t(e.offset + i)]));
    return m;
  };
  auto expect_uniform = [&](const std::string& name, double bound) {
    EXPECT_LE(largest(name), bound) << name;
    EXPECT_GE(largest(name), 0.98 * bound) << name;
  };
  auto expect_constant = [&](const std::string& name, double value) {
    const auto& e = model.parameters().entry(std::string(kPrefix) + name);
    for (int64_t i = 0; i < e.numel; ++i) ASSERT_EQ(values[size_t(e.offset + i)], value) << name << " element " << i;
  };
  expect_uniform("self_attn.in_proj_weight", std::sqrt(6.0 / (4 * E)));
  expect_uniform("self_attn.out_proj.weight", 1 / std::sqrt(double(E)));
  expect_uniform("linear1.weight", 1 / std::sqrt(double(E)));
  expect_uniform("linear2.weight", 1 / std::sqrt(double(ff)));
  // 96 draws: within the bound, and not zero.
  EXPECT_LE(largest("linear1.bias"), 1 / std::sqrt(double(E)));
  EXPECT_GT(largest("linear1.bias"), 0.5 / std::sqrt(double(E)));
  expect_constant("self_attn.in_proj_bias", 0.0);
  expect_constant("self_attn.out_proj.bias", 0.0);
  expect_constant("norm1.weight", 1.0);
  expect_constant("norm2.bias", 0.0);
}

// The encoder layer's loss with respect to every parameter and the input, by central
// differences in float64, in training mode with dropout 0.25: the attention probabilities'
// dropout takes attention()'s explicit path, and every mask is a fixed function of the
// batch position, so the function is deterministic. Post-norm with gelu and padding;
// pre-norm with relu and causal masking.
TEST(TransformerLayers, EncoderLayerGradcheck) {
  const int64_t N = 2, T = 4, E = 8;
  for (bool norm_first : {false, true}) {
    SCOPED_TRACE(norm_first ? "pre-norm relu causal" : "post-norm gelu padded");
    EncoderLayerOptions opt{12, 0.25, norm_first ? "relu" : "gelu", 1e-5, norm_first, norm_first};
    Model model = model_of(std::make_unique<TransformerEncoderLayer>(E, 2, opt), {T, E}, DType::Float64, 5);
    model.set_batch_position(3, 10);
    model.zero_grad();
    Tensor x = testing::random_leaf({N, T, E}, 6);
    Tensor mask = norm_first ? Tensor() : Tensor::from_vector(std::vector<double>{1, 1, 0, 1, 1, 0, 0, 1}, {N, T});
    std::vector<Tensor> inputs = model.parameters().params();
    inputs.push_back(x);
    testing::GradcheckOptions gopt;
    gopt.samples_per_input = 24;
    gopt.threshold = 1e-6;
    auto r = testing::gradcheck(
        [&](const std::vector<Tensor>&) { return testing::weighted_sum(masked_forward(model, x, mask), 7); }, inputs,
        gopt);
    EXPECT_TRUE(r.failures.empty()) << r.failures.size() << " mismatches, worst " << r.worst_where;
    EXPECT_GE(r.checked, int64_t(inputs.size()) * 15) << r.skipped_near_kink << " skipped near kinks";
  }
}

// Dropout in training draws its masks from the batch position alone: the same position
// gives the same output bit for bit, another step another output, and the two halves of
// the batch run as micro-batches at their global sample indices give the whole batch's
// rows (to rounding: the masks are the same bits, a different mask would differ by O(1)).
TEST(TransformerLayers, DropoutMasksFollowTheBatchPosition) {
  const int64_t N = 4, T = 5, E = 16;
  Model model = model_of(std::make_unique<TransformerEncoderLayer>(E, 4, EncoderLayerOptions{32, 0.3}), {T, E},
                         DType::Float32, 9);
  const auto xs = testing::random_vector<float>(size_t(N * T * E), 10);
  Tensor x = Tensor::from_vector(xs, {N, T, E});
  auto run = [&](uint64_t step, int64_t first, const Tensor& input) {
    model.set_batch_position(step, first);
    return model.forward_logits(input).to_vector<float>();
  };
  const auto whole = run(7, 0, x);
  EXPECT_EQ(run(7, 0, x), whole);
  EXPECT_NE(run(8, 0, x), whole);
  model.eval();
  EXPECT_NE(run(7, 0, x), whole);  // eval: no dropout at all
  model.train();
  const size_t half = size_t(N / 2 * T * E);
  auto first_half = run(7, 0, x.narrow0(0, N / 2)), second_half = run(7, N / 2, x.narrow0(N / 2, N));
  first_half.insert(first_half.end(), second_half.begin(), second_half.end());
  ASSERT_EQ(first_half.size(), 2 * half);
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(first_half[i], whole[i], 1e-5) << "element " << i;
}

// "encoder(...)" and "meanpool" in the layer-spec language: a pooled classifier over [N, T, E].
TEST(TransformerLayers, LayerSpecBuildsEncoderLayersAndMeanPool) {
  auto net = parse_layer_spec("encoder(heads=4,ff=32,dropout=0,gelu,norm_first) encoder(heads=2, causal) meanpool linear(3)",
                              {5, 16});
  ASSERT_EQ(net->size(), 5u);  // and the appended logsoftmax
  EXPECT_EQ(net->child(0).describe(), "encoder_layer(16, heads 4, ff 32, gelu, norm_first)");
  EXPECT_EQ(net->child(1).describe(), "encoder_layer(16, heads 2, ff 2048, dropout 0.1, causal)");
  EXPECT_EQ(net->child(2).describe(), "meanpool");
  Model model(std::move(net), {5, 16}, Device::cpu(), DType::Float32, 3);
  EXPECT_EQ(model.output_shape(), (Shape{3}));
  EXPECT_EQ(model.parameters().entry("0.self_attn.in_proj_weight").shape, (Shape{48, 16}));
  EXPECT_EQ(model.parameters().entry("1.linear1.weight").shape, (Shape{2048, 16}));
  model.eval();
  Tensor x = Tensor::from_vector(testing::random_vector<float>(2 * 5 * 16, 4), {2, 5, 16});
  EXPECT_EQ(model.forward(x).shape(), (Shape{2, 3}));

  // Images as rows of tokens (the --model help's example): [N, 1, 8, 8] viewed as [N, 8, 8].
  Model rows(parse_layer_spec("view(-1,8,8) encoder(heads=2,ff=16) meanpool linear(4)", {1, 8, 8}), {1, 8, 8});
  EXPECT_EQ(rows.output_shape(), (Shape{4}));

  const std::pair<const char*, const char*> bad[] = {
      {"encoder(ff=64)", "heads=H is missing"},
      {"encoder(heads=3)", "embed_dim 16 is not divisible by num_heads 3"},
      {"encoder(heads=4,window=2)", "unknown argument 'window=2'"},
      {"encoder(heads=4,dropout=x)", "bad number 'x'"},
      {"flatten encoder(heads=4)", "encoder needs [N, T, E] input, got [1, 80]"},
      {"flatten meanpool", "meanpool: input [1, 80] is not [N, T, E]"},
  };
  for (const auto& [spec, message] : bad)
    EXPECT_NE(testing::error_of([&] { parse_layer_spec(spec, {5, 16}); }).find(message), std::string::npos) << spec;
}

// meanpool is x.mean(dim=1): each feature's mean over the tokens, and its gradient 1/T to each.
TEST(TransformerLayers, MeanPoolIsTheMeanOverTokens) {
  const int64_t N = 2, T = 3, E = 4;
  Tensor x = testing::random_leaf({N, T, E}, 12);
  MeanPool pool;
  Tensor y = pool.forward(x);
  ASSERT_EQ(y.shape(), (Shape{N, E}));
  const auto xs = x.to_vector<double>(), ys = y.to_vector<double>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < E; ++e) {
      double sum = 0;
      for (int64_t t = 0; t < T; ++t) sum += xs[size_t((n * T + t) * E + e)];
      EXPECT_NEAR(ys[size_t(n * E + e)], sum / T, 1e-15);
    }
  ops::sum(y).backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_NEAR(g, 1.0 / T, 1e-16);
}

TEST(TransformerLayers, BadArgumentsAndInputsNameTheValues) {
  using testing::error_of;
  EXPECT_NE(error_of([] { MultiheadAttention(10, 3); }).find("embed_dim 10 is not divisible by num_heads 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { MultiheadAttention(8, 2, 1.5); }).find("dropout 1.5 is outside [0, 1]"), std::string::npos);
  EXPECT_NE(error_of([] { TransformerEncoderLayer(8, 2, {16, 0.1, "tanh"}); }).find("activation 'tanh'"),
            std::string::npos);
  EXPECT_NE(error_of([] { TransformerEncoderLayer(8, 2, {0}); }).find("dim_feedforward 0"), std::string::npos);
  EXPECT_NE(error_of([] { TransformerEncoder(TransformerEncoderLayer(8, 2), 0); }).find("num_layers 0 must be positive"),
            std::string::npos);
  Model model = model_of(std::make_unique<TransformerEncoderLayer>(8, 2, EncoderLayerOptions{16, 0.0}), {3, 8},
                         DType::Float32);
  Tensor x = Tensor::zeros({2, 3, 8});
  EXPECT_NE(error_of([&] { masked_forward(model, x, Tensor::full({2, 4}, 1.0)); })
                .find("key_padding_mask [2, 4] does not match input [2, 3, 8] (expected [N, T] = [2, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { masked_forward(model, x, Tensor::full({2, 3}, 1.0, DType::Float64)); })
                .find("must have the input's dtype"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model.forward(Tensor::zeros({2, 3, 6})); }).find("input [2, 3, 6] is not [N, T, d_model 8]"),
            std::string::npos);
  EXPECT_NE(error_of([] { model_of(std::make_unique<MultiheadAttention>(8, 2), {3, 6}, DType::Float32); })
                .find("input [1, 3, 6] is not [N, T, embed_dim 8]"),
            std::string::npos);
}

}  // namespace
}  // namespace dpcore::layers
