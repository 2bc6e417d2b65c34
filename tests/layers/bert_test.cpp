// BERT's structure (layers/transformer/bert.h): Hugging Face's state_dict names and shapes,
// the weight-decay flags, _init_weights' initialisation, the two input forms, the tied
// decoder, the zoo names and the spec, and the errors of bad input. Parity with the torch.nn
// twin of Hugging Face's modules is tests/layers/bert_parity_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "engine/io/safetensors.h"
#include "layers/transformer/bert.h"
#include "layers/weights.h"
#include "layers/zoo.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::layers {
namespace {

using testing::error_of;

BertConfig small_config() {
  BertConfig c;
  c.vocab_size = 40, c.hidden_size = 16, c.num_hidden_layers = 2, c.num_attention_heads = 4;
  c.intermediate_size = 24, c.max_position_embeddings = 12, c.num_labels = 3;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
  return c;
}

Model build(std::unique_ptr<Sequential> net, Shape input, DType dtype = DType::Float64) {
  return Model(std::move(net), std::move(input), Device::cpu(), dtype, 7);
}

std::vector<std::string> names(const Model& m) {
  std::vector<std::string> out;
  for (const auto& e : m.parameters().entries()) out.push_back(e.name);
  return out;
}

TEST(Bert, BertTinyHasHuggingFacesNamesShapesAndDecayFlags) {
  ModelDef def = reference_model("bert-tiny", {}, 2);
  EXPECT_EQ(def.input_shape, (Shape{128}));
  Model m = build(std::move(def.net), def.input_shape, DType::Float32);
  std::vector<std::string> want = {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
                                   "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
                                   "bert.embeddings.LayerNorm.bias"};
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "bert.encoder.layer." + std::to_string(layer) + ".";
    for (const char* part : {"attention.self.query", "attention.self.key", "attention.self.value",
                             "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
                             "output.dense", "output.LayerNorm"}) {
      want.push_back(p + part + ".weight");
      want.push_back(p + part + ".bias");
    }
  }
  for (const char* tail : {"bert.pooler.dense.weight", "bert.pooler.dense.bias", "classifier.weight", "classifier.bias"})
    want.push_back(tail);
  EXPECT_EQ(names(m), want);
  const auto& p = m.parameters();
  EXPECT_EQ(p.entry("bert.embeddings.word_embeddings.weight").shape, (Shape{30522, 128}));
  EXPECT_EQ(p.entry("bert.embeddings.position_embeddings.weight").shape, (Shape{512, 128}));
  EXPECT_EQ(p.entry("bert.embeddings.token_type_embeddings.weight").shape, (Shape{2, 128}));
  EXPECT_EQ(p.entry("bert.encoder.layer.1.intermediate.dense.weight").shape, (Shape{512, 128}));
  EXPECT_EQ(p.entry("bert.encoder.layer.1.output.dense.weight").shape, (Shape{128, 512}));
  EXPECT_EQ(p.entry("classifier.weight").shape, (Shape{2, 128}));
  EXPECT_EQ(m.output_shape(), (Shape{2}));
  EXPECT_TRUE(m.takes_token_ids());
  // BERT's convention: no weight decay for biases and LayerNorm weights.
  for (const auto& e : p.entries()) {
    const bool bias = e.name.size() >= 4 && e.name.compare(e.name.size() - 4, 4, "bias") == 0;
    const bool exempt = bias || e.name.find("LayerNorm") != std::string::npos;
    EXPECT_EQ(e.weight_decay, !exempt) << e.name;
  }
}

