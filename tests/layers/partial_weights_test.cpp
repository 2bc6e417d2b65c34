// load_weights_partially (layers/weights.h), fine-tuning's start as Hugging Face's
// from_pretrained makes it: a BertForMaskedLM file, written as Hugging Face writes one (with
// the decoder's tied alias and the position_ids buffer), into a BertForSequenceClassification
// loads the encoder exactly, keeps the pooler and classifier as a fresh model of the same seed
// has them, and reports the masked-LM head's tensors as unused. A tensor of another shape and
// a file of another model are refused, naming what differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "layers/transformer/bert.h"
#include "layers/weights.h"
#include "layers/zoo.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::layers {
namespace {

using namespace dpcore::testing;

constexpr int64_t kPositions = 16;

BertConfig small_bert(int64_t labels = 2) {
  BertConfig config;
  config.vocab_size = 20, config.hidden_size = 8, config.num_hidden_layers = 1, config.num_attention_heads = 2;
  config.intermediate_size = 16, config.max_position_embeddings = kPositions, config.num_labels = labels;
  return config;
}

Model classifier(uint64_t seed, int64_t labels = 2) {
  return Model(bert_for_sequence_classification(small_bert(labels)), {8}, Device::cpu(), DType::Float64, seed);
}

// A BertForMaskedLM's weights as transformers saves them: its state_dict, then the decoder's
// tied alias and bert.embeddings.position_ids.
void save_masked_lm_as_hugging_face(const Model& mlm, const std::string& path) {
  HostState state(mlm);
  std::vector<io::TensorView> views = state.views();
  const auto& word = *std::find_if(views.begin(), views.end(), [](const io::TensorView& v) {
    return v.name == "bert.embeddings.word_embeddings.weight";
  });
  views.push_back({"cls.predictions.decoder.weight", word.dtype, word.shape, word.data, word.bytes});
  std::vector<int64_t> positions(kPositions);
  for (int64_t i = 0; i < kPositions; ++i) positions[size_t(i)] = i;
  views.push_back({"bert.embeddings.position_ids", DType::Int64, {1, kPositions}, positions.data(),
                   positions.size() * sizeof(int64_t)});
  io::save_safetensors(path, views);
}

std::vector<double> values_of(const Model& m, const std::string& name) {
  const FlatEntry& e = m.parameters().entry(name);
  const std::vector<double> all = m.parameters().values().to_vector<double>();
  return {all.begin() + e.offset, all.begin() + e.offset + e.numel};
}

std::vector<std::string> names_of(const Model& m) {
  std::vector<std::string> names;
  for (const auto& e : m.parameters().entries()) names.push_back(e.name);
  return names;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(PartialWeights, AMaskedLanguageModelFileLoadsTheEncoderKeepsTheNewHeadAndReportsTheRest) {
  const Model mlm(bert_for_masked_lm(small_bert()), {8}, Device::cpu(), DType::Float64, 11);
  TempDir dir;
  const std::string path = dir.file("mlm.safetensors");
  save_masked_lm_as_hugging_face(mlm, path);

  Model model = classifier(5);
  const Model fresh = classifier(5);
  const WeightsReport report = load_weights_partially(model, io::load_safetensors(path), "small-bert");

  // Our BertForMaskedLM has no pooler, as Hugging Face's: the pooler is new, as the classifier.
  std::vector<std::string> encoder, head;
  for (const std::string& name : names_of(model))
    (starts_with(name, "bert.") && !starts_with(name, "bert.pooler.") ? encoder : head).push_back(name);
  EXPECT_EQ(report.loaded, encoder);
  EXPECT_EQ(report.new_, (std::vector<std::string>{"bert.pooler.dense.weight", "bert.pooler.dense.bias",
                                                   "classifier.weight", "classifier.bias"}));
  // The masked-LM head in the file's order, the tied alias among them; position_ids is the
  // model's positions (checked), not an unused tensor.
  std::vector<std::string> cls;
  for (const std::string& name : io::load_safetensors(path).names())
    if (starts_with(name, "cls.")) cls.push_back(name);
  EXPECT_EQ(report.unused, cls);
  EXPECT_NE(std::find(cls.begin(), cls.end(), "cls.predictions.decoder.weight"), cls.end());
  EXPECT_EQ(report.converted.from_bfloat16 + report.converted.from_float16, 0);

  // float64 throughout: loaded tensors are the file's exactly, new ones the fresh model's.
  for (const std::string& name : encoder) EXPECT_EQ(values_of(model, name), values_of(mlm, name)) << name;
  for (const std::string& name : head) EXPECT_EQ(values_of(model, name), values_of(fresh, name)) << name;

  const std::string log = weights_report_log(report, path, "small-bert");
  EXPECT_NE(log.find(path + ": loaded " + std::to_string(encoder.size()) + " of the " +
                     std::to_string(encoder.size() + 4) + " tensors of small-bert; 4 newly initialized, " +
                     std::to_string(cls.size()) + " of the file's not used\n"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(": bert.pooler.dense.weight, bert.pooler.dense.bias, classifier.weight, classifier.bias\n"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("not used (small-bert has no such tensor): " + cls.front() + ", "), std::string::npos) << log;
  EXPECT_NE(log.find("  loaded: bert.embeddings.word_embeddings.weight, "), std::string::npos) << log;
}

// A bare BertModel's file (embeddings.*, encoder.*, pooler.*, as sentence-transformers ships
// all-MiniLM-L6-v2, with position_ids) loads into the model's bert.*, as from_pretrained adds
// the base model's prefix: everything but the classifier loaded, nothing unused.
TEST(PartialWeights, ABareBaseModelFileLoadsUnderTheBertPrefix) {
  const Model source = classifier(11);
  HostState state(source);
  std::vector<io::TensorView> bare;
  for (io::TensorView v : state.views()) {
    if (!starts_with(v.name, "bert.")) continue;
    v.name = v.name.substr(5);
    bare.push_back(v);
  }
  std::vector<int64_t> positions(kPositions);
  for (int64_t i = 0; i < kPositions; ++i) positions[size_t(i)] = i;
  bare.push_back({"embeddings.position_ids", DType::Int64, {1, kPositions}, positions.data(),
                  positions.size() * sizeof(int64_t)});
  TempDir dir;
  const std::string path = dir.file("bert_model.safetensors");
  io::save_safetensors(path, bare);

  Model model = classifier(5);
  const Model fresh = classifier(5);
  const WeightsReport report = load_weights_partially(model, io::load_safetensors(path), "small-bert");
  std::vector<std::string> encoder;
  for (const std::string& name : names_of(model))
    if (starts_with(name, "bert.")) encoder.push_back(name);
  EXPECT_EQ(report.loaded, encoder);
  EXPECT_EQ(report.new_, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_TRUE(report.unused.empty()) << report.unused.front();
  EXPECT_EQ(report.added_prefix, "bert.");
  for (const std::string& name : encoder) EXPECT_EQ(values_of(model, name), values_of(source, name)) << name;
  for (const char* name : {"classifier.weight", "classifier.bias"})
    EXPECT_EQ(values_of(model, name), values_of(fresh, name)) << name;
  const std::string log = weights_report_log(report, path, "small-bert");
  EXPECT_NE(log.find("  (a bare base model's file: its tensors read as bert.<name>, as from_pretrained reads them)\n"),
            std::string::npos)
      << log;
}

TEST(PartialWeights, ATensorOfAnotherShapeIsRefusedNamingBothShapes) {
  TempDir dir;
  const std::string path = dir.file("two_labels.safetensors");
  save_weights(classifier(1, 2), path);
  Model three = classifier(1, 3);
  const std::string error =
      error_of([&] { load_weights_partially(three, io::load_safetensors(path), "small-bert"); });
  EXPECT_NE(error.find("tensor 'classifier.weight' has shape [2, 8] but the model's classifier.weight is [3, 8]"),
            std::string::npos)
      << error;
}

TEST(PartialWeights, AFileSharingNoTensorWithTheModelIsRefused) {
  TempDir dir;
  const std::string path = dir.file("resnet8.safetensors");
  ModelDef def = reference_model("resnet8", {1, 28, 28});
  save_weights(Model(std::move(def.net), def.input_shape), path);
  Model model = classifier(1);
  const std::vector<double> before = model.parameters().values().to_vector<double>();
  const std::string error =
      error_of([&] { load_weights_partially(model, io::load_safetensors(path), "small-bert"); });
  EXPECT_NE(error.find(path + ": no tensor of small-bert is in it; is it a checkpoint of another model?"),
            std::string::npos)
      << error;
  EXPECT_EQ(model.parameters().values().to_vector<double>(), before);  // nothing half-loaded
}

}  // namespace
}  // namespace dpcore::layers
