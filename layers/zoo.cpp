#include "layers/zoo.h"

#include <cctype>
#include <sstream>

#include "layers/resnet.h"
#include "layers/transformer/encoder_layer.h"
#include "layers/transformer/mean_pool.h"
#include "layers/transformer/bert.h"

namespace dpcore::layers {

namespace {

// conv 3x3, stride 1, padding 1, with bias: the only convolution the reference models use.
std::unique_ptr<Module> conv3x3(int64_t in, int64_t out) { return std::make_unique<Conv2d>(in, out, 3, 1, 1); }
std::unique_ptr<Module> pool2() { return std::make_unique<MaxPool2d>(2, 2); }
std::unique_ptr<Module> relu() { return std::make_unique<ReLU>(); }

}  // namespace

std::vector<std::string> reference_model_names() {
  return {"simplenet", "fashioncnn", "vggs",      "resnet8",      "resnet20",     "resnet18",
          "resnet34",  "resnet50",   "bert-tiny", "bert-mini", "bert-tiny-mlm", "bert-mini-mlm"};
}

namespace {

// A BERT for token-id samples of `input_shape` {T} or {3, T} (default {128}).
ModelDef bert_model(const BertConfig& config, bool masked_lm, const Shape& input_shape) {
  Shape shape = input_shape.empty() ? Shape{128} : input_shape;
  Shape batch{1};
  batch.insert(batch.end(), shape.begin(), shape.end());
  bert_sequence_length(batch, config);
  return {masked_lm ? bert_for_masked_lm(config) : bert_for_sequence_classification(config), shape};
}

}  // namespace

ModelDef reference_model(const std::string& name, const Shape& input_shape, int64_t classes, int64_t vocab_size) {
  const bool cifar_resnet_name = name == "resnet8" || name == "resnet20";
  const bool torchvision_name = name == "resnet18" || name == "resnet34" || name == "resnet50";
  if (cifar_resnet_name || torchvision_name) {
    Shape shape = !input_shape.empty() ? input_shape : cifar_resnet_name ? Shape{1, 28, 28} : Shape{3, 224, 224};
    DPCORE_CHECK(shape.size() == 3, "model ", name, " takes images {C, H, W}, got ", shape_str(shape));
    if (cifar_resnet_name) return {cifar_resnet(name == "resnet8" ? 1 : 3, shape[0], classes), shape};
    return {torchvision_resnet(std::stoi(name.substr(6)), shape[0], classes), shape};
  }
  for (const char* size : {"bert-tiny", "bert-mini"}) {
    if (name == size || name == std::string(size) + "-mlm") {
      BertConfig config = BertConfig::preset(size);
      config.num_labels = classes;
      if (vocab_size > 0) config.vocab_size = vocab_size;
      config.check();
      return bert_model(config, name != size, input_shape);
    }
  }
  auto net = std::make_unique<Sequential>();
  if (name == "simplenet") {
    net->add("conv", conv3x3(3, 16)).add(relu()).add(pool2()).add(std::make_unique<Flatten>());
    net->add("fc", std::make_unique<Linear>(16 * 16 * 16, 10)).add(std::make_unique<LogSoftmax>());
    return {std::move(net), {3, 32, 32}};
  }
  if (name == "fashioncnn") {
    net->add("c1", conv3x3(1, 32)).add(relu()).add(pool2());
    net->add("c2", conv3x3(32, 64)).add(relu()).add(pool2()).add(std::make_unique<Flatten>());
    net->add("f1", std::make_unique<Linear>(64 * 7 * 7, 128)).add(relu());
    net->add("f2", std::make_unique<Linear>(128, 10)).add(std::make_unique<LogSoftmax>());
    return {std::move(net), {1, 28, 28}};
  }
  if (name == "vggs") {
    net->add("c1", conv3x3(3, 64)).add(relu()).add(pool2());
    net->add("c2", conv3x3(64, 128)).add(relu()).add(pool2());
    net->add("c3", conv3x3(128, 256)).add(relu()).add(pool2()).add(std::make_unique<Flatten>());
    net->add("fc", std::make_unique<Linear>(256 * 4 * 4, 10)).add(std::make_unique<LogSoftmax>());
    return {std::move(net), {3, 32, 32}};
  }
  fail("unknown model '", name, "' (expected simplenet, fashioncnn, vggs, resnet8, resnet20, resnet18, resnet34, ",
       "resnet50, bert-tiny, bert-mini, bert-tiny-mlm, bert-mini-mlm, a layer spec such as ",
       "\"conv(16,3,p1) relu pool(2) flatten linear(10)\" or bert(layers=2,hidden=128,heads=2,intermediate=512))");
}

namespace {

struct LayerToken {
  std::string name;
  std::vector<std::string> args;
  std::string text;  // as written in the spec: "pool(2, s1)"
};

std::vector<LayerToken> tokenize(const std::string& spec) {
  std::vector<LayerToken> out;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < spec.size() && std::isspace(static_cast<unsigned char>(spec[i]))) ++i;
  };
  while (true) {
    skip_space();
    if (i >= spec.size()) break;
    LayerToken t;
    size_t start = i;
    while (i < spec.size() && (std::isalnum(static_cast<unsigned char>(spec[i])) || spec[i] == '_')) t.name += spec[i++];
    DPCORE_CHECK(!t.name.empty(), "layer spec \"", spec, "\": unexpected '", spec[i], "' at position ", i);
    skip_space();
    if (i < spec.size() && spec[i] == '(') {
      size_t close = spec.find(')', i);
      DPCORE_CHECK(close != std::string::npos, "layer spec \"", spec, "\": '(' at position ", i, " is never closed");
      std::stringstream args(spec.substr(i + 1, close - i - 1));
      for (std::string a; std::getline(args, a, ',');) {
        a.erase(0, a.find_first_not_of(" \t"));
        a.erase(a.find_last_not_of(" \t") + 1);
        t.args.push_back(a);
      }
      i = close + 1;
    }
    t.text = spec.substr(start, i - start);
    out.push_back(std::move(t));
  }
  return out;
}