TEST(Bert, MaskedLMTiesItsDecoderToTheWordEmbeddings) {
  ModelDef def = reference_model("bert-mini-mlm", {32});
  Model m = build(std::move(def.net), def.input_shape, DType::Float32);
  const std::vector<std::string> n = names(m);
  EXPECT_EQ(n.front(), "bert.embeddings.word_embeddings.weight");
  EXPECT_EQ(std::count(n.begin(), n.end(), "cls.predictions.decoder.weight"), 0);  // laid out once
  for (const char* head : {"cls.predictions.bias", "cls.predictions.transform.dense.weight",
                           "cls.predictions.transform.dense.bias", "cls.predictions.transform.LayerNorm.weight",
                           "cls.predictions.transform.LayerNorm.bias"}) {
    EXPECT_EQ(std::count(n.begin(), n.end(), head), 1) << head;
  }
  EXPECT_EQ(std::count_if(n.begin(), n.end(), [](const std::string& s) { return s.rfind("bert.pooler", 0) == 0; }), 0);
  EXPECT_EQ(std::count_if(n.begin(), n.end(), [](const std::string& s) { return s.find("layer.3.") != std::string::npos; }),
            16);
  EXPECT_EQ(m.output_shape(), (Shape{32, 30522}));
  EXPECT_FALSE(m.parameters().entry("cls.predictions.bias").weight_decay);
}

// A weights file holds the tied matrix once, under the embedding's name (as save_pretrained
// does), and loads back strictly into a fresh model, whose decoder then uses it.
TEST(Bert, MaskedLMWeightsRoundTripWithTheTiedMatrixOnce) {
  const BertConfig c = small_config();
  Model a = build(bert_for_masked_lm(c), {5}, DType::Float32);
  testing::TempDir dir;
  const std::string path = dir.file("mlm.safetensors");
  save_weights(a, path);
  const std::vector<std::string> saved = io::load_safetensors(path).names();
  EXPECT_EQ(std::count(saved.begin(), saved.end(), "bert.embeddings.word_embeddings.weight"), 1);
  EXPECT_EQ(std::count(saved.begin(), saved.end(), "cls.predictions.decoder.weight"), 0);
  EXPECT_EQ(saved.size(), a.parameters().entries().size());
  Model b = build(bert_for_masked_lm(c), {5}, DType::Float32);
  b.init_parameters(99);
  load_weights(b, path);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{5, 9, 3, 0, 0}, {1, 5});
  EXPECT_EQ(a.forward_logits(ids).to_vector<float>(), b.forward_logits(ids).to_vector<float>());
}

// A file as Hugging Face writes BertForMaskedLM's state_dict (torch.save of a model whose
// BertEmbeddings registers position_ids persistently, as transformers before 4.31 does, and
// whose tied decoder appears under its own name too): the strict load accepts exactly those
// two, when the alias equals the word embeddings and position_ids is 0..P-1; otherwise it
// names the tensor and what is wrong, and other unknown tensors are still refused.
TEST(Bert, StrictLoadAcceptsHuggingFacesTiedAliasAndPositionIds) {
  const BertConfig c = small_config();  // max_position_embeddings 12
  Model a = build(bert_for_masked_lm(c), {5}, DType::Float32);
  testing::TempDir dir;
  const std::string ours = dir.file("ours.safetensors");
  save_weights(a, ours);
  const io::SafetensorsFile saved = io::load_safetensors(ours);
  const io::TensorRecord& words = saved.at("bert.embeddings.word_embeddings.weight");
  std::vector<int64_t> positions(12);
  for (int64_t i = 0; i < 12; ++i) positions[size_t(i)] = i;
  auto write_like_hugging_face = [&](const std::string& name, const std::vector<uint8_t>& alias,
                                     const std::vector<int64_t>& position_ids, const std::string& extra = "") {
    std::vector<io::TensorView> views;
    for (const io::TensorRecord& t : saved.tensors()) views.push_back({t.name, t.dtype, t.shape, t.data.data(), t.data.size()});
    views.push_back({"cls.predictions.decoder.weight", words.dtype, words.shape, alias.data(), alias.size()});
    views.push_back({"bert.embeddings.position_ids", DType::Int64, {1, int64_t(position_ids.size())},
                     position_ids.data(), position_ids.size() * sizeof(int64_t)});
    if (!extra.empty()) views.push_back({extra, DType::Int64, {1, 12}, positions.data(), 12 * sizeof(int64_t)});
    const std::string path = dir.file(name);
    io::save_safetensors(path, views);
    return path;
  };
  Model b = build(bert_for_masked_lm(c), {5}, DType::Float32);
  b.init_parameters(99);
  load_weights(b, write_like_hugging_face("hf.safetensors", words.data, positions));
  EXPECT_EQ(b.parameters().values().to_vector<float>(), a.parameters().values().to_vector<float>());

  std::vector<uint8_t> other = words.data;
  other[7] ^= 1;  // one bit of one element
  EXPECT_NE(error_of([&] { load_weights(b, write_like_hugging_face("alias.safetensors", other, positions)); })
                .find("'cls.predictions.decoder.weight' is tied to 'bert.embeddings.word_embeddings.weight' but differs "
                      "from it"),
            std::string::npos);
  std::vector<int64_t> shifted = positions;
  shifted[3] = 4;
  EXPECT_NE(error_of([&] { load_weights(b, write_like_hugging_face("shifted.safetensors", words.data, shifted)); })
                .find("'bert.embeddings.position_ids' must be int64 [1, 12] holding 0..11"),
            std::string::npos);
  const std::vector<int64_t> short_positions(positions.begin(), positions.begin() + 8);
  EXPECT_NE(error_of([&] { load_weights(b, write_like_hugging_face("short.safetensors", words.data, short_positions)); })
                .find("'bert.embeddings.position_ids' must be int64 [1, 12] holding 0..11"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              load_weights(b, write_like_hugging_face("extra.safetensors", words.data, positions,
                                                      "bert.embeddings.token_type_ids"));
            }).find("unexpected tensor 'bert.embeddings.token_type_ids'"),
            std::string::npos);
}

