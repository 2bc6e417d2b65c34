// BERT (Devlin et al. 2019) as Hugging Face transformers writes it: BertModel,
// BertForSequenceClassification and BertForMaskedLM with Hugging Face's state_dict names
// ("bert.embeddings.word_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight",
// "classifier.weight", "cls.predictions.transform.dense.weight", ...), so that weights move
// to and from `transformers` without renaming. docs/transformers.md ("The model") says what
// each part computes and where we differ.
//
// Input: int64 [N, T] token ids (attention mask ids != pad_token_id, token types 0) or
// [N, 3, T] (rows input_ids, token_type_ids, attention_mask 0/1); positions 0..T-1. The ids
// form stays on the device: a forward reads nothing back to the host, and once warm copies
// nothing to the device either, so a CUDA graph can hold it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"
#include "layers/transformer/composite.h"
#include "layers/transformer/modules.h"

namespace dpcore::layers {

// transformers.BertConfig's fields and defaults (bert-base).
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";  // "gelu" (erf) or "gelu_pytorch_tanh"
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  int64_t pad_token_id = 0;
  int64_t num_labels = 2;

  // "bert-tiny" (2 layers, hidden 128, 2 heads, intermediate 512) or "bert-mini" (4, 256,
  // 4, 1024), the other fields at their defaults.
  static BertConfig preset(const std::string& name);
  // Fails naming the field and its value: sizes not positive, heads that do not divide the
  // hidden size, probabilities outside [0, 1], an unknown activation, a pad id outside the
  // vocabulary.
  void check() const;
  // The activation torch.nn.GELU takes: "none" or "tanh".
  std::string gelu_approximate() const;
};

// The three int64 [N, T] inputs and the key-padding mask of a BERT forward pass.
struct BertInputs {
  Tensor input_ids, token_type_ids, position_ids;
  // [N, T] in the model's dtype, 1 = attend. The ids form: always, ids != pad_token_id made
  // on the device. The rows form: undefined when nothing is padding.
  Tensor attention_mask;
};

// position_ids [N, T] (each row 0..T-1) on a device, made on the host at the first forward of
// a shape and kept, so that the next forwards of that shape copy nothing to the device.
class PositionIds {
 public:
  const Tensor& of(int64_t n, int64_t t, Device device);

 private:
  Tensor ids_;
};

// Splits a batch [N, T] or [N, 3, T] as the header says, failing naming the problem: a rank
// or shape that is neither, T above max_position_embeddings, a mask value other than 0/1,
// a token type outside [0, type_vocab_size). (Ids outside the vocabulary fail in the
// embedding.) The ids form is not read on the host (its mask is a lookup of the ids in a
// table of ones with a 0 at pad_token_id); the rows form is, to split and check its rows.
BertInputs bert_inputs(const Tensor& x, const BertConfig& config, DType dtype, PositionIds& positions);
// The per-sample input shape {T} or {3, T} checked as bert_inputs checks a batch; returns T.
int64_t bert_sequence_length(const Shape& batch_shape, const BertConfig& config);

// embeddings: word (padding_idx pad_token_id), position and token-type embeddings summed,
// then LayerNorm and dropout.
class BertEmbeddings : public Composite {
 public:
  explicit BertEmbeddings(const BertConfig& config);
  Tensor forward(const Tensor& x) override;  // x: [N, T] ids or [N, 3, T]
  Tensor forward(const BertInputs& in);
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override { return std::make_unique<BertEmbeddings>(config_); }
  bool takes_token_ids() const override { return true; }
  // The parameters' dtype (the attention mask is made in it).
  DType dtype() const { return word_->weight().dtype(); }

 private:
  BertConfig config_;
  Embedding *word_, *position_, *token_type_;
  LayerNorm* norm_;
  Dropout* dropout_;
  PositionIds positions_;
};

// encoder.layer.i: post-norm self-attention (attention.self.query / key / value,
// attention.output.dense / LayerNorm) and feed-forward (intermediate.dense, the activation,
// output.dense / LayerNorm), each with its dropout before the residual.
class BertLayer : public Composite {
 public:
  explicit BertLayer(const BertConfig& config);
  Tensor forward(const Tensor& x) override { return forward(x, Tensor()); }
  // x [N, T, H]; key_padding_mask [N, T] in x's dtype or undefined.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask);
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override { return std::make_unique<BertLayer>(config_); }
  // The attention probabilities' dropout draws from this module's stream.
  void set_batch_position(const BatchPosition& position) override { position_ = position; }
  bool draws_random_numbers() const override { return is_training() && config_.attention_probs_dropout_prob > 0; }

 private:
  BertConfig config_;
  Linear *query_, *key_, *value_, *attention_dense_, *intermediate_, *output_dense_;
  LayerNorm *attention_norm_, *output_norm_;
  Dropout *attention_dropout_, *output_dropout_;
  GELU* activation_;
  BatchPosition position_;
};

// BertModel: embeddings, encoder, and (with_pooler) pooler.dense + tanh over the first
// token. Output: the pooled [N, H] with the pooler, the sequence [N, T, H] without.
class BertModel : public Composite {
 public:
  BertModel(const BertConfig& config, bool with_pooler);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override { return std::make_unique<BertModel>(config_, with_pooler_); }
  bool takes_token_ids() const override { return true; }

 private:
  BertConfig config_;
  bool with_pooler_;
  BertEmbeddings* embeddings_;
  std::vector<BertLayer*> layers_;
  Linear* pooler_ = nullptr;
  Tanh* pooler_activation_ = nullptr;
  PositionIds positions_;
};

// BertForMaskedLM's cls: predictions.transform.dense, the activation,
// predictions.transform.LayerNorm, then predictions.decoder, whose weight is TIED to
// `tied_embedding` (the word embedding matrix [V, H], one slot of the flat buffer) and
// whose bias is predictions.bias. [N, T, H] -> [N, T, V].
class BertMaskedLMHead : public Composite {
 public:
  BertMaskedLMHead(const BertConfig& config, std::string tied_embedding);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;

 private:
  BertConfig config_;
  std::string tied_embedding_;
  Linear* transform_;
  GELU* activation_;
  LayerNorm* norm_;
  Tensor decoder_weight_, bias_;
};

// BertForSequenceClassification: children "bert" (pooled), "dropout" (hidden_dropout_prob),
// "classifier" (H -> num_labels), then a LogSoftmax.
std::unique_ptr<Sequential> bert_for_sequence_classification(const BertConfig& config);
// BertForMaskedLM: children "bert" (no pooler), "cls", then a LogSoftmax over the vocabulary.
std::unique_ptr<Sequential> bert_for_masked_lm(const BertConfig& config);

// The --model spec "bert(layers=2,hidden=128,heads=2,intermediate=512[,vocab=V][,max_len=512]
// [,labels=2][,types=2][,head=mlm|classification])": bert-base's defaults for the keys left
// out; errors name the key and the value.
struct BertSpec {
  BertConfig config;
  bool masked_lm = false;
};
BertSpec parse_bert_spec(const std::string& spec);

}  // namespace dpcore::layers
