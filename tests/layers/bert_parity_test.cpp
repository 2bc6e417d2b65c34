// BERT (layers/transformer/bert.h) against its torch.nn twin of Hugging Face's modules
// (tests/layers/torch_bert.py, Debian's PyTorch 1.13; scripts/check_bert_twin.py checks the
// twin against transformers itself), one python process for every case:
//   * our weights -> safetensors -> the twin, the same inputs (padding, and the [N, 3, T]
//     form with token types and an explicit mask): forward logits and every parameter's
//     gradient of the mean cross-entropy, BertForSequenceClassification and BertForMaskedLM
//     (its decoder tied to the word embeddings), in float64 within 1e-10 and in float32
//     within an error-analysis bound; the parameter names equal the twin's as sets;
//   * bert-tiny, 20 AdamW steps with the linear warm-up schedule and gradient clipping,
//     dropout off, from the same initial weights: every parameter within 1e-5 (float32) and
//     1e-9 (float64) against torch.optim.AdamW and clip_grad_norm_;
//   * all-MiniLM-L6-v2's pretrained weights (scripts/get_minilm.sh) on real text: logits and
//     gradients in float32 within its error-analysis bound.
// Each difference is measured on its module's scale (module_scaled_difference).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/adam.h"
#include "engine/data/text/vocab.h"
#include "engine/data/text/wordpiece.h"
#include "engine/io/safetensors.h"
#include "layers/transformer/bert.h"
#include "layers/weights.h"
#include "support/test_support.h"
#include "train/schedule/lr_schedule.h"