TEST(Bert, StartsAsHuggingFacesInitWeights) {
  BertConfig c = small_config();
  c.vocab_size = 400;
  Model m = build(bert_for_sequence_classification(c), {6});
  const auto v = m.parameters().values().to_vector<double>();
  auto stats = [&](const std::string& name) {
    const auto& e = m.parameters().entry(name);
    double sum = 0, sq = 0, lo = 1e9, hi = -1e9;
    for (int64_t i = 0; i < e.numel; ++i) {
      const double x = v[size_t(e.offset + i)];
      sum += x, sq += x * x, lo = std::min(lo, x), hi = std::max(hi, x);
    }
    return std::array<double, 4>{sum / double(e.numel), std::sqrt(sq / double(e.numel)), lo, hi};
  };
  // 400 x 16 - 16 draws of N(0, 0.02^2): the sample std within 5% (about 4 sigma).
  const auto word = stats("bert.embeddings.word_embeddings.weight");
  EXPECT_NEAR(word[1] * std::sqrt(6400.0 / 6384.0), 0.02, 0.001);
  const auto& we = m.parameters().entry("bert.embeddings.word_embeddings.weight");
  for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(v[size_t(we.offset + d)], 0.0) << "padding row (pad_token_id 0)";
  EXPECT_NEAR(stats("bert.encoder.layer.0.intermediate.dense.weight")[1], 0.02, 0.003);  // 384 draws
  for (const char* zero : {"bert.encoder.layer.1.attention.self.query.bias", "classifier.bias", "bert.pooler.dense.bias",
                           "bert.embeddings.LayerNorm.bias"}) {
    const auto s = stats(zero);
    EXPECT_EQ(s[2], 0.0) << zero;
    EXPECT_EQ(s[3], 0.0) << zero;
  }
  const auto ln = stats("bert.encoder.layer.0.output.LayerNorm.weight");
  EXPECT_EQ(ln[2], 1.0);
  EXPECT_EQ(ln[3], 1.0);
}

