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

// "simplenet", "fashioncnn", "vggs"; parameter names are PyTorch's state_dict names.
ModelDef reference_model(const std::string& name);
std::vector<std::string> reference_model_names();

// A network from a layer spec such as "conv(16,3,p1) relu pool(2) flatten linear(10)",
// for inputs of `input_shape` {C, H, W}. Layers:
//   conv(OUT,K[,sS][,pP])  pool(K[,sS][,pP])  linear(OUT)  relu  flatten  view(D1,D2,...)
//   logsoftmax
// Input channels and features are inferred from the preceding layer. A final logsoftmax
// is appended when the spec does not end in one (models end in log-probabilities).
// Children are named by index ("0.weight"), as in torch.nn.Sequential.
// Shapes are worked out layer by layer as the network is built: a layer that does not fit
// its input (a window larger than the padded input, a view that does not fit) or whose
// output would be empty fails here with a dpcore::Error naming the layer (index and text
// as written) and the input and output shapes, as PyTorch refuses such a network.
std::unique_ptr<Sequential> parse_layer_spec(const std::string& spec, const Shape& input_shape);

// A reference model's name, or a layer spec (anything containing '('): the --model flag.
ModelDef model_from_flag(const std::string& model, const Shape& input_shape);

}  // namespace dpcore::layers
