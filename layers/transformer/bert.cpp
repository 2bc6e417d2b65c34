#include "layers/transformer/bert.h"

#include <cctype>
#include <map>
#include <sstream>
#include <type_traits>

#include "engine/autograd.h"
#include "layers/transformer/attention.h"

namespace dpcore::layers {

// ---------------------------------------------------------------- BertConfig
BertConfig BertConfig::preset(const std::string& name) {
  BertConfig c;
  if (name == "bert-tiny") {
    c.num_hidden_layers = 2, c.hidden_size = 128, c.num_attention_heads = 2, c.intermediate_size = 512;
  } else if (name == "bert-mini") {
    c.num_hidden_layers = 4, c.hidden_size = 256, c.num_attention_heads = 4, c.intermediate_size = 1024;
  } else {
    fail("bert: unknown preset '", name, "' (expected bert-tiny or bert-mini)");
  }
  return c;
}

void BertConfig::check() const {
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", vocab_size},           {"hidden_size", hidden_size},
      {"num_hidden_layers", num_hidden_layers}, {"num_attention_heads", num_attention_heads},
      {"intermediate_size", intermediate_size}, {"max_position_embeddings", max_position_embeddings},
      {"type_vocab_size", type_vocab_size},  {"num_labels", num_labels}};
  for (const auto& [field, value] : sizes) DPCORE_CHECK(value > 0, "bert: ", field, " = ", value, " must be positive");
  DPCORE_CHECK(hidden_size % num_attention_heads == 0, "bert: hidden_size ", hidden_size,
               " is not a multiple of num_attention_heads ", num_attention_heads);
  for (const auto& [field, p] : {std::pair<const char*, double>{"hidden_dropout_prob", hidden_dropout_prob},
                                 {"attention_probs_dropout_prob", attention_probs_dropout_prob}}) {
    DPCORE_CHECK(p >= 0 && p <= 1, "bert: ", field, " = ", p, " is outside [0, 1]");
  }
  DPCORE_CHECK(initializer_range > 0, "bert: initializer_range = ", initializer_range, " must be positive");
  DPCORE_CHECK(layer_norm_eps > 0, "bert: layer_norm_eps = ", layer_norm_eps, " must be positive");
  DPCORE_CHECK(pad_token_id >= 0 && pad_token_id < vocab_size, "bert: pad_token_id ", pad_token_id,
               " is outside the vocabulary [0, ", vocab_size, ")");
  gelu_approximate();
}

std::string BertConfig::gelu_approximate() const {
  if (hidden_act == "gelu") return "none";
  if (hidden_act == "gelu_pytorch_tanh") return "tanh";
  fail("bert: hidden_act '", hidden_act, "' is not supported (gelu or gelu_pytorch_tanh)");
}

// ---------------------------------------------------------------- inputs
int64_t bert_sequence_length(const Shape& s, const BertConfig& config) {
  const bool ids = s.size() == 2, rows = s.size() == 3 && s[1] == 3;
  DPCORE_CHECK(ids || rows, "bert: input ", shape_str(s),
               " must be int64 token ids [N, T] or [N, 3, T] (input_ids, token_type_ids, attention_mask)");
  const int64_t t = s.back();
  DPCORE_CHECK(t > 0, "bert: input ", shape_str(s), " has no tokens");
  DPCORE_CHECK(t <= config.max_position_embeddings, "bert: input ", shape_str(s), " has sequences of ", t,
               " tokens, longer than max_position_embeddings ", config.max_position_embeddings);
  return t;
}

const Tensor& PositionIds::of(int64_t n, int64_t t, Device device) {
  if (!ids_.defined() || ids_.shape() != Shape{n, t} || ids_.device() != device) {
    std::vector<int64_t> positions(size_t(n * t));
    for (size_t i = 0; i < positions.size(); ++i) positions[i] = int64_t(i % size_t(t));
    ids_ = Tensor::from_vector(positions, {n, t}, device);
  }
  return ids_;
}