// The ids form's key-padding mask is made on the device (a lookup of the ids, not a read to
// the host): exactly ids != pad_token_id, in the model's dtype, for any pad id; with no
// padding at all it is all ones and the output equals the rows form's, which then has no mask.
TEST(Bert, TheIdsFormsMaskIsIdsNotEqualToPadInTheModelsDtype) {
  BertConfig c = small_config();
  c.pad_token_id = 3;
  const std::vector<int64_t> ids = {5, 3, 3, 0, 39, 3, 2, 8, 4, 1};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    PositionIds positions;
    const BertInputs in = bert_inputs(Tensor::from_vector(ids, {2, 5}), c, dtype, positions);
    ASSERT_TRUE(in.attention_mask.defined());
    EXPECT_EQ(in.attention_mask.dtype(), dtype);
    EXPECT_EQ(in.attention_mask.shape(), (Shape{2, 5}));
    const std::vector<double> mask = dtype == DType::Float64 ? in.attention_mask.to_vector<double>() : [&] {
      const std::vector<float> f = in.attention_mask.to_vector<float>();
      return std::vector<double>(f.begin(), f.end());
    }();
    EXPECT_EQ(mask, (std::vector<double>{1, 0, 0, 1, 1, 0, 1, 1, 1, 1}));
    EXPECT_EQ(in.position_ids.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
    // The next batch of that shape finds its position ids kept, not made anew.
    EXPECT_EQ(bert_inputs(Tensor::from_vector(ids, {2, 5}), c, dtype, positions).position_ids.raw_data(),
              in.position_ids.raw_data());
  }
  const std::vector<int64_t> unpadded = {5, 9, 4, 1, 2, 7, 2, 8, 4, 1};
  std::vector<int64_t> rows;
  for (int s = 0; s < 2; ++s) {
    for (int j = 0; j < 5; ++j) rows.push_back(unpadded[size_t(s * 5 + j)]);
    for (int j = 0; j < 10; ++j) rows.push_back(j < 5 ? 0 : 1);
  }
  Model a = build(bert_for_sequence_classification(c), {5});
  Model b = build(bert_for_sequence_classification(c), {3, 5});
  EXPECT_EQ(a.forward_logits(Tensor::from_vector(unpadded, {2, 5})).to_vector<double>(),
            b.forward_logits(Tensor::from_vector(rows, {2, 3, 5})).to_vector<double>());
}

// [N, T] ids mean: attend where id != pad, token types 0. The [N, 3, T] form with exactly
// that must give the same output; padded positions must not matter, whatever their ids.
TEST(Bert, IdsFormEqualsTheRowsFormAndPaddingIsIgnored) {
  const BertConfig c = small_config();
  const std::vector<int64_t> ids = {5, 9, 3, 0, 0, 7, 2, 8, 4, 1};
  Model a = build(bert_for_sequence_classification(c), {5});
  Model b = build(bert_for_sequence_classification(c), {3, 5});
  auto rows = [&](const std::vector<int64_t>& padded_ids) {
    std::vector<int64_t> r;
    for (int s = 0; s < 2; ++s) {
      for (int j = 0; j < 5; ++j) r.push_back(padded_ids[size_t(s * 5 + j)]);
      for (int j = 0; j < 5; ++j) r.push_back(0);
      for (int j = 0; j < 5; ++j) r.push_back(ids[size_t(s * 5 + j)] != 0 ? 1 : 0);
    }
    return Tensor::from_vector(r, {2, 3, 5});
  };
  const auto from_ids = a.forward_logits(Tensor::from_vector(ids, {2, 5})).to_vector<double>();
  const auto from_rows = b.forward_logits(rows(ids)).to_vector<double>();
  std::vector<int64_t> other = ids;
  other[3] = 17, other[4] = 30;  // the padded positions hold other ids, still masked
  const auto other_padding = b.forward_logits(rows(other)).to_vector<double>();
  ASSERT_EQ(from_ids.size(), 6u);
  for (size_t i = 0; i < from_ids.size(); ++i) {
    EXPECT_EQ(from_ids[i], from_rows[i]) << i;
    EXPECT_NEAR(other_padding[i], from_ids[i], 1e-14) << i;
  }
  // Token types do change the output.
  std::vector<int64_t> typed = rows(ids).to_vector<int64_t>();
  typed[5 + 1] = 1;
  EXPECT_NE(b.forward_logits(Tensor::from_vector(typed, {2, 3, 5})).to_vector<double>(), from_rows);
}

