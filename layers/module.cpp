#include "layers/module.h"

#include <algorithm>
#include <cmath>

#include "engine/backend.h"
#include "engine/trace.h"
#include "kernels/shapes.h"

namespace dpcore::layers {

std::string qualified_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

void mark_autocast_operands(std::vector<ParamSlot>& out, size_t first) {
  for (size_t i = first; i < out.size(); ++i) out[i].autocast_operand = true;
}

namespace {

void check_rank(const char* layer, const Shape& input, size_t rank, const std::string& what) {
  DPCORE_CHECK(input.size() == rank, layer, " expects ", what, ", got input ", shape_str(input));
}

// A window (conv kernel or pool) must fit the padded input: conv_out_size gives 0 where it
// does not. Names both shapes.
void check_window_fits(const char* what, const Shape& in, const Shape& out, int64_t kernel, int64_t pad) {
  if (out[2] > 0 && out[3] > 0) return;
  int64_t h = in[2] + 2 * pad, w = in[3] + 2 * pad;
  std::string padded = pad ? " (" + std::to_string(h) + "x" + std::to_string(w) + " with padding " +
                                 std::to_string(pad) + ")"
                           : "";
  fail("input ", shape_str(in), " would give an empty output ", shape_str(out), ": the ", kernel, "x", kernel, " ",
       what, " is larger than the ", in[2], "x", in[3], " input", padded);
}
}  // namespace

// ---------------------------------------------------------------- ParamInit
ParamInit ParamInit::pytorch_default(int64_t fan_in) { return {Kind::Uniform, 1.0 / std::sqrt(double(fan_in))}; }

ParamInit ParamInit::kaiming_normal_fan_out(int64_t fan_out) { return {Kind::Normal, std::sqrt(2.0 / double(fan_out))}; }

// ---------------------------------------------------------------- Conv2d
Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias,
               Init init)
    : in_(in_channels), out_(out_channels), kernel_(kernel), stride_(stride), padding_(padding), has_bias_(bias),
      init_(init) {
  DPCORE_CHECK(in_ > 0 && out_ > 0 && kernel_ > 0 && stride_ > 0 && padding_ >= 0, "conv: invalid configuration ",
               describe());
}

Tensor Conv2d::forward(const Tensor& x) {
  ops::Conv2dOptions opt{stride_, stride_, padding_, padding_};
  return ops::conv2d(x, weight_, bias_, opt);
}

Tensor Conv2d::forward_relu(const Tensor& x) {
  return ops::conv2d_relu(x, weight_, bias_, {stride_, stride_, padding_, padding_});
}

Tensor Conv2d::forward_relu_pool(const Tensor& x, const ops::Pool2dOptions& pool) {
  return ops::conv2d_relu_max_pool2d(x, weight_, bias_, {stride_, stride_, padding_, padding_}, pool);
}

Shape Conv2d::output_shape(const Shape& in) const {
  check_rank("conv", in, 4, "a batch of images [N, C, H, W]");
  DPCORE_CHECK(in[1] == in_, "input ", shape_str(in), " has ", in[1], " channels but the convolution takes ", in_);
  Shape out{in[0], out_, kernels::conv_out_size(in[2], kernel_, stride_, padding_),
            kernels::conv_out_size(in[3], kernel_, stride_, padding_)};
  check_window_fits("kernel", in, out, kernel_, padding_);
  return out;
}

std::string Conv2d::describe() const {
  return "conv(" + std::to_string(in_) + "->" + std::to_string(out_) + ", k" + std::to_string(kernel_) + ", s" +
         std::to_string(stride_) + ", p" + std::to_string(padding_) + (has_bias_ ? "" : ", no bias") + ")";
}

std::unique_ptr<Module> Conv2d::clone() const {
  return std::make_unique<Conv2d>(in_, out_, kernel_, stride_, padding_, has_bias_, init_);
}