int64_t parse_int(const LayerToken& t, const std::string& text) {
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  DPCORE_CHECK(used == text.size() && !text.empty(), t.name, "(...) has a bad number '", text, "'");
  return v;
}

double parse_double(const LayerToken& t, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  DPCORE_CHECK(used == text.size() && !text.empty(), t.name, "(...) has a bad number '", text, "'");
  return v;
}

// encoder(heads=H[,ff=F][,dropout=P][,gelu][,norm_first][,causal]) after [N, T, E]: a
// TransformerEncoderLayer of d_model E with torch's defaults for what is not given.
std::unique_ptr<Module> encoder_layer(const LayerToken& t, const Shape& shape) {
  const char* usage = "encoder takes encoder(heads=H[,ff=F][,dropout=P][,gelu][,norm_first][,causal])";
  DPCORE_CHECK(shape.size() == 3, "encoder needs [N, T, E] input, got ", shape_str(shape));
  EncoderLayerOptions options;
  int64_t heads = 0;
  for (const std::string& a : t.args) {
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq), value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (eq == std::string::npos && key == "gelu") options.activation = "gelu";
    else if (eq == std::string::npos && key == "norm_first") options.norm_first = true;
    else if (eq == std::string::npos && key == "causal") options.causal = true;
    else if (key == "heads") heads = parse_int(t, value);
    else if (key == "ff") options.dim_feedforward = parse_int(t, value);
    else if (key == "dropout") options.dropout = parse_double(t, value);
    else fail("encoder: unknown argument '", a, "' (", usage, ")");
  }
  DPCORE_CHECK(heads > 0, "encoder: heads=H is missing (", usage, ")");
  return std::make_unique<TransformerEncoderLayer>(shape[2], heads, options);
}

// conv/pool/res arguments: positional numbers, then optional sN (stride) and pN (padding),
// and for conv the word nobias.
struct WindowArgs {
  std::vector<int64_t> positional;
  int64_t stride = -1, padding = 0;
  bool bias = true;
};
WindowArgs window_args(const LayerToken& t) {
  WindowArgs w;
  for (const std::string& a : t.args) {
    if (a == "nobias" && t.name == "conv") {
      w.bias = false;
    } else if (!a.empty() && (a[0] == 's' || a[0] == 'p')) {
      (a[0] == 's' ? w.stride : w.padding) = parse_int(t, a.substr(1));
    } else {
      w.positional.push_back(parse_int(t, a));
    }
  }
  return w;
}

