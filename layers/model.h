// Model: a Sequential network bound to one FlatParameters on one device.
//
// Building a model walks the network once with the input shape (so a layer that does not
// fit fails at construction, naming the shapes), collects the parameter slots, lays them
// out in the flat buffers and initialises them as PyTorch does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/flat_parameters.h"
#include "layers/module.h"

namespace dpcore::layers {

class Model {
 public:
  // input_shape is per sample: {C, H, W}.
  Model(std::unique_ptr<Sequential> net, Shape input_shape, Device device = Device::cpu(),
        DType dtype = DType::Float32, uint64_t seed = 0);

  // Log-probabilities [N, classes] (the network's full output).
  Tensor forward(const Tensor& x) { return net_->forward(x); }
  // The network without its final LogSoftmax, for the fused cross-entropy loss.
  // Equals forward() when the network does not end in LogSoftmax.
  Tensor forward_logits(const Tensor& x) { return net_->forward_prefix(x, logits_end_); }
  bool ends_in_log_softmax() const { return logits_end_ < net_->size(); }

  FlatParameters& parameters() { return *params_; }
  const FlatParameters& parameters() const { return *params_; }
  void zero_grad() { params_->zero_grad(); }

  // PyTorch's default initialisation (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and
  // biases) from our seeded generator, parameter by parameter in declaration order.
  void init_parameters(uint64_t seed);

  // Same network on `device`, parameters copied (one flat copy).
  std::unique_ptr<Model> replicate(Device device) const;

  const Shape& input_shape() const { return input_shape_; }
  int64_t num_classes() const { return num_classes_; }
  Device device() const { return params_->device(); }
  DType dtype() const { return params_->dtype(); }
  Sequential& net() { return *net_; }
  // One line per layer with output shapes, and the parameter count.
  std::string summary() const;

 private:
  std::unique_ptr<Sequential> net_;
  Shape input_shape_;
  int64_t num_classes_ = 0;
  size_t logits_end_ = 0;
  std::vector<ParamSlot> slots_;
  std::unique_ptr<FlatParameters> params_;
};

}  // namespace dpcore::layers
