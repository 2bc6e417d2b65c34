#include "layers/model.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/memory_account.h"
#include "engine/random.h"
#include "engine/runtime.h"

namespace dpcore::layers {

Model::Model(std::unique_ptr<Sequential> net, Shape input_shape, Device device, DType dtype, uint64_t seed)
    : net_(std::move(net)), input_shape_(std::move(input_shape)), seed_(seed) {
  DPCORE_CHECK(!input_shape_.empty(), "model: the input shape of a sample is empty (give {C, H, W}, {T}, ...)");
  for (int64_t d : input_shape_) {
    DPCORE_CHECK(d > 0, "model: the input shape ", shape_str(input_shape_), " is empty");
  }
  Shape batch_shape{1};
  batch_shape.insert(batch_shape.end(), input_shape_.begin(), input_shape_.end());
  Shape out;
  try {
    out = net_->output_shape(batch_shape);  // names the layer and the shapes that do not fit
  } catch (const Error& e) {
    fail("model: ", e.what());
  }
  DPCORE_CHECK(out.size() >= 2, "model: the network must end in [N, classes] or [N, ..., classes], but ",
               shape_str(batch_shape), " comes out as ", shape_str(out));
  output_shape_.assign(out.begin() + 1, out.end());
  num_classes_ = out.back();
  logits_end_ = net_->size();
  if (logits_end_ > 0 && dynamic_cast<LogSoftmax*>(&net_->child(logits_end_ - 1))) --logits_end_;

  // (Sequential::collect_parameters(""), layer by layer, to know where each layer's begin.)
  std::vector<ParamSlot> tied_slots;
  for (size_t i = 0; i < net_->size(); ++i) {
    layer_slots_.push_back(slots_.size());
    std::vector<ParamSlot> layer;
    net_->child(i).collect_parameters(qualified_name("", net_->child_name(i)), layer);
    for (ParamSlot& s : layer) (s.tied_to.empty() ? slots_ : tied_slots).push_back(std::move(s));
  }
  layer_slots_.push_back(slots_.size());
  std::vector<ParamSpec> specs;
  for (const ParamSlot& s : slots_) specs.push_back({s.name, s.shape, s.weight_decay});
  params_ = std::make_unique<FlatParameters>(specs, dtype, device);
  for (size_t i = 0; i < slots_.size(); ++i) *slots_[i].tensor = params_->param(i);
  bind_tied_slots(tied_slots);

  std::vector<BufferSlot> buffer_slots;
  net_->collect_buffers("", buffer_slots);
  std::vector<BufferSpec> buffer_specs;
  for (const BufferSlot& b : buffer_slots) buffer_specs.push_back({b.name, b.shape, b.initial, b.counter});
  buffers_ = std::make_unique<FlatBuffers>(buffer_specs, dtype, device);
  for (size_t i = 0; i < buffer_slots.size(); ++i) *buffer_slots[i].tensor = buffers_->buffer(i);
  init_parameters(seed);
}

void Model::bind_tied_slots(const std::vector<ParamSlot>& tied_slots) {
  for (const ParamSlot& tied : tied_slots) {
    size_t owner = 0;
    while (owner < slots_.size() && slots_[owner].name != tied.tied_to) ++owner;
    DPCORE_CHECK(owner < slots_.size(), "model: parameter '", tied.name, "' is tied to '", tied.tied_to,
                 "', which the model does not have");
    DPCORE_CHECK(slots_[owner].shape == tied.shape, "model: parameter '", tied.name, "' ",
                 shape_str(tied.shape), " is tied to '", tied.tied_to, "' of another shape ",
                 shape_str(slots_[owner].shape));
    *tied.tensor = params_->param(owner);  // the same leaf: both uses accumulate into one gradient
    tied_names_.emplace_back(tied.name, tied.tied_to);
  }
}

Tensor Model::forward(const Tensor& x) {
  return leaving_model(under_precision([&] { return net_->forward(x); }, 0, net_->size()));
}

Tensor Model::forward_logits(const Tensor& x) {
  return leaving_model(under_precision([&] { return net_->forward_prefix(x, logits_end_); }, 0, logits_end_));
}

Tensor Model::forward_layers(const Tensor& x, size_t first_layer, size_t end_layer) {
  DPCORE_CHECK(first_layer <= end_layer && end_layer <= net_->size(), "model: layers ", first_layer, " to ",
               end_layer, " (end excluded) are not a range of its ", net_->size(), " layers");
  Tensor out = under_precision([&] { return net_->forward_range(x, first_layer, end_layer); }, first_layer, end_layer);
  return end_layer == net_->size() || end_layer == logits_end_ ? leaving_model(out) : out;
}

void Model::zero_grad() {
  params_->zero_grad();
  if (low_) low_->refresh();
}

void Model::set_precision(DType precision) {
  DPCORE_CHECK(precision == DType::Float32 || is_half_precision(precision), "model: precision ",
               dtype_name(precision), " is not float32, bfloat16 or float16");
  DPCORE_CHECK(precision == DType::Float32 || dtype() == DType::Float32, "model: precision ", dtype_name(precision),
               " needs float32 parameters (the master weights), not ", dtype_name(dtype()));
  precision_ = precision;
  low_.reset();
  layer_output_dtypes_input_.reset();
  if (precision == DType::Float32) return;
  low_ = std::make_unique<LowPrecisionParameters>(*params_, precision);
  low_->refresh();
}

namespace {
// The autocast operands bound to the 16-bit copy's views for one forward, and back to their
// float32 parameters afterwards (also when the forward throws).
class CopyBinding {
 public:
  // Binds slots [first, end).
  CopyBinding(const std::vector<ParamSlot>& slots, size_t first, size_t end, const LowPrecisionParameters& low)
      : slots_(slots) {
    for (size_t i = first; i < end; ++i) {
      if (!slots_[i].autocast_operand) continue;
      saved_.emplace_back(i, *slots_[i].tensor);
      *slots_[i].tensor = low.param(i);
    }
  }
  ~CopyBinding() {
    for (auto& [i, master] : saved_) *slots_[i].tensor = master;
  }
  CopyBinding(const CopyBinding&) = delete;
  CopyBinding& operator=(const CopyBinding&) = delete;