namespace dpcore::layers {
namespace {

using testing::TempDir;

// float64 on both sides: the same operations in orders that differ only in summation, each
// a few ulps (1e-16) of its scale; 1e-10 leaves six orders of magnitude.
constexpr double kFloat64Tolerance = 1e-10;
// float32: the two sides sum in different orders (and PyTorch's kernels may contract
// multiply-adds), so each dot product of length K differs by up to about K u |a| |b|
// (u = 2^-24 = 6e-8); the longest here is K = 64 (the intermediate size), 3.8e-6 of the
// scale, and a gradient passes through about 25 such products and layer norms (forward and
// backward of two layers, the pooler and the head): 1e-4 of the tensor's scale (measured
// 3.7e-6; the test prints its worst).
constexpr double kFloat32Tolerance = 1e-4;
// The bound for bert-tiny after 20 AdamW steps (float32; measured 2.1e-6), and
// float64's: Adam divides each step by sqrt(v), so a step carries its gradient's relative
// error, and an element whose gradient is small against its tensor's (a sum over the
// batch's tokens that nearly cancels) has one far above 1e-16: measured 4e-11 of the
// module's scale, so 1e-9.
constexpr double kAdamWFloat32Tolerance = 1e-5, kAdamWFloat64Tolerance = 1e-9;

constexpr int kAdamWSteps = 20, kAdamWWarmup = 4;
constexpr double kAdamWLr = 1e-4, kAdamWWeightDecay = 0.01, kAdamWClip = 1.0;

// A small BERT: 2 layers, hidden 32 in 2 heads of 16 (sqrt(16) = 4: scaling is exact on both
// sides), intermediate 64, dropout off.
BertConfig small_config() {
  BertConfig c;
  c.vocab_size = 50, c.hidden_size = 32, c.num_hidden_layers = 2, c.num_attention_heads = 2;
  c.intermediate_size = 64, c.max_position_embeddings = 16, c.type_vocab_size = 2, c.num_labels = 3;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
  return c;
}

nlohmann::json config_json(const BertConfig& c) {
  return {{"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_hidden_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"intermediate_size", c.intermediate_size},
          {"hidden_act", c.hidden_act},
          {"hidden_dropout_prob", c.hidden_dropout_prob},
          {"attention_probs_dropout_prob", c.attention_probs_dropout_prob},
          {"max_position_embeddings", c.max_position_embeddings},
          {"type_vocab_size", c.type_vocab_size},
          {"layer_norm_eps", c.layer_norm_eps},
          {"pad_token_id", c.pad_token_id},
          {"num_labels", c.num_labels}};
}

// Token ids in [1, V) from a seed, each row padded (id 0) from its own length on; row 0 is
// full, so some keys are padding and some rows are not.
std::vector<int64_t> token_ids(int64_t n, int64_t t, int64_t vocab, uint64_t seed) {
  const auto u = testing::random_vector<double>(size_t(n * t), seed, 0.0, 1.0);
  std::vector<int64_t> ids(size_t(n * t));
  for (int64_t s = 0; s < n; ++s) {
    const int64_t length = t - (s * 3) % (t / 2);
    for (int64_t j = 0; j < t; ++j) {
      const size_t at = size_t(s * t + j);
      ids[at] = j < length ? 1 + int64_t(u[at] * double(vocab - 1)) % (vocab - 1) : 0;
    }
  }
  return ids;
}

// [N, 3, T]: the ids, token types (0 for the first half of each row, 1 after) and the mask
// ids != 0.
Tensor rows_input(const std::vector<int64_t>& ids, int64_t n, int64_t t) {
  std::vector<int64_t> rows(size_t(n * 3 * t));
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t j = 0; j < t; ++j) {
      const int64_t id = ids[size_t(s * t + j)];
      rows[size_t(s * 3 * t + j)] = id;
      rows[size_t(s * 3 * t + t + j)] = j >= t / 2 ? 1 : 0;
      rows[size_t(s * 3 * t + 2 * t + j)] = id != 0 ? 1 : 0;
    }
  }
  return Tensor::from_vector(rows, {n, 3, t});
}

// Classification labels [N] in [0, C), or MLM labels [N, T]: a token's id at about one
// position in three, -100 (ignored) elsewhere and on padding.
Tensor labels_for(const std::vector<int64_t>& ids, int64_t n, int64_t t, int64_t classes, bool masked_lm) {
  if (!masked_lm) {
    std::vector<int64_t> y(static_cast<size_t>(n));
    for (int64_t s = 0; s < n; ++s) y[size_t(s)] = (s * 5 + 1) % classes;
    return Tensor::from_vector(y, {n});
  }
  std::vector<int64_t> y(size_t(n * t), -100);
  for (size_t i = 0; i < y.size(); ++i) {
    if (ids[i] != 0 && i % 3 == 0) y[i] = ids[(i + 1) % ids.size()];
  }
  return Tensor::from_vector(y, {n, t});
}

struct Case {
  std::string name;
  BertConfig config;
  bool masked_lm = false;
  DType dtype = DType::Float64;
  bool adamw = false;
  Tensor x, labels;
  std::unique_ptr<Model> model;
  std::string out;  // the twin's results
};

std::unique_ptr<Model> build(const BertConfig& config, bool masked_lm, const Shape& input, DType dtype) {
  auto net = masked_lm ? bert_for_masked_lm(config) : bert_for_sequence_classification(config);
  return std::make_unique<Model>(std::move(net), input, Device::cpu(), dtype, 11);
}

Case make_case(std::string name, const BertConfig& config, bool masked_lm, bool rows, DType dtype, bool adamw,
               int64_t n, int64_t t) {
  Case c;
  c.name = std::move(name), c.config = config, c.masked_lm = masked_lm, c.dtype = dtype, c.adamw = adamw;
  const std::vector<int64_t> ids = token_ids(n, t, config.vocab_size, 5);
  c.x = rows ? rows_input(ids, n, t) : Tensor::from_vector(ids, {n, t});
  c.labels = labels_for(ids, n, t, config.num_labels, masked_lm);
  c.model = build(config, masked_lm, rows ? Shape{3, t} : Shape{t}, dtype);
  return c;
}

io::TensorView int64_view(const char* name, const Tensor& t) {
  return {name, DType::Int64, t.shape(), t.raw_data(), t.nbytes()};
}

// Writes each case's weights and inputs and one manifest, and runs the twin once for all of
// them; returns the script's result (each case's outputs are in its `out` file).
testing::ScriptResult run_twin(std::vector<Case>& cases, const TempDir& dir) {
  nlohmann::json manifest = nlohmann::json::array();
  for (Case& c : cases) {
    const std::string weights = dir.file(c.name + ".weights.safetensors"), inputs = dir.file(c.name + ".inputs.safetensors");
    c.out = dir.file(c.name + ".torch.safetensors");
    save_weights(*c.model, weights);
    io::save_safetensors(inputs, {int64_view("x", c.x), int64_view("labels", c.labels)});
    nlohmann::json entry = {{"name", c.name},
                            {"config", config_json(c.config)},
                            {"head", c.masked_lm ? "mlm" : "classification"},
                            {"dtype", c.dtype == DType::Float64 ? "float64" : "float32"},
                            {"weights", weights},
                            {"inputs", inputs},
                            {"out", c.out},
                            {"mode", c.adamw ? "adamw" : "grad"}};
    if (c.adamw) {
      entry["adamw"] = {{"steps", kAdamWSteps}, {"warmup", kAdamWWarmup}, {"lr", kAdamWLr},
                        {"beta1", 0.9},         {"beta2", 0.999},         {"eps", 1e-8},
                        {"weight_decay", kAdamWWeightDecay},              {"clip", kAdamWClip}};
    }
    manifest.push_back(entry);
  }
  const std::string manifest_path = dir.file("manifest.json");
  std::ofstream(manifest_path) << manifest.dump();
  return testing::run_python_script("tests/layers/torch_bert.py", "'" + manifest_path + "'");
}

std::vector<double> as_doubles(const Tensor& t) {
  if (t.dtype() == DType::Float64) return t.to_vector<double>();
  const auto f = t.to_vector<float>();
  return {f.begin(), f.end()};
}
std::vector<double> as_doubles(const io::TensorRecord& r) {
  if (r.dtype == DType::Float64) return {r.values<double>(), r.values<double>() + r.numel()};
  return {r.values<float>(), r.values<float>() + r.numel()};
}
double largest_magnitude(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}
// max |got - ref| over the scale of the parameter's module: max |ref|, and for a bias the
// larger of that and its module's weight's (`key` in `torch`, "grad." or "final."). A bias
// starts at 0 and moves by Adam's steps, each about lr whatever its gradient, so its own
// scale is the distance travelled, and an element whose gradient is small against the
// tensor's carries the gradient's rounding at full step size; the key biases' gradient is
// exactly 0 (softmax ignores a shift shared by all keys of a query, and q . b_key is one),
// so both sides hold rounding noise only. Against the module's weight, both are measured on
// the scale at which they act on the layer's output.
double module_scaled_difference(const std::vector<double>& got, const io::SafetensorsFile& torch,
                                const std::string& prefix, const std::string& name) {
  const std::vector<double> ref = as_doubles(torch.at(prefix + name));
  EXPECT_EQ(got.size(), ref.size()) << name;
  double diff = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) diff = std::max(diff, std::abs(got[i] - ref[i]));
  double scale = largest_magnitude(ref);
  const std::string bias = ".bias";
  if (name.size() > bias.size() && name.compare(name.size() - bias.size(), bias.size(), bias) == 0) {
    const std::string weight = prefix + name.substr(0, name.size() - bias.size()) + ".weight";
    if (const io::TensorRecord* w = torch.find(weight)) scale = std::max(scale, largest_magnitude(as_doubles(*w)));
  }
  return scale > 0 ? diff / scale : diff;
}
std::vector<double> entry_values(const Tensor& flat, const FlatEntry& e) {
  const auto all = as_doubles(flat);
  return {all.begin() + e.offset, all.begin() + e.offset + e.numel};
}
std::set<std::string> json_names(const io::SafetensorsFile& file, const std::string& key) {
  const auto names = nlohmann::json::parse(file.metadata().at(key)).get<std::vector<std::string>>();
  return {names.begin(), names.end()};
}

