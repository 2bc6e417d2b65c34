// Model: a Sequential network bound to one FlatParameters (and one FlatBuffers for its
// batch norms' running statistics) on one device.
//
// Building a model walks the network once with the input shape (so a layer that does not
// fit fails at construction, naming the shapes), collects the parameter and buffer slots,
// lays them out in the flat buffers and initialises them as PyTorch does. A model starts
// in training mode; evaluation runs in eval mode (train/step/step.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/flat_buffers.h"
#include "engine/flat_parameters.h"
#include "engine/low_precision_parameters.h"
#include "layers/module.h"

namespace dpcore::layers {

class Model {
 public:
  // input_shape is per sample: {C, H, W} for images, {T} for token ids, any non-empty
  // shape the first layer takes. The network's output is [N, classes] or, per token,
  // [N, T, classes]. `seed` initialises the parameters and keys the model's random streams
  // (dropout: set_batch_position).
  Model(std::unique_ptr<Sequential> net, Shape input_shape, Device device = Device::cpu(),
        DType dtype = DType::Float32, uint64_t seed = 0);

  // Log-probabilities [N, classes] or [N, ..., classes] (the network's full output), under
  // the model's precision (set_precision).
  Tensor forward(const Tensor& x);
  // The network without its final LogSoftmax, for the fused cross-entropy loss.
  // Equals forward() when the network does not end in LogSoftmax.
  Tensor forward_logits(const Tensor& x);
  bool ends_in_log_softmax() const { return logits_end_ < net_->size(); }
  // The top-level layers [first_layer, end_layer) as forward() runs them: a pipeline stage's
  // part of it (train/pipeline). Under a 16-bit precision it opens the same autocast and
  // binds only these layers' autocast operands to the 16-bit copy, so stages running their
  // ranges on threads of their own each touch parameters of their own. A range that ends
  // where forward() or forward_logits() ends hands on float32, as they do; any other hands
  // on the activations as forward() has them there (16-bit after an autocast op), for the
  // next stage to take as they are.
  Tensor forward_layers(const Tensor& x, size_t first_layer, size_t end_layer);
  // The dtype each top-level layer hands on, as forward_layers() runs it, for an input of
  // dtype `input` (the model's, or int64 token ids): what a pipeline stage receives from the
  // one below (16-bit after an autocast op, float32 after a norm of a float32 input, ...).
  // Found by running one sample of zeros through the layers one by one, in eval mode and
  // without a graph (so nothing the model keeps moves), charged to no memory account, and
  // kept until the precision changes.
  const std::vector<DType>& layer_output_dtypes(DType input);

  FlatParameters& parameters() { return *params_; }
  const FlatParameters& parameters() const { return *params_; }
  FlatBuffers& buffers() { return *buffers_; }
  const FlatBuffers& buffers() const { return *buffers_; }
  // The start of a step: the gradients zeroed and, under a 16-bit precision, the 16-bit
  // copy of the parameters refreshed from the master weights the previous step updated
  // (every runner zeroes once per step, before its first micro-batch and after whatever
  // changed the parameters: the optimizer, a broadcast, a loaded checkpoint).
  void zero_grad();

  // Mixed precision (--precision, docs/mixed-precision.md): Float32 (the default) computes
  // everything in float32; BFloat16 or Float16 run forward() and forward_logits() under
  // autocast (engine/autocast.h) and, when they record a graph, take the parameters of the
  // autocast ops (ParamSlot::autocast_operand) from one 16-bit copy of the flat parameters
  // (engine/low_precision_parameters.h), refreshed by zero_grad(). The parameters, their
  // gradients and the optimizer state stay float32; the activations between the ops are
  // 16-bit, as under torch.autocast, and the output is widened to float32 as it leaves the
  // model (PyTorch hands on the 16-bit output). A forward that records nothing
  // (evaluation) casts the float32 parameters in each op instead, so it never reads a copy
  // older than the parameters. Fails unless the model is float32 (float64 has no autocast).
  void set_precision(DType precision);
  DType precision() const { return precision_; }
  // The 16-bit copy under a 16-bit precision; null under Float32.
  const LowPrecisionParameters* low_precision_parameters() const { return low_.get(); }