namespace {

template <class F>
Tensor host_tensor(const std::vector<double>& values, const Shape& shape, Device device) {
  return Tensor::from_vector(std::vector<F>(values.begin(), values.end()), shape, device);
}

// ids != pad_token_id as 1 / 0 in `dtype` on the ids' device, without reading the ids: their
// rows in a [vocab_size, 1] table of ones with a 0 at pad_token_id. (Ids outside the
// vocabulary fail here as they would in the word embedding, naming the id.)
Tensor key_padding_mask(const Tensor& ids, const BertConfig& config, DType dtype) {
  autograd::NoGradGuard no_grad;
  const Tensor table = Tensor::full({config.vocab_size, 1}, 1.0, dtype, ids.device());
  table.narrow0(config.pad_token_id, config.pad_token_id + 1).zero_();
  return ops::reshape(ops::embedding(ids, table), ids.shape());
}

// The rows form [N, 3, T], read on the host: input_ids and token_type_ids checked and on the
// device, and the mask (undefined when nothing is padding).
void split_rows(const Tensor& x, const BertConfig& config, DType dtype, BertInputs& in) {
  const int64_t n = x.size(0), t = x.size(2);
  const Shape ids_shape{n, t};
  const std::vector<int64_t> host = x.to_vector<int64_t>();
  std::vector<int64_t> ids(size_t(n * t)), types(size_t(n * t));
  std::vector<double> mask(size_t(n * t));
  bool padded = false;
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t j = 0; j < t; ++j) {
      const size_t at = size_t(s * t + j), row = size_t(s * 3 * t + j);
      ids[at] = host[row];
      types[at] = host[row + size_t(t)];
      const int64_t m = host[row + 2 * size_t(t)];
      DPCORE_CHECK(types[at] >= 0 && types[at] < config.type_vocab_size, "bert: token_type_ids[", s, ", ", j,
                   "] = ", types[at], " is outside [0, type_vocab_size ", config.type_vocab_size, ")");
      DPCORE_CHECK(m == 0 || m == 1, "bert: attention_mask[", s, ", ", j, "] = ", m, " is neither 0 nor 1");
      mask[at] = double(m);
      padded = padded || m == 0;
    }
  }
  in.input_ids = Tensor::from_vector(ids, ids_shape, x.device());
  in.token_type_ids = Tensor::from_vector(types, ids_shape, x.device());
  if (padded) {
    in.attention_mask = dtype == DType::Float64 ? host_tensor<double>(mask, ids_shape, x.device())
                                                : host_tensor<float>(mask, ids_shape, x.device());
  }
}

}  // namespace

BertInputs bert_inputs(const Tensor& x, const BertConfig& config, DType dtype, PositionIds& positions) {
  DPCORE_CHECK(x.defined() && x.dtype() == DType::Int64, "bert: the input must be int64 token ids, got ",
               x.defined() ? x.str() : "an undefined tensor");
  const int64_t t = bert_sequence_length(x.shape(), config), n = x.size(0);
  BertInputs in;
  if (x.dim() == 2) {
    in.input_ids = x;
    in.token_type_ids = Tensor::zeros({n, t}, DType::Int64, x.device());
    in.attention_mask = key_padding_mask(x, config, dtype);
  } else {
    split_rows(x, config, dtype, in);
  }
  in.position_ids = positions.of(n, t, x.device());
  return in;
}

namespace {

std::unique_ptr<Linear> bert_linear(const BertConfig& c, int64_t in, int64_t out) {
  return std::make_unique<Linear>(in, out, Linear::Init::BertNormal, c.initializer_range);
}
std::unique_ptr<LayerNorm> bert_layer_norm(const BertConfig& c) {
  return std::make_unique<LayerNorm>(c.hidden_size, c.layer_norm_eps, /*weight_decay=*/false);
}

// Rows [0, count) of dim 0 as a new tensor; backward puts the gradient there and zeros in
// the other rows.
struct LeadingRowsBackward : autograd::Node {
  Shape input_shape;
  const char* name() const override { return "LeadingRowsBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = Tensor::zeros(input_shape, dy.dtype(), dy.device());
    dx.narrow0(0, dy.size(0)).copy_(dy);
    return {dx};
  }
};
Tensor leading_rows(const Tensor& x, int64_t count) {
  Tensor y = x.detach().narrow0(0, count).clone();
  auto node = std::make_shared<LeadingRowsBackward>();
  node->input_shape = x.shape();
  autograd::record(node, y, {x});
  return y;
}

// hidden[:, 0] of [N, T, H]: BertPooler's first token, [N, H].
Tensor first_token(const Tensor& hidden) {
  const int64_t n = hidden.size(0), h = hidden.size(2);
  return ops::reshape(leading_rows(ops::transpose(hidden, 0, 1), 1), {n, h});
}

}  // namespace