// Forward logits and every parameter's gradient of the mean cross-entropy.
void check_gradients(Case& c, double tolerance) {
  SCOPED_TRACE(c.name);
  const io::SafetensorsFile torch = io::load_safetensors(c.out);
  Model& m = *c.model;
  m.eval();  // dropout off, as the twin's
  m.zero_grad();
  const Tensor logits = m.forward_logits(c.x);
  ops::cross_entropy(logits, c.labels).backward();
  double worst = module_scaled_difference(as_doubles(logits), torch, "", "logits");
  EXPECT_LE(worst, tolerance) << "logits";
  std::set<std::string> ours;
  for (const auto& e : m.parameters().entries()) {
    ours.insert(e.name);
    const double d = module_scaled_difference(entry_values(m.parameters().grads(), e), torch, "grad.", e.name);
    EXPECT_LE(d, tolerance) << "gradient of " << e.name;
    worst = std::max(worst, d);
  }
  std::cout << c.name << ": worst scaled difference " << worst << " (tolerance " << tolerance << ")\n";
  // The names: ours are the twin's parameters, and its state_dict less the tied aliases.
  EXPECT_EQ(ours, json_names(torch, "named_parameters"));
  std::set<std::string> state = json_names(torch, "state_dict");
  for (const std::string& alias : json_names(torch, "tied_aliases")) state.erase(alias);
  EXPECT_EQ(ours, state);
  if (c.masked_lm) {
    EXPECT_EQ(json_names(torch, "tied_aliases"),
              (std::set<std::string>{"cls.predictions.decoder.bias", "cls.predictions.decoder.weight"}));
  }
}