// One layer from its token, for inputs of `shape` (channels and features are inferred).
std::unique_ptr<Module> make_layer(const LayerToken& t, const Shape& shape) {
  auto expect_args = [&](size_t lo, size_t hi, const char* usage) {
    DPCORE_CHECK(t.args.size() >= lo && t.args.size() <= hi, usage);
  };
  if (t.name == "conv") {
    WindowArgs w = window_args(t);
    DPCORE_CHECK(w.positional.size() == 2 && shape.size() == 4,
                 "conv takes conv(OUT,K[,sS][,pP][,nobias]) after an image-shaped input, at shape ", shape_str(shape));
    return std::make_unique<Conv2d>(shape[1], w.positional[0], w.positional[1], w.stride < 0 ? 1 : w.stride,
                                    w.padding, w.bias);
  }
  if (t.name == "pool" || t.name == "avgpool") {
    WindowArgs w = window_args(t);
    DPCORE_CHECK(w.positional.size() == 1, t.name, " takes ", t.name, "(K[,sS][,pP])");
    if (t.name == "pool") return std::make_unique<MaxPool2d>(w.positional[0], w.stride, w.padding);
    return std::make_unique<AvgPool2d>(w.positional[0], w.stride, w.padding);
  }
  if (t.name == "res") {
    WindowArgs w = window_args(t);
    DPCORE_CHECK(w.positional.size() == 1 && w.padding == 0 && shape.size() == 4,
                 "res takes res(OUT[,sS]) after an image-shaped input, at shape ", shape_str(shape));
    return std::make_unique<BasicBlock>(shape[1], w.positional[0], w.stride < 0 ? 1 : w.stride);
  }
  if (t.name == "bn") {
    expect_args(0, 0, "bn takes no arguments (its channels are the input's)");
    DPCORE_CHECK(shape.size() == 4, "bn needs an image-shaped input [N, C, H, W], got ", shape_str(shape));
    return std::make_unique<BatchNorm2d>(shape[1]);
  }
  if (t.name == "gap") {
    expect_args(0, 0, "gap takes no arguments");
    return std::make_unique<GlobalAvgPool2d>();
  }
  if (t.name == "linear") {
    expect_args(1, 1, "linear takes linear(OUT)");
    // [N, features] or per token [N, T, features]; an image-shaped input means a forgotten
    // flatten (torch.nn.Linear would silently act on the width).
    DPCORE_CHECK(shape.size() == 2 || shape.size() == 3, "linear needs [N, features] or [N, T, features] input, got ",
                 shape_str(shape), " (add flatten before it)");
    return std::make_unique<Linear>(shape.back(), parse_int(t, t.args[0]));
  }
  if (t.name == "relu") {
    expect_args(0, 0, "relu takes no arguments");
    return std::make_unique<ReLU>();
  }
  if (t.name == "flatten") {
    expect_args(0, 0, "flatten takes no arguments");
    return std::make_unique<Flatten>();
  }
  if (t.name == "view") {
    DPCORE_CHECK(!t.args.empty(), "view takes view(D1,D2,...)");
    Shape dims;
    for (const std::string& a : t.args) dims.push_back(parse_int(t, a));
    return std::make_unique<View>(dims);
  }
  if (t.name == "encoder") return encoder_layer(t, shape);
  if (t.name == "meanpool") {
    expect_args(0, 0, "meanpool takes no arguments");
    return std::make_unique<MeanPool>();
  }
  if (t.name == "logsoftmax") {
    expect_args(0, 0, "logsoftmax takes no arguments");
    return std::make_unique<LogSoftmax>();
  }
  fail("unknown layer '", t.name,
       "' (known: conv, pool, avgpool, gap, bn, res, linear, relu, flatten, view, encoder, meanpool, logsoftmax)");
}

}  // namespace

std::unique_ptr<Sequential> parse_layer_spec(const std::string& spec, const Shape& input_shape) {
  auto net = std::make_unique<Sequential>();
  Shape shape{1};
  shape.insert(shape.end(), input_shape.begin(), input_shape.end());
  for (int64_t d : input_shape) DPCORE_CHECK(d > 0, "layer spec \"", spec, "\": the input shape ", shape_str(input_shape), " is empty");
  auto tokens = tokenize(spec);
  DPCORE_CHECK(!tokens.empty(), "layer spec is empty");
  // Each layer is built and its output shape worked out at once, so that a layer that does
  // not fit (or a network that collapses its input to nothing) fails here, naming the
  // layer as written and the shapes, as PyTorch refuses it, rather than training on nothing.
  auto add = [&](std::unique_ptr<Module> layer, const std::string& label) {
    try {
      shape = checked_output_shape(*layer, shape, label);
    } catch (const Error& e) {
      fail("layer spec \"", spec, "\": ", e.what());
    }
    net->add(std::move(layer));
  };
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string label = "layer " + std::to_string(i) + " '" + tokens[i].text + "'";
    std::unique_ptr<Module> layer;
    try {
      layer = make_layer(tokens[i], shape);
    } catch (const Error& e) {
      fail("layer spec \"", spec, "\": ", label, ": ", e.what());
    }
    add(std::move(layer), label);
  }
  if (!dynamic_cast<LogSoftmax*>(&net->child(net->size() - 1))) {
    add(std::make_unique<LogSoftmax>(), "the logsoftmax appended as layer " + std::to_string(tokens.size()));
  }
  return net;
}

ModelDef model_from_flag(const std::string& model, const Shape& input_shape, int64_t classes, int64_t vocab_size) {
  if (model.find('(') == std::string::npos && model.find(' ') == std::string::npos) {
    ModelDef def = reference_model(model, input_shape, classes, vocab_size);
    DPCORE_CHECK(input_shape.empty() || def.input_shape == input_shape, "model ", model, " takes inputs ",
                 shape_str(def.input_shape), " but the data has samples of shape ", shape_str(input_shape));
    return def;
  }
  if (model.rfind("bert(", 0) == 0) {
    const BertSpec spec = parse_bert_spec(model);
    return bert_model(spec.config, spec.masked_lm, input_shape);
  }
  return {parse_layer_spec(model, input_shape), input_shape};
}

}  // namespace dpcore::layers
