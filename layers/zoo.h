// The reference models (../shared/reference/models.md) and the layer-spec language.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/model.h"

namespace dpcore::layers {

struct ModelDef {
  std::unique_ptr<Sequential> net;
  Shape input_shape;  // {C, H, W}
};

// "simplenet", "fashioncnn", "vggs" (fixed input shapes, 10 classes), the CIFAR ResNets
// "resnet8" and "resnet20", and torchvision's ImageNet ResNets "resnet18", "resnet34" and
// "resnet50" (layers/resnet.h). The ResNets are built for `input_shape` {C, H, W}, the
// data's (default {1, 28, 28}, Fashion-MNIST, for the CIFAR ResNets; {3, 224, 224} for
// torchvision's), and `classes` outputs, the data's. Parameter names are PyTorch's
// state_dict names (torchvision's for the ResNets).
// "bert-tiny", "bert-mini" (BertForSequenceClassification with `classes` labels, the
// data's) and "bert-tiny-mlm", "bert-mini-mlm" (BertForMaskedLM) take token-id samples {T}
// or {3, T} (default {128}; layers/transformer/bert.h), over a vocabulary of `vocab_size`
// tokens (the data's; 0: BERT's 30522).
ModelDef reference_model(const std::string& name, const Shape& input_shape = {}, int64_t classes = 10,
                         int64_t vocab_size = 0);
std::vector<std::string> reference_model_names();

// A network from a layer spec such as "conv(16,3,p1) relu pool(2) flatten linear(10)",
// for inputs of `input_shape` {C, H, W}. Layers:
//   conv(OUT,K[,sS][,pP][,nobias])  pool(K[,sS][,pP])  avgpool(K[,sS][,pP])  gap
//   bn  res(OUT[,sS])  linear(OUT)  relu  flatten  view(D1,D2,...)  logsoftmax
// pool is max pooling, avgpool average pooling (count_include_pad), gap global average
// pooling ([N,C,H,W] -> [N,C,1,1]), bn batch norm over the channels (BatchNorm2d), res a
// residual BasicBlock (layers/resnet.h) to OUT channels with stride S (default 1), whose
// shortcut is a 1x1 convolution + batch norm when the shape changes. For example resnet8
// on Fashion-MNIST is
//   "conv(16,3,p1,nobias) bn relu res(16) res(32,s2) res(64,s2) gap flatten linear(10)"
// On sequences [N, T, E] (input_shape {T, E}):
//   encoder(heads=H[,ff=F][,dropout=P][,gelu][,norm_first][,causal])  meanpool
// encoder is a torch.nn.TransformerEncoderLayer of d_model E (layers/transformer/
// encoder_layer.h) with torch's defaults (ff 2048, dropout 0.1, relu, post-norm) for what
// is not given, unmasked (every token attended; causal: each token sees those before it);
// meanpool the mean over the tokens, [N, T, E] -> [N, E]. A pooled classifier on 16
// features per token is "encoder(heads=4,ff=64) encoder(heads=4,ff=64) meanpool linear(10)".
// Input channels and features are inferred from the preceding layer. A final logsoftmax
// is appended when the spec does not end in one (models end in log-probabilities).
// Children are named by index ("0.weight", "3.conv1.weight"), as in torch.nn.Sequential.
// Shapes are worked out layer by layer as the network is built: a layer that does not fit
// its input (a window larger than the padded input, a view that does not fit) or whose
// output would be empty fails here with a dpcore::Error naming the layer (index and text
// as written) and the input and output shapes, as PyTorch refuses such a network.
std::unique_ptr<Sequential> parse_layer_spec(const std::string& spec, const Shape& input_shape);

// A reference model's name, a BERT spec "bert(layers=...,hidden=...,heads=...,intermediate=...)"
// (parse_bert_spec, layers/transformer/bert.h), or a layer spec (anything else containing
// '('): the --model flag. `classes` and `vocab_size` go to the reference models
// (reference_model); a layer spec and a BERT spec say their own.
ModelDef model_from_flag(const std::string& model, const Shape& input_shape, int64_t classes = 10,
                         int64_t vocab_size = 0);

}  // namespace dpcore::layers