 private:
  const std::vector<ParamSlot>& slots_;
  std::vector<std::pair<size_t, Tensor>> saved_;
};
}  // namespace

Tensor Model::under_precision(const std::function<Tensor()>& f, size_t first_layer, size_t end_layer) {
  if (precision_ == DType::Float32) return f();
  AutocastScope autocast(precision_);
  if (!autograd::grad_mode_enabled()) return f();
  CopyBinding binding(slots_, layer_slots_[first_layer], layer_slots_[end_layer], *low_);
  return f();
}

const std::vector<DType>& Model::layer_output_dtypes(DType input) {
  if (layer_output_dtypes_input_ == input) return layer_output_dtypes_;
  // (A probe, not the caller's work: charged to no memory account, so a pipeline stage's
  // measured peak is its micro-batches'.)
  const MemoryAccount::Scope uncharged(nullptr);
  Shape one{1};
  one.insert(one.end(), input_shape_.begin(), input_shape_.end());
  Tensor t = Tensor::zeros(one, input, device());
  const bool training = is_training();
  eval();
  std::vector<DType> out;
  try {
    autograd::NoGradGuard no_graph;
    for (size_t i = 0; i < net_->size(); ++i) out.push_back((t = forward_layers(t, i, i + 1)).dtype());
  } catch (...) {
    train(training);
    throw;
  }
  train(training);
  // (Its kernels read the parameters on this thread's stream: done before other streams run.)
  runtime::synchronize_stream(device());
  layer_output_dtypes_ = std::move(out);
  layer_output_dtypes_input_ = input;
  return layer_output_dtypes_;
}

Tensor Model::leaving_model(const Tensor& out) const {
  return precision_ == DType::Float32 ? out : ops::to(out, DType::Float32);
}

void Model::set_batch_norm_group(ops::BatchNormGroup* group) { set_batch_norm_group(group, 0, net_->size()); }

void Model::set_batch_norm_group(ops::BatchNormGroup* group, size_t first_layer, size_t end_layer) {
  for (size_t i = first_layer; i < std::min(end_layer, net_->size()); ++i)
    net_->child(i).apply([group](Module& m) {
      if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) bn->set_group(group);
    });
}