// ---------------------------------------------------------------- BertEmbeddings
BertEmbeddings::BertEmbeddings(const BertConfig& config) : config_(config) {
  config_.check();
  const BertConfig& c = config_;
  word_ = &add_child("word_embeddings", std::make_unique<Embedding>(c.vocab_size, c.hidden_size, c.pad_token_id,
                                                                      c.initializer_range));
  position_ = &add_child("position_embeddings", std::make_unique<Embedding>(c.max_position_embeddings, c.hidden_size,
                                                                              std::nullopt, c.initializer_range));
  token_type_ = &add_child("token_type_embeddings", std::make_unique<Embedding>(c.type_vocab_size, c.hidden_size,
                                                                                  std::nullopt, c.initializer_range));
  norm_ = &add_child("LayerNorm", bert_layer_norm(c));
  dropout_ = &add_child("dropout", std::make_unique<Dropout>(c.hidden_dropout_prob));
}

Tensor BertEmbeddings::forward(const Tensor& x) { return forward(bert_inputs(x, config_, dtype(), positions_)); }

Tensor BertEmbeddings::forward(const BertInputs& in) {
  // Hugging Face's order: (words + token types) + positions.
  Tensor e = ops::add(ops::add(word_->forward(in.input_ids), token_type_->forward(in.token_type_ids)),
                      position_->forward(in.position_ids));
  return dropout_->forward(norm_->forward(e));
}

Shape BertEmbeddings::output_shape(const Shape& input) const {
  const int64_t t = bert_sequence_length(input, config_);
  return {input[0], t, config_.hidden_size};
}

std::string BertEmbeddings::describe() const {
  std::ostringstream os;
  os << "bert_embeddings(" << config_.vocab_size << "x" << config_.hidden_size << ", positions "
     << config_.max_position_embeddings << ", types " << config_.type_vocab_size << ")";
  return os.str();
}

// ---------------------------------------------------------------- BertLayer
BertLayer::BertLayer(const BertConfig& config) : config_(config) {
  config_.check();
  const BertConfig& c = config_;
  const int64_t h = c.hidden_size;
  query_ = &add_child("attention.self.query", bert_linear(c, h, h));
  key_ = &add_child("attention.self.key", bert_linear(c, h, h));
  value_ = &add_child("attention.self.value", bert_linear(c, h, h));
  attention_dense_ = &add_child("attention.output.dense", bert_linear(c, h, h));
  attention_norm_ = &add_child("attention.output.LayerNorm", bert_layer_norm(c));
  attention_dropout_ = &add_child("attention.output.dropout", std::make_unique<Dropout>(c.hidden_dropout_prob));
  intermediate_ = &add_child("intermediate.dense", bert_linear(c, h, c.intermediate_size));
  activation_ = &add_child("intermediate.intermediate_act_fn", std::make_unique<GELU>(c.gelu_approximate()));
  output_dense_ = &add_child("output.dense", bert_linear(c, c.intermediate_size, h));
  output_norm_ = &add_child("output.LayerNorm", bert_layer_norm(c));
  output_dropout_ = &add_child("output.dropout", std::make_unique<Dropout>(c.hidden_dropout_prob));
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& key_padding_mask) {
  const int64_t heads = config_.num_attention_heads;
  const Tensor q = split_heads(query_->forward(x), heads), k = split_heads(key_->forward(x), heads),
               v = split_heads(value_->forward(x), heads);
  const AttentionDropout probs_dropout{config_.attention_probs_dropout_prob, is_training(), position_};
  const Tensor context = merge_heads(attention(q, k, v, key_padding_mask, probs_dropout));
  const Tensor a = attention_norm_->forward(ops::add(attention_dropout_->forward(attention_dense_->forward(context)), x));
  const Tensor i = activation_->forward(intermediate_->forward(a));
  return output_norm_->forward(ops::add(output_dropout_->forward(output_dense_->forward(i)), a));
}