void Conv2d::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  const int64_t fan_in = in_ * kernel_ * kernel_;
  const ParamInit weight_init = init_ == Init::KaimingNormalFanOut
                                    ? ParamInit::kaiming_normal_fan_out(out_ * kernel_ * kernel_)
                                    : ParamInit::pytorch_default(fan_in);
  const size_t first = out.size();
  out.push_back({qualified_name(prefix, "weight"), {out_, in_, kernel_, kernel_}, weight_init, &weight_});
  if (has_bias_) out.push_back({qualified_name(prefix, "bias"), {out_}, ParamInit::pytorch_default(fan_in), &bias_});
  mark_autocast_operands(out, first);
}

// ---------------------------------------------------------------- Linear
Linear::Linear(int64_t in_features, int64_t out_features, Init init, double init_std)
    : in_(in_features), out_(out_features), init_(init), init_std_(init_std) {
  DPCORE_CHECK(in_ > 0 && out_ > 0, "linear: invalid configuration ", describe());
  DPCORE_CHECK(init_ == Init::PyTorchDefault || init_std_ > 0, "linear: init_std ", init_std_,
               " must be positive");
}

Tensor Linear::forward(const Tensor& x) { return ops::linear(x, weight_, bias_); }

// Over the last dimension, any leading ones ([N, features], [N, T, features], ...), as
// torch.nn.Linear.
Shape Linear::output_shape(const Shape& in) const {
  DPCORE_CHECK(in.size() >= 2, "linear expects [N, ..., features], got input ", shape_str(in));
  Shape out = in;
  out.back() = out_;
  DPCORE_CHECK(in.back() == in_, "input ", shape_str(in), " has ", in.back(), " features but the layer takes ", in_,
               " (in_features), so it cannot give output ", shape_str(out));
  return out;
}

std::string Linear::describe() const { return "linear(" + std::to_string(in_) + "->" + std::to_string(out_) + ")"; }

std::unique_ptr<Module> Linear::clone() const { return std::make_unique<Linear>(in_, out_, init_, init_std_); }

void Linear::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  const size_t first = out.size();
  if (init_ == Init::BertNormal) {
    out.push_back({qualified_name(prefix, "weight"), {out_, in_}, ParamInit::normal(init_std_), &weight_});
    ParamSlot bias{qualified_name(prefix, "bias"), {out_}, ParamInit::constant(0.0), &bias_};
    bias.weight_decay = false;
    out.push_back(bias);
  } else {
    out.push_back({qualified_name(prefix, "weight"), {out_, in_}, ParamInit::pytorch_default(in_), &weight_});
    out.push_back({qualified_name(prefix, "bias"), {out_}, ParamInit::pytorch_default(in_), &bias_});
  }
  mark_autocast_operands(out, first);
}

// ---------------------------------------------------------------- Pool2d, GlobalAvgPool2d
Pool2d::Pool2d(const char* name, int64_t kernel, int64_t stride, int64_t padding) : name_(name) {
  if (stride < 0) stride = kernel;
  opt_ = {kernel, kernel, stride, stride, padding, padding};
  ops::check_max_pool2d_options(opt_);  // max_pool2d's rules, which avg_pool2d shares
}

Shape Pool2d::output_shape(const Shape& in) const {
  check_rank(name_, in, 4, "a batch of images [N, C, H, W]");
  Shape out{in[0], in[1], kernels::conv_out_size(in[2], opt_.kernel_h, opt_.stride_h, opt_.pad_h),
            kernels::conv_out_size(in[3], opt_.kernel_w, opt_.stride_w, opt_.pad_w)};
  check_window_fits("window", in, out, opt_.kernel_h, opt_.pad_h);
  return out;
}

std::string Pool2d::describe() const {
  return std::string(name_) + "(k" + std::to_string(opt_.kernel_h) + ", s" + std::to_string(opt_.stride_h) + ", p" +
         std::to_string(opt_.pad_h) + ")";
}

Shape GlobalAvgPool2d::output_shape(const Shape& in) const {
  check_rank("avgpool", in, 4, "a batch of images [N, C, H, W]");
  return {in[0], in[1], 1, 1};
}

