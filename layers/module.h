// Modules: the building blocks a model is written in, mirroring torch.nn.
//
// A module does not own parameter memory. It declares parameter slots (name, shape,
// fan-in); the Model (layers/model.h) lays all slots out in one FlatParameters and points
// each slot at its view. That is what lets the whole model step, zero and allreduce as
// three flat buffers.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/ops.h"
#include "engine/tensor.h"

namespace dpcore::layers {

struct ParamSlot {
  std::string name;    // full state_dict name, e.g. "c1.weight"
  Shape shape;
  int64_t fan_in = 1;  // PyTorch's default init draws U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  Tensor* tensor = nullptr;
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
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0);
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
  Tensor weight_, bias_;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = -1 /* = kernel */, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
  const ops::Pool2dOptions& options() const { return opt_; }

 private:
  ops::Pool2dOptions opt_;
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

// Over dim 1 of [N, classes].
class LogSoftmax : public Module {
 public:
  Tensor forward(const Tensor& x) override { return ops::log_softmax(x); }
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
  Tensor forward_prefix(const Tensor& x, size_t count);
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  std::unique_ptr<Module> clone() const override;
  void collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) override;

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