Shape BertLayer::output_shape(const Shape& input) const {
  DPCORE_CHECK(input.size() == 3 && input[2] == config_.hidden_size, "bert_layer: input ", shape_str(input),
               " is not [N, T, ", config_.hidden_size, "]");
  return input;
}

std::string BertLayer::describe() const {
  std::ostringstream os;
  os << "bert_layer(hidden " << config_.hidden_size << ", " << config_.num_attention_heads << " heads, intermediate "
     << config_.intermediate_size << ")";
  return os.str();
}

// ---------------------------------------------------------------- BertModel
BertModel::BertModel(const BertConfig& config, bool with_pooler) : config_(config), with_pooler_(with_pooler) {
  config_.check();
  embeddings_ = &add_child("embeddings", std::make_unique<BertEmbeddings>(config_));
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    layers_.push_back(&add_child("encoder.layer." + std::to_string(i), std::make_unique<BertLayer>(config_)));
  }
  if (with_pooler_) {
    pooler_ = &add_child("pooler.dense", bert_linear(config_, config_.hidden_size, config_.hidden_size));
    pooler_activation_ = &add_child("pooler.activation", std::make_unique<Tanh>());
  }
}

Tensor BertModel::forward(const Tensor& x) {
  const BertInputs in = bert_inputs(x, config_, embeddings_->dtype(), positions_);
  Tensor h = embeddings_->forward(in);
  for (BertLayer* layer : layers_) h = layer->forward(h, in.attention_mask);
  if (!with_pooler_) return h;
  return pooler_activation_->forward(pooler_->forward(first_token(h)));
}

Shape BertModel::output_shape(const Shape& input) const {
  const int64_t t = bert_sequence_length(input, config_);
  if (with_pooler_) return {input[0], config_.hidden_size};
  return {input[0], t, config_.hidden_size};
}

std::string BertModel::describe() const {
  std::ostringstream os;
  os << "bert(" << config_.num_hidden_layers << " layers, hidden " << config_.hidden_size << ", "
     << config_.num_attention_heads << " heads, intermediate " << config_.intermediate_size << ", vocab "
     << config_.vocab_size << (with_pooler_ ? ", pooled" : "") << ")";
  return os.str();
}

// ---------------------------------------------------------------- BertMaskedLMHead
BertMaskedLMHead::BertMaskedLMHead(const BertConfig& config, std::string tied_embedding)
    : config_(config), tied_embedding_(std::move(tied_embedding)) {
  config_.check();
  transform_ = &add_child("predictions.transform.dense", bert_linear(config_, config_.hidden_size, config_.hidden_size));
  activation_ = &add_child("predictions.transform.transform_act_fn", std::make_unique<GELU>(config_.gelu_approximate()));
  norm_ = &add_child("predictions.transform.LayerNorm", bert_layer_norm(config_));
}

Tensor BertMaskedLMHead::forward(const Tensor& x) {
  const Tensor h = norm_->forward(activation_->forward(transform_->forward(x)));
  return ops::linear(h, decoder_weight_, bias_);
}

Shape BertMaskedLMHead::output_shape(const Shape& input) const {
  DPCORE_CHECK(input.size() >= 2 && input.back() == config_.hidden_size, "bert_mlm_head: input ", shape_str(input),
               " does not end in the hidden size ", config_.hidden_size);
  Shape out = input;
  out.back() = config_.vocab_size;
  return out;
}

std::string BertMaskedLMHead::describe() const {
  std::ostringstream os;
  os << "bert_mlm_head(" << config_.hidden_size << "->" << config_.vocab_size << ", decoder tied to "
     << tied_embedding_ << ")";
  return os.str();
}

std::unique_ptr<Module> BertMaskedLMHead::clone() const {
  return std::make_unique<BertMaskedLMHead>(config_, tied_embedding_);
}