// ---------------------------------------------------------------- BatchNorm2d
BatchNorm2d::BatchNorm2d(int64_t channels, double eps, double momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  DPCORE_CHECK(channels_ > 0 && eps_ >= 0 && momentum_ >= 0 && momentum_ <= 1, "bn: invalid configuration ",
               describe(), " (eps ", eps_, ", momentum ", momentum_, ")");
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  Tensor y = ops::batch_norm2d(x, weight_, bias_, running_mean_, running_var_, is_training(), momentum_, eps_,
                               is_training() ? group_ : nullptr);
  if (is_training()) {
    if (!one_.defined()) one_ = Tensor::full({}, 1.0, num_batches_tracked_.dtype(), num_batches_tracked_.device());
    backend_for(one_.device()).add(num_batches_tracked_, one_, num_batches_tracked_);
  }
  return y;
}

Shape BatchNorm2d::output_shape(const Shape& in) const {
  check_rank("bn", in, 4, "a batch of images [N, C, H, W]");
  DPCORE_CHECK(in[1] == channels_, "input ", shape_str(in), " has ", in[1], " channels but the batch norm takes ",
               channels_);
  return in;
}

std::string BatchNorm2d::describe() const { return "bn(" + std::to_string(channels_) + ")"; }

std::unique_ptr<Module> BatchNorm2d::clone() const { return std::make_unique<BatchNorm2d>(channels_, eps_, momentum_); }

void BatchNorm2d::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  out.push_back({qualified_name(prefix, "weight"), {channels_}, ParamInit::constant(1.0), &weight_});
  out.push_back({qualified_name(prefix, "bias"), {channels_}, ParamInit::constant(0.0), &bias_});
}

void BatchNorm2d::collect_buffers(const std::string& prefix, std::vector<BufferSlot>& out) {
  out.push_back({qualified_name(prefix, "running_mean"), {channels_}, 0.0, false, &running_mean_});
  out.push_back({qualified_name(prefix, "running_var"), {channels_}, 1.0, false, &running_var_});
  out.push_back({qualified_name(prefix, "num_batches_tracked"), {}, 0.0, true, &num_batches_tracked_});
  one_ = Tensor();  // the buffers move: made again on their device
}

// ---------------------------------------------------------------- Flatten, View, LogSoftmax
Shape Flatten::output_shape(const Shape& in) const {
  DPCORE_CHECK(!in.empty(), "flatten: input has no batch dimension");
  return {in[0], in[0] ? shape_numel(in) / in[0] : 0};
}

Shape View::output_shape(const Shape& in) const { return ops::resolve_reshape(in, shape_); }

std::string View::describe() const { return "view" + shape_str(shape_); }

Tensor LogSoftmax::forward(const Tensor& x) {
  if (x.dim() == 2) return ops::log_softmax(x);
  // The rows of [N, ..., classes] are independent: one [rows, classes] pass.
  const int64_t classes = x.size(x.dim() - 1);
  const Shape rows{classes ? x.numel() / classes : 0, classes};
  return ops::reshape(ops::log_softmax(ops::reshape(x, rows)), x.shape());
}

Shape LogSoftmax::output_shape(const Shape& in) const {
  DPCORE_CHECK(in.size() >= 2, "log_softmax: input ", shape_str(in), " must be [N, classes] or [N, ..., classes]");
  return in;
}

// ---------------------------------------------------------------- Sequential
Sequential& Sequential::add(std::string name, std::unique_ptr<Module> module) {
  for (auto& c : children_) DPCORE_CHECK(c.first != name, "sequential: two children named '", name, "'");
  children_.emplace_back(std::move(name), std::move(module));
  return *this;
}

Sequential& Sequential::add(std::unique_ptr<Module> module) { return add(std::to_string(children_.size()), std::move(module)); }

Tensor Sequential::forward(const Tensor& x) { return forward_prefix(x, children_.size()); }

