// Modules: the building blocks a model is written in, mirroring torch.nn.
//
// A module does not own parameter memory. It declares parameter slots (name, shape,
// initialisation) and buffer slots (batch norm's running statistics); the Model
// (layers/model.h) lays all parameter slots out in one FlatParameters, all buffer slots in
// one FlatBuffers, and points each slot at its view. That is what lets the whole model
// step, zero and allreduce as three flat buffers, and replicate its buffers as one.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/ops.h"
#include "engine/tensor.h"

namespace dpcore::layers {

// How a parameter starts (Model::init_parameters draws them from the model's seed).
struct ParamInit {
  enum class Kind { Uniform, Normal, Constant };
  Kind kind = Kind::Uniform;
  double value = 0;  // Uniform: U(-value, value); Normal: N(0, value^2); Constant: value
  // A row (index along dim 0) set to 0 after the whole tensor is drawn: an embedding's
  // padding_idx, as torch.nn.Embedding initialises it. -1: none.
  int64_t zero_row = -1;

  // PyTorch's default for convolutions and linear layers (weights and biases alike):
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  static ParamInit pytorch_default(int64_t fan_in);
  // torchvision's ResNet convolutions: kaiming_normal_(mode="fan_out", nonlinearity="relu"),
  // N(0, 2 / fan_out).
  static ParamInit kaiming_normal_fan_out(int64_t fan_out);
  static ParamInit constant(double value) { return {Kind::Constant, value}; }
  static ParamInit normal(double std) { return {Kind::Normal, std}; }
};

struct ParamSlot {
  std::string name;  // full state_dict name, e.g. "c1.weight"
  Shape shape;
  ParamInit init;
  Tensor* tensor = nullptr;
  // Whether the optimizer's weight decay applies (engine/flat_parameters.h, ParamSpec).
  bool weight_decay = true;
  // Non-empty: this slot is the parameter of that full state_dict name, used a second time
  // (BERT's masked-LM decoder is the word embedding matrix): the Model lays the parameter
  // out once and binds both slots to the same leaf, so its gradient is the sum of both
  // uses. A tied slot's own init and weight_decay are not used (the owner's are).
  std::string tied_to = {};
  // The parameter is an operand of an op autocast computes in 16 bits (a convolution's or a
  // linear layer's weight and bias, engine/autocast.h): under Model::set_precision a
  // training forward takes it from the model's 16-bit copy (engine/low_precision_parameters.h),
  // refreshed once per step, instead of casting it in the op. The parameters of other ops
  // (norms, embeddings) stay float32, as autocast leaves them.
  bool autocast_operand = false;
};
// Marks out[first, end) autocast operands: what a module's collect_parameters calls after
// pushing the slots of its convolutions or linear maps.
void mark_autocast_operands(std::vector<ParamSlot>& out, size_t first);

// "layer1.0" + "conv1" -> "layer1.0.conv1"; "" + "conv1" -> "conv1" (state_dict names).
std::string qualified_name(const std::string& prefix, const std::string& name);

// A buffer: model state that is not a parameter (engine/flat_buffers.h).
struct BufferSlot {
  std::string name;  // full state_dict name, e.g. "bn1.running_mean"
  Shape shape;
  double initial = 0;
  bool counter = false;  // int64 in files
  Tensor* tensor = nullptr;
};

// Where a forward pass stands in training, for counter-based randomness (dropout,
// kernels/dropout_config.h): the key of this module's stream, the training step, and the
// global index of the micro-batch's first sample. Runners set it (Model::set_batch_position)
// before each micro-batch, so the bits drawn depend on none of: the thread count, how the
// batch is split over micro-batches and replicas, or whether the run was resumed.
struct BatchPosition {
  uint64_t seed = 0;
  uint64_t step = 0;
  int64_t first_sample = 0;
};

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  // The output shape for an input shape (batch included), failing with a message that
  // names the shapes when they don't fit (a window larger than its padded input, features
  // or channels that do not match, a view that does not fit); Sequential adds which layer.
  // Used to check a model when it is built, before any data flows.
  virtual Shape output_shape(const Shape& input) const = 0;
  // A short description: "conv(3->16, k3, s1, p1)".
  virtual std::string describe() const = 0;
  // A copy of the structure with unbound parameters (for replicas on other devices).
  virtual std::unique_ptr<Module> clone() const = 0;
  // Modules without parameters (relu, pooling, flatten, ...) add nothing.
  virtual void collect_parameters(const std::string& /*prefix*/, std::vector<ParamSlot>& /*out*/) {}
  // Only batch norm has buffers.
  virtual void collect_buffers(const std::string& /*prefix*/, std::vector<BufferSlot>& /*out*/) {}
  // f on this module, then on every module inside it (torch.nn.Module.apply).
  virtual void apply(const std::function<void(Module&)>& f) { f(*this); }
  // Whether the input is int64 token ids ([N, T], an embedding first) rather than float
  // values ([N, C, H, W], [N, features], ...).
  virtual bool takes_token_ids() const { return false; }
  // Only modules that draw random numbers (dropout) use it; Model::set_batch_position
  // gives each module its own stream key.
  virtual void set_batch_position(const BatchPosition& /*position*/) {}
  // Whether this module's own forward draws random numbers now (dropout with p > 0 in
  // training mode); Model::draws_random_numbers asks every module.
  virtual bool draws_random_numbers() const { return false; }