void BertMaskedLMHead::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  ParamSlot bias{qualified_name(prefix, "predictions.bias"), {config_.vocab_size}, ParamInit::constant(0.0), &bias_};
  bias.weight_decay = false;
  bias.autocast_operand = true;  // the decoder's; its weight is the (float32) word embedding's, cast in the op
  out.push_back(bias);
  Composite::collect_parameters(prefix, out);
  ParamSlot decoder{qualified_name(prefix, "predictions.decoder.weight"), {config_.vocab_size, config_.hidden_size},
                    ParamInit::normal(config_.initializer_range), &decoder_weight_};
  decoder.tied_to = tied_embedding_;
  out.push_back(decoder);
}

// ---------------------------------------------------------------- the two models
std::unique_ptr<Sequential> bert_for_sequence_classification(const BertConfig& config) {
  auto net = std::make_unique<Sequential>();
  net->add("bert", std::make_unique<BertModel>(config, /*with_pooler=*/true));
  net->add("dropout", std::make_unique<Dropout>(config.hidden_dropout_prob));
  net->add("classifier", bert_linear(config, config.hidden_size, config.num_labels));
  net->add("log_softmax", std::make_unique<LogSoftmax>());
  return net;
}

std::unique_ptr<Sequential> bert_for_masked_lm(const BertConfig& config) {
  auto net = std::make_unique<Sequential>();
  net->add("bert", std::make_unique<BertModel>(config, /*with_pooler=*/false));
  net->add("cls", std::make_unique<BertMaskedLMHead>(config, "bert.embeddings.word_embeddings.weight"));
  net->add("log_softmax", std::make_unique<LogSoftmax>());
  return net;
}

// ---------------------------------------------------------------- the spec
BertSpec parse_bert_spec(const std::string& spec) {
  const std::string usage =
      "bert(layers=L,hidden=H,heads=A,intermediate=I[,vocab=V][,max_len=P][,types=K][,labels=C][,dropout=p]"
      "[,head=classification|mlm])";
  DPCORE_CHECK(spec.rfind("bert(", 0) == 0 && spec.back() == ')', "model spec \"", spec, "\" is not ", usage);
  std::map<std::string, std::string> values;
  std::stringstream args(spec.substr(5, spec.size() - 6));
  for (std::string item; std::getline(args, item, ',');) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    const size_t eq = item.find('=');
    DPCORE_CHECK(eq != std::string::npos && eq > 0, "model spec \"", spec, "\": '", item, "' is not key=value (",
                 usage, ")");
    const std::string key = item.substr(0, eq);
    DPCORE_CHECK(values.emplace(key, item.substr(eq + 1)).second, "model spec \"", spec, "\": key '", key,
                 "' is given twice");
  }
  BertSpec out;
  BertConfig& c = out.config;
  auto number = [&](const std::string& key, auto& field, bool required) {
    auto it = values.find(key);
    if (it == values.end()) {
      DPCORE_CHECK(!required, "model spec \"", spec, "\": key '", key, "' is missing (", usage, ")");
      return;
    }
    size_t used = 0;
    try {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, double>) field = std::stod(it->second, &used);
      else field = std::stoll(it->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DPCORE_CHECK(used == it->second.size() && used > 0, "model spec \"", spec, "\": ", key, "=", it->second,
                 " is not a number");
    values.erase(it);
  };
  number("layers", c.num_hidden_layers, true);
  number("hidden", c.hidden_size, true);
  number("heads", c.num_attention_heads, true);
  number("intermediate", c.intermediate_size, true);
  number("vocab", c.vocab_size, false);
  number("max_len", c.max_position_embeddings, false);
  number("types", c.type_vocab_size, false);
  number("labels", c.num_labels, false);
  double dropout = c.hidden_dropout_prob;
  number("dropout", dropout, false);
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = dropout;
  if (auto it = values.find("head"); it != values.end()) {
    DPCORE_CHECK(it->second == "mlm" || it->second == "classification", "model spec \"", spec, "\": head=",
                 it->second, " is neither classification nor mlm");
    out.masked_lm = it->second == "mlm";
    values.erase(it);
  }
  DPCORE_CHECK(values.empty(), "model spec \"", spec, "\": unknown key '", values.begin()->first, "' (", usage, ")");
  try {
    c.check();
  } catch (const Error& e) {
    fail("model spec \"", spec, "\": ", e.what());
  }
  return out;
}

}  // namespace dpcore::layers