namespace {
using Children = std::vector<std::pair<std::string, std::unique_ptr<Module>>>;
// Child i as an M, or null when it is not one or lies past `count`.
template <class M>
M* child_as(const Children& children, size_t i, size_t count) {
  return i < count ? dynamic_cast<M*>(children[i].second.get()) : nullptr;
}
// The span of children [i, i + n) (one layer, or a fused conv + relu (+ pool)) in a trace:
// "forward conv(1->32, k3, s1, p1) + relu", with the children's names and the input shape.
trace::Label forward_label(const Children& children, size_t i, size_t n, const Tensor& input) {
  std::string what, names;
  for (size_t k = i; k < i + n; ++k) {
    what += (k > i ? " + " : "") + children[k].second->describe();
    names += (k > i ? "," : "") + children[k].first;
  }
  return {"forward " + what, {{"layer", names}, {"input", shape_str(input.shape())}}};
}
}  // namespace

size_t Sequential::fused_span(size_t i, size_t end) const {
  end = std::min(end, children_.size());
  const bool relu = child_as<Conv2d>(children_, i, end) && child_as<ReLU>(children_, i + 1, end);
  return relu && child_as<MaxPool2d>(children_, i + 2, end) ? 3 : relu ? 2 : 1;
}

Tensor Sequential::forward_range(const Tensor& x, size_t begin, size_t end) {
  end = std::min(end, children_.size());
  Tensor h = x;
  for (size_t i = begin; i < end;) {
    const size_t n = fused_span(i, end);
    auto* conv = child_as<Conv2d>(children_, i, end);
    trace::Span span("forward", [&] { return forward_label(children_, i, n, h); });
    if (n == 3) h = conv->forward_relu_pool(h, child_as<MaxPool2d>(children_, i + 2, end)->options());
    else if (n == 2) h = conv->forward_relu(h);
    else h = children_[i].second->forward(h);
    i += n;
  }
  return h;
}

std::string Sequential::layer_label(size_t i) const {
  const std::string& name = children_[i].first;
  std::string label = "layer " + std::to_string(i);
  if (name != std::to_string(i)) label += " '" + name + "'";
  return label + " (" + children_[i].second->describe() + ")";
}

Shape checked_output_shape(const Module& layer, const Shape& input, const std::string& label) {
  Shape out;
  try {
    out = layer.output_shape(input);
  } catch (const Error& e) {
    fail(label, ": ", e.what());
  }
  for (size_t d = 1; d < out.size(); ++d) {
    DPCORE_CHECK(out[d] > 0, label, ": input ", shape_str(input), " gives an empty output ", shape_str(out));
  }
  return out;
}

Shape Sequential::output_shape(const Shape& input) const {
  Shape s = input;
  for (size_t i = 0; i < children_.size(); ++i) s = checked_output_shape(*children_[i].second, s, layer_label(i));
  return s;
}

std::string Sequential::describe() const {
  std::string s;
  for (auto& c : children_) s += (s.empty() ? "" : " ") + c.second->describe();
  return s;
}

std::unique_ptr<Module> Sequential::clone() const {
  auto copy = std::make_unique<Sequential>();
  for (auto& c : children_) copy->add(c.first, c.second->clone());
  return copy;
}

void Sequential::collect_parameters(const std::string& prefix, std::vector<ParamSlot>& out) {
  for (auto& c : children_) c.second->collect_parameters(qualified_name(prefix, c.first), out);
}

void Sequential::collect_buffers(const std::string& prefix, std::vector<BufferSlot>& out) {
  for (auto& c : children_) c.second->collect_buffers(qualified_name(prefix, c.first), out);
}

bool Sequential::takes_token_ids() const { return !children_.empty() && children_.front().second->takes_token_ids(); }

void Sequential::apply(const std::function<void(Module&)>& f) {
  f(*this);
  for (auto& c : children_) c.second->apply(f);
}

}  // namespace dpcore::layers