// With dropout on (embeddings, attention probabilities, residual branches, classifier) in
// training mode, every mask is keyed by the global sample: a batch split in two halves, each
// told where it starts, computes what the whole batch does; another step draws other masks.
TEST(Bert, DropoutInTrainingDependsOnTheSampleNotOnTheSplit) {
  BertConfig c = small_config();
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.3;
  Model m = build(bert_for_sequence_classification(c), {5});
  const std::vector<int64_t> ids = {5, 9, 3, 0, 0, 7, 2, 8, 4, 1, 6, 6, 2, 9, 0, 1, 3, 5, 7, 11};
  auto logits = [&](int64_t first, int64_t count, uint64_t step) {
    m.set_batch_position(step, first);
    const std::vector<int64_t> part(ids.begin() + first * 5, ids.begin() + (first + count) * 5);
    return m.forward_logits(Tensor::from_vector(part, {count, 5})).to_vector<double>();
  };
  const auto whole = logits(0, 4, 3);
  auto halves = logits(0, 2, 3);
  const auto second = logits(2, 2, 3);
  halves.insert(halves.end(), second.begin(), second.end());
  ASSERT_EQ(whole.size(), halves.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_NEAR(halves[i], whole[i], 1e-14) << i;
  EXPECT_NE(logits(0, 4, 4), whole);
  m.eval();
  const auto eval_a = logits(0, 4, 3), eval_b = logits(0, 4, 4);
  EXPECT_EQ(eval_a, eval_b);  // eval: no dropout
  EXPECT_NE(eval_a, whole);
}

TEST(Bert, TheSpecAndTheZooNames) {
  const BertSpec s = parse_bert_spec("bert(layers=3, hidden=64,heads=4,intermediate=96,vocab=100,max_len=32,labels=5,head=mlm)");
  EXPECT_EQ(s.config.num_hidden_layers, 3);
  EXPECT_EQ(s.config.hidden_size, 64);
  EXPECT_EQ(s.config.num_attention_heads, 4);
  EXPECT_EQ(s.config.intermediate_size, 96);
  EXPECT_EQ(s.config.vocab_size, 100);
  EXPECT_EQ(s.config.max_position_embeddings, 32);
  EXPECT_EQ(s.config.num_labels, 5);
  EXPECT_TRUE(s.masked_lm);
  ModelDef def = model_from_flag("bert(layers=1,hidden=8,heads=2,intermediate=16,vocab=20,labels=4)", {3, 10});
  Model m = build(std::move(def.net), def.input_shape);
  EXPECT_EQ(m.output_shape(), (Shape{4}));
  EXPECT_EQ(m.input_shape(), (Shape{3, 10}));
  for (const char* name : {"bert-tiny", "bert-mini", "bert-tiny-mlm", "bert-mini-mlm"}) {
    const auto all = reference_model_names();
    EXPECT_NE(std::find(all.begin(), all.end(), name), all.end()) << name;
  }
  EXPECT_EQ(BertConfig::preset("bert-mini").hidden_size, 256);
  EXPECT_EQ(BertConfig::preset("bert-mini").intermediate_size, 1024);
}

// As the ResNets take the data's classes, the BERT presets take the data's classes (their
// classifier's outputs) and its vocabulary's size (the word embeddings' rows).
TEST(Bert, ThePresetsTakeTheDataClassesAndVocabularySize) {
  ModelDef def = model_from_flag("bert-tiny", {16}, 5, 3000);
  Model m = build(std::move(def.net), def.input_shape);
  EXPECT_EQ(m.output_shape(), (Shape{5}));
  EXPECT_EQ(m.parameters().entry("classifier.weight").shape, (Shape{5, 128}));
  EXPECT_EQ(m.parameters().entry("bert.embeddings.word_embeddings.weight").shape, (Shape{3000, 128}));
  ModelDef mini = model_from_flag("bert-mini", {16}, 12);
  Model mm = build(std::move(mini.net), mini.input_shape);
  EXPECT_EQ(mm.parameters().entry("bert.embeddings.word_embeddings.weight").shape, (Shape{30522, 256}));
  EXPECT_EQ(mm.output_shape(), (Shape{12}));
}

TEST(Bert, BadSpecsNameTheKeyAndTheValue) {
  EXPECT_NE(error_of([] { parse_bert_spec("bert(layers=2,hidden=128,heads=2)"); }).find("key 'intermediate' is missing"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_bert_spec("bert(layers=2,hidden=12x,heads=2,intermediate=8)"); })
                .find("hidden=12x is not a number"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_bert_spec("bert(layers=2,hidden=128,heads=2,intermediate=8,size=3)"); })
                .find("unknown key 'size'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_bert_spec("bert(layers=2,hidden=128,heads=2,intermediate=8,head=lm)"); })
                .find("head=lm is neither classification nor mlm"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_bert_spec("bert(layers=2,hidden=128,heads=3,intermediate=8)"); })
                .find("hidden_size 128 is not a multiple of num_attention_heads 3"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_bert_spec("bert(layers=0,hidden=128,heads=2,intermediate=8)"); })
                .find("num_hidden_layers = 0 must be positive"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_bert_spec("bert(layers=1,hidden=8,heads=2,intermediate=8,dropout=1.5)"); })
                .find("hidden_dropout_prob = 1.5 is outside [0, 1]"),
            std::string::npos);
}