// One process of the twin for the six cases: both models, both input forms, both dtypes.
TEST(BertParity, LogitsAndGradientsMatchTheTwin) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  TempDir dir;
  std::vector<Case> cases;
  const BertConfig small = small_config();
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const std::string suffix = dtype == DType::Float64 ? "_f64" : "_f32";
    cases.push_back(make_case("classification_ids" + suffix, small, false, false, dtype, false, 3, 8));
    cases.push_back(make_case("classification_rows" + suffix, small, false, true, dtype, false, 3, 8));
    cases.push_back(make_case("mlm_rows" + suffix, small, true, true, dtype, false, 3, 8));
  }
  const testing::ScriptResult script = run_twin(cases, dir);
  ASSERT_EQ(script.status, 0) << script.output;
  for (Case& c : cases) check_gradients(c, c.dtype == DType::Float64 ? kFloat64Tolerance : kFloat32Tolerance);
}

// 20 AdamW steps, driven as the runners drive them: the linear schedule's rate before each
// step (train/schedule/lr_schedule.h), Optimizer::step clipping then updating.
void check_adamw(Case& c, double tolerance) {
  SCOPED_TRACE(c.name);
  Model& m = *c.model;
  m.eval();  // dropout off
  Adam adam(m.parameters(), AdamConfig{kAdamWLr, 0.9, 0.999, 1e-8, kAdamWWeightDecay, true});
  adam.set_clip_grad_norm(kAdamWClip);
  const train::LrSchedule schedule("linear", SgdConfig{kAdamWLr}, kAdamWWarmup, kAdamWSteps, kAdamWSteps);
  for (int step = 0; step < kAdamWSteps; ++step) {
    adam.set_lr(schedule.at(step).lr);
    m.zero_grad();
    ops::cross_entropy(m.forward_logits(c.x), c.labels).backward();
    adam.step();
  }
  const io::SafetensorsFile torch = io::load_safetensors(c.out);
  double worst = 0;
  for (const auto& e : m.parameters().entries()) {
    const double d = module_scaled_difference(entry_values(m.parameters().values(), e), torch, "final.", e.name);
    EXPECT_LE(d, tolerance) << e.name;
    worst = std::max(worst, d);
  }
  std::cout << c.name << ": worst scaled difference " << worst << " (tolerance " << tolerance << ")\n";
}

// One process of the twin for bert-tiny in both dtypes.
TEST(BertParity, BertTinyAfter20AdamWStepsMatchesTorch) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  TempDir dir;
  std::vector<Case> cases;
  for (DType dtype : {DType::Float32, DType::Float64}) {
    cases.push_back(make_case(dtype == DType::Float64 ? "bert_tiny_adamw_f64" : "bert_tiny_adamw_f32",
                              BertConfig::preset("bert-tiny"), false, false, dtype, true, 4, 16));
  }
  const testing::ScriptResult script = run_twin(cases, dir);
  ASSERT_EQ(script.status, 0) << script.output;
  for (Case& c : cases) check_adamw(c, c.dtype == DType::Float64 ? kAdamWFloat64Tolerance : kAdamWFloat32Tolerance);
}