  // torch.nn.Module.train() / eval(): batch norm normalises with the batch's statistics
  // (and updates the running ones) in training mode, with the running ones in eval mode.
  void train(bool on = true) { net_->train(on); }
  void eval() { net_->eval(); }
  bool is_training() const { return net_->is_training(); }
  // Synchronises every batch norm over `group` in training mode (null: each replica's own
  // statistics, the default).
  void set_batch_norm_group(ops::BatchNormGroup* group);
  // The same for the batch norms in the top-level layers [first_layer, end_layer) only (a
  // pipeline stage's, synchronised over that stage's replicas).
  void set_batch_norm_group(ops::BatchNormGroup* group, size_t first_layer, size_t end_layer);
  bool has_batch_norm() const { return !buffers_->empty(); }

  // Each parameter as its slot says (PyTorch's default U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  // for convolutions and linear layers, torchvision's kaiming normal for ResNet
  // convolutions, constants for batch norm) from our seeded generator, parameter by
  // parameter in declaration order; the buffers back to their initial values.
  void init_parameters(uint64_t seed);

  // Before each micro-batch's forward: the training step and the global index of the
  // micro-batch's first sample, handed to every module with its own stream key (a mix of
  // the model's seed and the module's place in the network), so dropout draws the same
  // masks however the batch is split and on resume (layers/module.h, BatchPosition).
  void set_batch_position(uint64_t step, int64_t first_sample);
  // The same for the layers (top-level children) [first_layer, end_layer) only, each module
  // drawing what it draws under set_batch_position: a pipeline stage sets its own layers
  // while the other stages' threads run theirs.
  void set_batch_position(uint64_t step, int64_t first_sample, size_t first_layer, size_t end_layer);
  // Whether a forward now draws random numbers (a module's dropout in training mode): its
  // result then depends on the batch position, which a recorded CUDA graph would hold fixed.
  bool draws_random_numbers() const;
  // The parameters tied to another (ParamSlot::tied_to), which the flat layout holds once:
  // {name, the name of the parameter it uses}.
  const std::vector<std::pair<std::string, std::string>>& tied_names() const { return tied_names_; }
  // Whether the model takes int64 token ids (its first layer is an embedding).
  bool takes_token_ids() const { return net_->takes_token_ids(); }

  // Same network on `device`, parameters and buffers copied (one flat copy each), in the
  // same mode.
  std::unique_ptr<Model> replicate(Device device) const;

  const Shape& input_shape() const { return input_shape_; }
  // The output of one sample: {classes}, or {T, classes} for a per-token output.
  const Shape& output_shape() const { return output_shape_; }
  int64_t num_classes() const { return num_classes_; }
  uint64_t seed() const { return seed_; }
  Device device() const { return params_->device(); }
  DType dtype() const { return params_->dtype(); }
  Sequential& net() { return *net_; }
  // One line per layer with output shapes, and the parameter (and buffer) count.
  std::string summary() const;

 private:
  std::unique_ptr<Sequential> net_;
  Shape input_shape_;
  Shape output_shape_;
  int64_t num_classes_ = 0;
  uint64_t seed_ = 0;
  size_t logits_end_ = 0;
  // Binds each slot tied to another (ParamSlot::tied_to) to that one's parameter.
  void bind_tied_slots(const std::vector<ParamSlot>& tied_slots);

  std::vector<ParamSlot> slots_;  // one per parameter of the flat layout (tied slots are not)
  // Layer i's parameters are slots_[layer_slots_[i], layer_slots_[i + 1]).
  std::vector<size_t> layer_slots_;
  std::vector<std::pair<std::string, std::string>> tied_names_;
  std::unique_ptr<FlatParameters> params_;
  std::unique_ptr<FlatBuffers> buffers_;
  DType precision_ = DType::Float32;
  std::unique_ptr<LowPrecisionParameters> low_;  // set_precision's 16-bit copy
  // layer_output_dtypes' answer, for the input dtype it was found for (none yet: nullopt).
  std::vector<DType> layer_output_dtypes_;
  std::optional<DType> layer_output_dtypes_input_;
  // f() (a forward of the layers [first_layer, end_layer)) under the precision: autocast,
  // and those layers' autocast operands bound to the copy. Its output as f() gives it.
  Tensor under_precision(const std::function<Tensor()>& f, size_t first_layer, size_t end_layer);
  // A forward's output as it leaves the model: widened to float32 (exactly) under a 16-bit
  // precision, so the losses, metrics and whatever reads it see the dtype of the model.
  Tensor leaving_model(const Tensor& out) const;
};

}  // namespace dpcore::layers