TEST(Bert, BadInputNamesTheValueAndTheLimit) {
  const BertConfig c = small_config();
  Model ids = build(bert_for_sequence_classification(c), {4});
  Model rows = build(bert_for_sequence_classification(c), {3, 4});
  // An id outside the vocabulary: the embedding's error names it and V.
  const std::string vocab = error_of([&] { ids.forward_logits(Tensor::from_vector(std::vector<int64_t>{1, 2, 40, 3}, {1, 4})); });
  EXPECT_NE(vocab.find("40"), std::string::npos) << vocab;
  // Longer than the position table, when built and when run.
  EXPECT_NE(error_of([&] { build(bert_for_sequence_classification(c), {13}); })
                .find("sequences of 13 tokens, longer than max_position_embeddings 12"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ids.forward_logits(Tensor::zeros({1, 13}, DType::Int64)); })
                .find("longer than max_position_embeddings 12"),
            std::string::npos);
  // A wrong rank or shape, or float values.
  EXPECT_NE(error_of([&] { build(bert_for_sequence_classification(c), {2, 4}); }).find("[N, T] or [N, 3, T]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ids.forward_logits(Tensor::zeros({1, 2, 2, 4}, DType::Int64)); }).find("[N, T] or [N, 3, T]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ids.forward_logits(Tensor::zeros({1, 4}, DType::Float64)); }).find("must be int64 token ids"),
            std::string::npos);
  // The rows form: a mask that is not 0/1, a token type outside the table.
  std::vector<int64_t> r = {1, 2, 3, 4, 0, 0, 1, 1, 1, 1, 2, 1};
  EXPECT_NE(error_of([&] { rows.forward_logits(Tensor::from_vector(r, {1, 3, 4})); })
                .find("attention_mask[0, 2] = 2 is neither 0 nor 1"),
            std::string::npos);
  r[10] = 1, r[6] = 2;
  EXPECT_NE(error_of([&] { rows.forward_logits(Tensor::from_vector(r, {1, 3, 4})); })
                .find("token_type_ids[0, 2] = 2 is outside [0, type_vocab_size 2)"),
            std::string::npos);
  // Heads that do not divide the hidden size.
  BertConfig bad = c;
  bad.num_attention_heads = 3;
  EXPECT_NE(error_of([&] { bert_for_sequence_classification(bad); })
                .find("hidden_size 16 is not a multiple of num_attention_heads 3"),
            std::string::npos);
}

}  // namespace
}  // namespace dpcore::layers