  // Training or evaluation mode, for this module and every module inside it
  // (torch.nn.Module.train / eval). Only batch norm behaves differently. Modules start in
  // training mode.
  void train(bool on = true) {
    apply([on](Module& m) { m.training_ = on; });
  }
  void eval() { train(false); }
  bool is_training() const { return training_; }

 private:
  bool training_ = true;
};

class Conv2d : public Module {
 public:
  enum class Init { PyTorchDefault, KaimingNormalFanOut };  // the weight's; a bias is always PyTorch's
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = true, Init init = Init::PyTorchDefault);
  Tensor forward(const Tensor& x) override;
  // This convolution followed by relu (and a max-pool), as one fused op (engine/ops.h).
  Tensor forward_relu(const Tensor& x);
  Tensor forward_relu_pool(const Tensor& x, const ops::Pool2dOptions& pool);
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;

 private:
  int64_t in_, out_, kernel_, stride_, padding_;
  bool has_bias_;
  Init init_;
  Tensor weight_, bias_;  // bias_ stays undefined without a bias
};

class Linear : public Module {
 public:
  // How the weight and the bias start: PyTorch's default (both U(-1/sqrt(in), 1/sqrt(in))),
  // or Hugging Face BERT's _init_weights (weight N(0, init_std^2), bias 0), whose bias is
  // also left out of weight decay (BERT's convention).
  enum class Init { PyTorchDefault, BertNormal };
  Linear(int64_t in_features, int64_t out_features, Init init = Init::PyTorchDefault, double init_std = 0.02);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;

 private:
  int64_t in_, out_;
  Init init_;
  double init_std_;
  Tensor weight_, bias_;
};

// What max and average pooling share: a square window with its stride and padding
// (max_pool2d's rules, checked when the module is built), shapes and description.
class Pool2d : public Module {
 public:
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;  // "pool(k2, s2, p0)", "avgpool(k3, s1, p1)"
  const ops::Pool2dOptions& options() const { return opt_; }

 protected:
  Pool2d(const char* name, int64_t kernel, int64_t stride /* < 0: = kernel */, int64_t padding);
  const char* name_;
  ops::Pool2dOptions opt_;
};

class MaxPool2d : public Pool2d {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = -1 /* = kernel */, int64_t padding = 0)
      : Pool2d("pool", kernel, stride, padding) {}
  Tensor forward(const Tensor& x) override { return ops::max_pool2d(x, opt_); }
  std::unique_ptr<Module> clone() const override {
    return std::make_unique<MaxPool2d>(opt_.kernel_h, opt_.stride_h, opt_.pad_h);
  }
};

// Average pooling (count_include_pad, PyTorch's default).
class AvgPool2d : public Pool2d {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = -1 /* = kernel */, int64_t padding = 0)
      : Pool2d("avgpool", kernel, stride, padding) {}
  Tensor forward(const Tensor& x) override { return ops::avg_pool2d(x, opt_); }
  std::unique_ptr<Module> clone() const override {
    return std::make_unique<AvgPool2d>(opt_.kernel_h, opt_.stride_h, opt_.pad_h);
  }
};