void Model::init_parameters(uint64_t seed) {
  Generator gen(seed);
  std::vector<double> host(size_t(params_->total()), 0.0);
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto& e = params_->entries()[i];
    const ParamInit& init = slots_[i].init;
    for (int64_t j = 0; j < e.numel; ++j) {
      double& v = host[size_t(e.offset + j)];
      switch (init.kind) {
        case ParamInit::Kind::Uniform: v = gen.uniform(-init.value, init.value); break;
        case ParamInit::Kind::Normal: v = init.value * gen.normal(); break;
        case ParamInit::Kind::Constant: v = init.value; break;
      }
    }
    if (init.zero_row >= 0) {
      const int64_t row = e.numel / e.shape[0];
      std::fill_n(host.begin() + (e.offset + init.zero_row * row), row, 0.0);
    }
  }
  buffers_->reset();
  Tensor values = params_->values();
  if (values.dtype() == DType::Float64) {
    values.copy_(Tensor::from_vector(host, values.shape()));
  } else {
    values.copy_(Tensor::from_vector(std::vector<float>(host.begin(), host.end()), values.shape()));
  }
}

void Model::set_batch_position(uint64_t step, int64_t first_sample) {
  uint64_t index = 0;
  net_->apply([&](Module& m) { m.set_batch_position({derive_seed(seed_, index++), step, first_sample}); });
}

void Model::set_batch_position(uint64_t step, int64_t first_sample, size_t first_layer, size_t end_layer) {
  // Module k of net_->apply's order (the network itself first, then each child's modules in
  // turn) draws from derive_seed(seed_, k), as above.
  uint64_t index = 1;
  for (size_t i = 0; i < net_->size(); ++i)
    net_->child(i).apply([&](Module& m) {
      const uint64_t k = index++;
      if (i >= first_layer && i < end_layer) m.set_batch_position({derive_seed(seed_, k), step, first_sample});
    });
}

bool Model::draws_random_numbers() const {
  bool draws = false;
  net_->apply([&](Module& m) { draws = draws || m.draws_random_numbers(); });
  return draws;
}

std::unique_ptr<Model> Model::replicate(Device device) const {
  auto net = std::unique_ptr<Sequential>(static_cast<Sequential*>(net_->clone().release()));
  auto copy = std::make_unique<Model>(std::move(net), input_shape_, device, dtype(), seed_);
  copy->parameters().values().copy_(params_->values());
  if (!buffers_->empty()) copy->buffers().values().copy_(buffers_->values());
  copy->train(is_training());
  copy->set_precision(precision_);
  return copy;
}

std::string Model::summary() const {
  std::ostringstream os;
  Shape s{1};
  s.insert(s.end(), input_shape_.begin(), input_shape_.end());
  os << "input " << shape_str(s) << "\n";
  for (size_t i = 0; i < net_->size(); ++i) {
    s = net_->child(i).output_shape(s);
    os << "  " << net_->child_name(i) << ": " << net_->child(i).describe() << " -> " << shape_str(s) << "\n";
  }
  int64_t count = 0;
  for (const auto& e : params_->entries()) count += e.numel;
  os << count << " parameters in " << params_->entries().size() << " tensors";
  if (!buffers_->empty()) {
    int64_t buffer_count = 0;
    for (const auto& e : buffers_->entries()) buffer_count += e.numel;
    os << ", " << buffer_count << " buffer values in " << buffers_->entries().size() << " tensors";
  }
  return os.str();
}

}  // namespace dpcore::layers