// all-MiniLM-L6-v2 (issue 26, item 6), as scripts/get_minilm.sh writes it (scripts/test.sh
// runs that first; it needs the package index): 6 layers, hidden 384 in 12 heads of 32,
// intermediate 1536, BERT's uncased vocabulary of 30,522.
const std::string kMiniLmDir = testing::source_dir() + "/data/minilm";

BertConfig minilm_config() {
  BertConfig c;
  c.hidden_size = 384, c.num_hidden_layers = 6, c.num_attention_heads = 12, c.intermediate_size = 1536;
  c.num_labels = 3;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
  return c;
}

// float32 over MiniLM's depth: a dot product of length K differs between the two sides by up
// to about K u |a| |b| (u = 2^-24); its longest is K = 1536 (the intermediate size), 9.2e-5 of
// the scale, and a gradient passes through about 75 products and layer norms (forward and
// backward of six layers, the pooler and the head): 7e-3 of the tensor's scale, so 1e-2 (the
// test prints its worst).
constexpr double kMiniLmFloat32Tolerance = 1e-2;

// The pretrained weights loaded by --init-from's rule into a BertForSequenceClassification
// (its encoder and pooler from the file, a fresh classifier), on real English text tokenized
// with the model's own vocabulary: the logits and every parameter's gradient against the twin
// on the same weights. The twin is checked against transformers' BertModel by
// scripts/check_bert_twin.py.
TEST(BertParity, MiniLmOnRealTextMatchesTheTwin) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  const std::string weights = kMiniLmDir + "/minilm.safetensors";
  if (!std::ifstream(weights).good())
    GTEST_SKIP() << "no " << weights << ": scripts/get_minilm.sh writes it from the package index (scripts/test.sh "
                 << "runs it first; it could not reach the index)";
  const data::text::WordPieceTokenizer tokenizer(data::text::Vocab::read(kMiniLmDir + "/vocab.txt"));
  const std::vector<std::string> texts = {
      "Beam me up, Scotty: there is no intelligent life down here.",
      "The best way to predict the future is to invent it.",
      "A computer lets you make more mistakes faster than any invention in human history, with the possible "
      "exceptions of handguns and tequila."};
  std::vector<std::vector<int64_t>> encoded;
  int64_t t = 0;
  for (const std::string& text : texts) {
    encoded.push_back(tokenizer.encode(text, 128, false));
    t = std::max(t, int64_t(encoded.back().size()));
  }
  const int64_t n = int64_t(texts.size());
  std::vector<int64_t> ids(size_t(n * t), 0);  // padded with [PAD], id 0
  for (int64_t s = 0; s < n; ++s) std::copy(encoded[size_t(s)].begin(), encoded[size_t(s)].end(), ids.begin() + s * t);

  Case c;
  c.name = "minilm_f32", c.config = minilm_config(), c.dtype = DType::Float32;
  c.x = Tensor::from_vector(ids, {n, t});
  c.labels = labels_for(ids, n, t, c.config.num_labels, false);
  c.model = build(c.config, false, Shape{t}, DType::Float32);
  const WeightsReport report = load_weights_partially(*c.model, io::load_safetensors(weights), "minilm");
  EXPECT_EQ(report.new_, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_EQ(report.loaded.size(), 103u);
  EXPECT_TRUE(report.unused.empty());
  TempDir dir;
  // What the twin gets (our weights, saved) holds the file's tensors bit for bit.
  save_weights(*c.model, dir.file("loaded.safetensors"));
  const io::SafetensorsFile file = io::load_safetensors(weights), loaded = io::load_safetensors(dir.file("loaded.safetensors"));
  for (const io::TensorRecord& t : file.tensors()) {
    const io::TensorRecord* ours = loaded.find(t.name);
    ASSERT_NE(ours, nullptr) << t.name;
    EXPECT_EQ(ours->shape, t.shape) << t.name;
    EXPECT_TRUE(ours->data == t.data) << t.name << " is not the file's";
  }
  std::vector<Case> cases;
  cases.push_back(std::move(c));
  const testing::ScriptResult script = run_twin(cases, dir);
  ASSERT_EQ(script.status, 0) << script.output;
  check_gradients(cases[0], kMiniLmFloat32Tolerance);
}

}  // namespace
}  // namespace dpcore::layers