// [N, C, H, W] -> [N, C, 1, 1], each plane's mean: torch.nn.AdaptiveAvgPool2d(1).
class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override { return ops::global_avg_pool2d(x); }
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override { return "avgpool(global)"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<GlobalAvgPool2d>(); }
};

// torch.nn.BatchNorm2d(channels, eps, momentum), affine, with running statistics: in
// training mode it normalises with the batch's statistics and updates running_mean,
// running_var and num_batches_tracked; in eval mode it normalises with the running ones.
// The weight starts at 1, the bias at 0, the running mean at 0 and the variance at 1.
// With a group (set_group, for --batchnorm sync) training mode is synchronised over the
// group's replicas (ops::batch_norm2d).
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;
  void collect_buffers(const std::string& prefix, std::vector<BufferSlot>& out) override;
  void set_group(ops::BatchNormGroup* group) { group_ = group; }

 private:
  int64_t channels_;
  double eps_, momentum_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
  Tensor one_;  // the constant 1 that counts a batch, on the buffers' device
  ops::BatchNormGroup* group_ = nullptr;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return ops::relu(x); }
  Shape output_shape(const Shape& input) const override { return input; }
  std::string describe() const override { return "relu"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<ReLU>(); }
};

// [N, ...] -> [N, prod(...)], as torch.nn.Flatten().
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return ops::flatten(x); }
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override { return "flatten"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<Flatten>(); }
};

// x.view(shape) where shape[0] is usually -1 (the batch). The -1 must resolve to the
// input's batch size: see ops::reshape.
class View : public Module {
 public:
  explicit View(Shape shape) : shape_(std::move(shape)) {}
  Tensor forward(const Tensor& x) override { return ops::reshape(x, shape_); }
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override { return std::make_unique<View>(shape_); }

 private:
  Shape shape_;
};

// Over the last dim of [N, classes] or [N, ..., classes] (torch.nn.LogSoftmax(dim=-1)).
class LogSoftmax : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override { return "log_softmax"; }
  std::unique_ptr<Module> clone() const override { return std::make_unique<LogSoftmax>(); }
};

// Children run in order; each has a name that prefixes its parameters ("c1" -> "c1.weight").
class Sequential : public Module {
 public:
  Sequential& add(std::string name, std::unique_ptr<Module> module);
  // Unnamed children are named by their index, as in torch.nn.Sequential.
  Sequential& add(std::unique_ptr<Module> module);

  Tensor forward(const Tensor& x) override;
  // Runs children [0, count) only (the trainer stops before the final LogSoftmax to use the
  // fused cross-entropy). A conv followed by relu (and a max-pool) runs as one fused op:
  // the same mathematics in fewer passes (engine/ops.h, conv2d_relu_max_pool2d).
  Tensor forward_prefix(const Tensor& x, size_t count) { return forward_range(x, 0, count); }
  // Runs children [begin, end) only: a pipeline stage's layers (train/pipeline).
  Tensor forward_range(const Tensor& x, size_t begin, size_t end);
  // How many children from i (of those before `end`) forward_range runs as one op: 3 for a
  // conv, relu and max-pool, 2 for a conv and relu, else 1.
  size_t fused_span(size_t i, size_t end) const;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;
  void collect_buffers(const std::string& prefix, std::vector<BufferSlot>& out) override;
  void apply(const std::function<void(Module&)>& f) override;
  // The first child's.
  bool takes_token_ids() const override;

  // "layer 3 'c2' (conv(32->64, k3, s1, p1))": how shape errors name child i.
  std::string layer_label(size_t i) const;

  size_t size() const { return children_.size(); }
  Module& child(size_t i) const { return *children_[i].second; }
  const std::string& child_name(size_t i) const { return children_[i].first; }

 private:
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

// layer.output_shape(input), with `label` (which layer: index, name or spec text) put in
// front of any error, and an error naming both shapes when a dimension other than the
// batch comes out as 0: a network that collapses its input to nothing is refused when it
// is built, as PyTorch refuses it, instead of training on nothing.
Shape checked_output_shape(const Module& layer, const Shape& input, const std::string& label);

}  // namespace dpcore::layers
